package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
)

// Operation is one node operation a command step needs.
type Operation struct {
	// Name tells this operation from the command's others ("ensure").
	Name string
	// Pool is the storage pool the node must reach.
	Pool string
	// Body is the typed operation (kibotos.node.v1).
	Body proto.Message
	// Stage is where a failure is reported.
	Stage ctrlv1.FailureStage
	// Succeeded writes the command's effect once the node answered success.
	Succeeded func(tx *store.Tx, result *anypb.Any) error
	// Failed writes what a failure leaves behind.
	Failed func(tx *store.Tx, failure *ctrlv1.WorkspaceFailure) error
}

// Operate drives a command step that hands op to a node: it picks a node
// that reaches op.Pool (waiting while there is none), records the operation,
// waits for the node's answer (the node's session sends it, again after any
// reconnect), then ends the command.
func (f *Fleet) Operate(ctx context.Context, w *command.Work, op Operation) error {
	cmd := w.Command()
	opID := cmd.GetCommandId() + "/" + op.Name
	var existing *storev1.NodeOperation
	var nodeID string
	err := f.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		existing, err = tx.GetNodeOperation(opID, false)
		if errors.Is(err, store.ErrNotFound) {
			existing = nil
			nodeID, err = f.NodeForPool(tx, op.Pool)
		}
		return err
	})
	if err != nil {
		return err
	}
	if existing == nil {
		if nodeID == "" {
			return w.Wait(ctx, fmt.Sprintf("no connected node reaches storage pool %q", op.Pool), 30*time.Second)
		}
		body, err := anypb.New(op.Body)
		if err != nil {
			return err
		}
		err = w.Continue(ctx, fmt.Sprintf("%s: sent to node %s", op.Name, nodeID), 30*time.Second, func(tx *store.Tx, c *storev1.Command) error {
			c.NodeId = nodeID
			return StartOperation(tx, w.Now(), opID, nodeID, c.GetCommandId(), body)
		})
		if err == nil {
			f.Notify(nodeID)
		}
		return err
	}
	switch existing.GetState() {
	case storev1.NodeOperationState_NODE_OPERATION_STATE_SUCCEEDED:
		return w.Succeed(ctx, func(tx *store.Tx) error { return op.Succeeded(tx, existing.GetResult()) })
	case storev1.NodeOperationState_NODE_OPERATION_STATE_FAILED:
		failure := &ctrlv1.WorkspaceFailure{
			Stage: op.Stage, Reason: reasonOf(connect.Code(existing.GetCode())),
			Message:   fmt.Sprintf("node %s: %s", existing.GetNodeId(), existing.GetMessage()),
			Retryable: connect.Code(existing.GetCode()) == connect.CodeUnavailable,
		}
		return w.Fail(ctx, failure, func(tx *store.Tx) error { return op.Failed(tx, failure) })
	}
	return w.Continue(ctx, fmt.Sprintf("%s: waiting for node %s to answer", op.Name, existing.GetNodeId()), 30*time.Second, nil)
}

// reasonOf maps a node's canonical code to a FailureReason.
func reasonOf(code connect.Code) ctrlv1.FailureReason {
	switch code {
	case connect.CodeInvalidArgument:
		return ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST
	case connect.CodeNotFound:
		return ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND
	case connect.CodeFailedPrecondition, connect.CodeAlreadyExists, connect.CodeAborted:
		return ctrlv1.FailureReason_FAILURE_REASON_CONFLICT
	case connect.CodeResourceExhausted:
		return ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED
	case connect.CodeUnimplemented:
		return ctrlv1.FailureReason_FAILURE_REASON_UNSUPPORTED
	case connect.CodeUnavailable:
		return ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE
	case connect.CodeDeadlineExceeded:
		return ctrlv1.FailureReason_FAILURE_REASON_TIMED_OUT
	case connect.CodePermissionDenied:
		return ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED
	}
	return ctrlv1.FailureReason_FAILURE_REASON_INTERNAL
}
