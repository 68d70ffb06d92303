package fleet

import (
	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
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
