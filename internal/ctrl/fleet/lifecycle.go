package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/telemetry"
)

// nodeChange is the effect of one lifecycle command on a node, run in the
// admitting transaction on the locked, current registration.
type nodeChange struct {
	tx  *store.Tx
	n   *operatorv1.NodeRegistration
	now time.Time
	// wake are the commands whose node operations the change failed; they
	// are woken once it commits.
	wake []string
}

// touched records that the registration changed: a new version.
func (c *nodeChange) touched() {
	c.n.RegistrationVersion++
	c.n.UpdatedAt = timestamppb.New(c.now)
}

// view is the registration as the response shows it; the stored record
// keeps its own fields.
func (f *Fleet) viewOf(c *nodeChange) (*operatorv1.NodeRegistration, error) {
	lc, err := readLifecycle(c.tx, c.n.GetNodeId())
	if err != nil {
		return nil, err
	}
	n := f.view(proto.Clone(c.n).(*operatorv1.NodeRegistration), c.now, lc)
	return n, fillHeld(c.tx, n, lc)
}

// nodeCommand admits a lifecycle command on one node, or replays it:
// change runs on the locked registration of a node that exists and is not
// retired, at the version the caller expects, and returns the response.
func (f *Fleet) nodeCommand(ctx context.Context, meta *ctrlv1.CommandMetadata, kind, nodeID string, expected *uint64,
	req proto.Message, change func(c *nodeChange) (proto.Message, error),
) (proto.Message, error) {
	if err := command.ValidateID("command.command_id", meta); err != nil {
		return nil, err
	}
	if err := ValidateNodeID("node_id", nodeID); err != nil {
		return nil, err
	}
	var out proto.Message
	var wake []string
	err := command.Do(ctx, f.store, func(tx *store.Tx) error {
		now := f.now()
		wake = nil
		var err error
		out, err = command.Admit(tx, now, meta.GetCommandId(), kind, req, func() (command.Effect, error) {
			n, err := tx.GetNode(nodeID, true)
			if errors.Is(err, store.ErrNotFound) {
				return command.Effect{}, apierr.NotFound("node", nodeID)
			} else if err != nil {
				return command.Effect{}, err
			}
			if n.GetAdmission() == operatorv1.NodeAdmission_NODE_ADMISSION_RETIRED {
				return command.Effect{}, apierr.Precondition(nil, "node %s is retired; a new host takes a new node_id", nodeID)
			}
			if expected != nil && *expected != n.GetRegistrationVersion() {
				return command.Effect{}, apierr.Precondition(nil, "expected_registration_version %d is not the current %d", *expected, n.GetRegistrationVersion())
			}
			c := &nodeChange{tx: tx, n: n, now: now}
			res, err := change(c)
			if err != nil {
				return command.Effect{}, err
			}
			wake = c.wake
			return command.Effect{Target: nodeID, Result: res}, nil
		})
		return err
	})
	if err == nil && len(wake) > 0 {
		if werr := f.waker.Wake(context.WithoutCancel(ctx), wake...); werr != nil {
			f.log.WarnContext(telemetry.WithCommandID(ctx, meta.GetCommandId()), "wake commands of a node", "node_id", nodeID, "err", werr)
		}
	}
	return out, err
}

// setDraining stores the node's drain, a new registration version when it
// changes.
func (f *Fleet) setDraining(c *nodeChange, draining bool) error {
	lc, err := readLifecycle(c.tx, c.n.GetNodeId())
	if err != nil || lc.draining[c.n.GetNodeId()] == draining {
		return err
	}
	if err := c.tx.SetNodeDraining(c.n.GetNodeId(), draining); err != nil {
		return err
	}
	c.touched()
	return c.tx.PutNode(c.n)
}

// DrainNode stops new placement on a node; it reads DRAINING while
// executions are still charged to it and DRAINED once none is.
func (f *Fleet) DrainNode(ctx context.Context, req *operatorv1.DrainNodeRequest) (*operatorv1.DrainNodeResponse, error) {
	out, err := f.nodeCommand(ctx, req.GetCommand(), "DrainNode", req.GetNodeId(), req.ExpectedRegistrationVersion, req,
		func(c *nodeChange) (proto.Message, error) {
			if err := f.setDraining(c, true); err != nil {
				return nil, err
			}
			n, err := f.viewOf(c)
			return &operatorv1.DrainNodeResponse{Registration: n}, err
		})
	if err != nil {
		return nil, err
	}
	f.log.InfoContext(telemetry.WithCommandID(ctx, req.GetCommand().GetCommandId()), "node drained", "node_id", req.GetNodeId())
	return out.(*operatorv1.DrainNodeResponse), nil
}

// CancelNodeDrain makes a draining node a placement candidate again.
func (f *Fleet) CancelNodeDrain(ctx context.Context, req *operatorv1.CancelNodeDrainRequest) (*operatorv1.CancelNodeDrainResponse, error) {
	out, err := f.nodeCommand(ctx, req.GetCommand(), "CancelNodeDrain", req.GetNodeId(), req.ExpectedRegistrationVersion, req,
		func(c *nodeChange) (proto.Message, error) {
			if err := f.setDraining(c, false); err != nil {
				return nil, err
			}
			n, err := f.viewOf(c)
			return &operatorv1.CancelNodeDrainResponse{Registration: n}, err
		})
	if err != nil {
		return nil, err
	}
	_ = f.waker.WakeWaiting(context.WithoutCancel(ctx)) // placements waiting for a node may go on now
	return out.(*operatorv1.CancelNodeDrainResponse), nil
}

// IsolateNode records the operator's declaration that the node's current
// incarnation can no longer write to its pools, and releases everything it
// held, in one transaction.
func (f *Fleet) IsolateNode(ctx context.Context, req *operatorv1.IsolateNodeRequest) (*operatorv1.IsolateNodeResponse, error) {
	out, err := f.nodeCommand(ctx, req.GetCommand(), "IsolateNode", req.GetNodeId(), req.ExpectedRegistrationVersion, req,
		func(c *nodeChange) (proto.Message, error) { return f.isolate(c, req.GetIncarnation()) })
	if err != nil {
		return nil, err
	}
	res := out.(*operatorv1.IsolateNodeResponse)
	f.log.WarnContext(telemetry.WithCommandID(ctx, req.GetCommand().GetCommandId()), "node isolated by the operator", "node_id", req.GetNodeId(), "incarnation", req.GetIncarnation(),
		"failed_workspaces", res.GetFailedWorkspaces(), "released_volumes", res.GetReleasedVolumes(), "released_retained_layers", res.GetReleasedRetainedLayers())
	return res, nil
}

func (f *Fleet) isolate(c *nodeChange, incarnation uint64) (proto.Message, error) {
	n := c.n
	switch {
	case incarnation != n.GetIncarnation():
		return nil, apierr.Precondition(nil, "incarnation %d is not node %s's current incarnation %d", incarnation, n.GetNodeId(), n.GetIncarnation())
	case f.Live(n, c.now):
		return nil, apierr.Precondition(nil, "node %s has a live control session: power its host off or cut it off from its pools first", n.GetNodeId())
	}
	res := &operatorv1.IsolateNodeResponse{}
	if n.GetIsolated() {
		// Isolated already (by another command): it holds nothing any
		// more, so this one releases nothing and changes nothing.
		var err error
		res.Registration, err = f.viewOf(c)
		return res, err
	}
	n.Isolated = true
	n.IsolatedAt = timestamppb.New(c.now)
	c.touched()
	// The failure has no stage: the execution failed while it ran.
	failure := &ctrlv1.WorkspaceFailure{
		Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true, FailedAt: timestamppb.New(c.now),
		Message: fmt.Sprintf("node %s was isolated by the operator while the Workspace executed there; its data is crash-consistent", n.GetNodeId()),
	}
	interrupted, err := f.failOperations(c, "isolated by the operator")
	if err != nil {
		return nil, err
	}
	released, err := f.executions.ReleaseNode(c.tx, n.GetNodeId(), interrupted, failure)
	if err != nil {
		return nil, err
	}
	res.ReleasedVolumes, res.ReleasedRetainedLayers, res.FailedWorkspaces = released.Volumes, released.RetainedLayers, released.Workspaces
	// Every Allocation charged to the node goes too: those of executions
	// it ran and of starts it was booting.
	if _, err := c.tx.ReleaseNodeAllocations(n.GetNodeId()); err != nil {
		return nil, err
	}
	if err := c.tx.PutNode(n); err != nil {
		return nil, err
	}
	res.Registration, err = f.viewOf(c)
	return res, err
}

// failOperations fails every operation still addressed to the node, as
// unavailable: it will never answer them. It returns the unfinished
// commands that awaited them.
func (f *Fleet) failOperations(c *nodeChange, why string) ([]*store.CommandRow, error) {
	var commands []*store.CommandRow
	seen := map[string]bool{}
	for {
		pending, err := c.tx.PendingNodeOperations(c.n.GetNodeId(), 100)
		if err != nil || len(pending) == 0 {
			return commands, err
		}
		for _, op := range pending {
			op.State = storev1.NodeOperationState_NODE_OPERATION_STATE_FAILED
			op.Code = uint32(connect.CodeUnavailable)
			op.Message = why
			op.AnsweredAt = timestamppb.New(c.now)
			if err := c.tx.PutNodeOperation(op); err != nil {
				return nil, err
			}
			if seen[op.GetCommandId()] {
				continue
			}
			seen[op.GetCommandId()] = true
			cmd, err := c.tx.GetCommand(op.GetCommandId(), false)
			if errors.Is(err, store.ErrNotFound) {
				continue
			} else if err != nil {
				return nil, err
			}
			if !cmd.Final() {
				commands = append(commands, cmd)
				c.wake = append(c.wake, cmd.GetCommandId())
			}
		}
	}
}

// RetireNode ends a DRAINED or isolated node for good: a RETIRED
// tombstone, its pending enrollment grants revoked.
func (f *Fleet) RetireNode(ctx context.Context, req *operatorv1.RetireNodeRequest) (*operatorv1.RetireNodeResponse, error) {
	out, err := f.nodeCommand(ctx, req.GetCommand(), "RetireNode", req.GetNodeId(), req.ExpectedRegistrationVersion, req, f.retire)
	if err != nil {
		return nil, err
	}
	f.endSession(req.GetNodeId(), denied("node "+req.GetNodeId()+" is retired; a new host takes a new node_id"))
	f.log.InfoContext(telemetry.WithCommandID(ctx, req.GetCommand().GetCommandId()), "node retired", "node_id", req.GetNodeId())
	return out.(*operatorv1.RetireNodeResponse), nil
}

func (f *Fleet) retire(c *nodeChange) (proto.Message, error) {
	n := c.n
	current, err := f.viewOf(c)
	if err != nil {
		return nil, err
	}
	if current.GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_DRAINED && !n.GetIsolated() {
		return nil, apierr.Precondition(nil, "node %s is %s and not isolated: RetireNode takes a DRAINED node or one whose current incarnation is isolated",
			n.GetNodeId(), current.GetStatus())
	}
	// Pool membership is admission: a retired node's attachments stay on
	// its tombstone, as history, and count in no pool.
	n.Admission = operatorv1.NodeAdmission_NODE_ADMISSION_RETIRED
	n.RetiredAt = timestamppb.New(c.now)
	c.touched()
	if _, err := f.failOperations(c, "retired by the operator"); err != nil {
		return nil, err
	}
	revoked, err := f.revokeGrantsOf(c)
	if err != nil {
		return nil, err
	}
	if err := c.tx.PutNode(n); err != nil {
		return nil, err
	}
	tombstone, err := f.viewOf(c)
	return &operatorv1.RetireNodeResponse{Registration: tombstone, RevokedEnrollmentGrants: revoked}, err
}

// revokeGrantsOf revokes the active enrollment grants bound to the node.
func (f *Fleet) revokeGrantsOf(c *nodeChange) (uint64, error) {
	var revoked uint64
	after := ""
	for {
		grants, err := c.tx.ListGrants(after, 500)
		if err != nil {
			return 0, err
		}
		for _, g := range grants {
			if g.GetNodeId() != c.n.GetNodeId() || grantView(g, c.now).GetState() != operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_ACTIVE {
				continue
			}
			g.State = operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_REVOKED
			g.RevokedAt = timestamppb.New(c.now)
			if err := f.putGrant(c.tx, g); err != nil {
				return 0, err
			}
			revoked++
		}
		if len(grants) < 500 {
			return revoked, nil
		}
		after = grants[len(grants)-1].GetGrantId()
	}
}
