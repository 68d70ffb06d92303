package workspace_test

import (
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

// A policy set after an earlier one fired applies in its turn: the fired
// policy leaves the expiration without a policy at the next revision, so
// the second policy's revision (and the id of the command that applies
// it, expire:<id>:<revision>) is not the first one's.
func TestAPolicySetAfterOneFiredApplies(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(256 * mib)})
		if err != nil {
			t.Fatal(err)
		}
		id := res.GetWorkspace().GetWorkspaceId()
		e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED) // as a stop leaves it; no node here

		e.expireOnce(t, id, "set-stop", 0, ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP)
		w := get(t, e, id)
		if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED || w.GetExpiration().GetPolicy() != nil || w.GetExpiration().GetRevision() != 2 {
			t.Fatalf("after the STOP policy fired: %v %v, want STOPPED, no policy, revision 2", w.GetState(), w.GetExpiration())
		}
		e.expireOnce(t, id, "set-delete", 2, ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_DELETE)
		if w := get(t, e, id); w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED || w.GetExpiration().GetRevision() != 4 {
			t.Errorf("after the second policy (DELETE) fired: %v %v, want DELETED at revision 4", w.GetState(), w.GetExpiration())
		}
	})
}

// A CAS token read before a clear is stale after it, even once a new
// policy is set: revisions only grow, and a clear of no policy changes
// nothing.
func TestAnExpirationTokenReadBeforeAClearIsStale(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		s := spec(256 * mib)
		s.Expiration = &ctrlv1.WorkspaceExpirationPolicy{Action: ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP, Deadline: timestamppb.New(time.Now().Add(time.Hour))}
		res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: s})
		if err != nil {
			t.Fatal(err)
		}
		id := res.GetWorkspace().GetWorkspaceId()
		read := res.GetWorkspace().GetExpiration().GetRevision()
		clear := &ctrlv1.WorkspaceExpirationChange{Change: &ctrlv1.WorkspaceExpirationChange_Clear{Clear: true}}
		cl, err := e.ws.UpdateExpiration(ctx, &ctrlv1.UpdateWorkspaceExpirationRequest{Command: cmd("clear"), WorkspaceId: id, ExpectedExpirationRevision: read, Change: clear})
		if err != nil || cl.GetWorkspace().GetExpiration().GetPolicy() != nil || cl.GetWorkspace().GetExpiration().GetRevision() != read+1 {
			t.Fatalf("clear: %v %v, want no policy at revision %d", cl.GetWorkspace().GetExpiration(), err, read+1)
		}
		again, err := e.ws.UpdateExpiration(ctx, &ctrlv1.UpdateWorkspaceExpirationRequest{Command: cmd("clear-again"), WorkspaceId: id, ExpectedExpirationRevision: read + 1, Change: clear})
		if err != nil || again.GetWorkspace().GetExpiration().GetRevision() != read+1 {
			t.Errorf("a clear of no policy: %v %v, want revision %d unchanged", again.GetWorkspace().GetExpiration(), err, read+1)
		}
		if _, err := e.ws.UpdateExpiration(ctx, &ctrlv1.UpdateWorkspaceExpirationRequest{Command: cmd("set"), WorkspaceId: id, ExpectedExpirationRevision: read + 1,
			Change: &ctrlv1.WorkspaceExpirationChange{Change: &ctrlv1.WorkspaceExpirationChange_Set{Set: &ctrlv1.WorkspaceExpirationPolicy{
				Action: ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_DELETE, Deadline: timestamppb.New(time.Now().Add(2 * time.Hour))}}}}); err != nil {
			t.Fatal(err)
		}
		_, err = e.ws.UpdateExpiration(ctx, &ctrlv1.UpdateWorkspaceExpirationRequest{Command: cmd("stale"), WorkspaceId: id, ExpectedExpirationRevision: read, Change: clear})
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("a clear with the token read before the first clear: %v, want failed_precondition", err)
		}
		if w := get(t, e, id); w.GetExpiration().GetPolicy().GetAction() != ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_DELETE {
			t.Errorf("the stale clear changed the policy: %v", w.GetExpiration())
		}
		// A change that neither sets nor clears is refused, naming it, and
		// changes nothing (X5).
		before := get(t, e, id).GetExpiration()
		for i, change := range []*ctrlv1.WorkspaceExpirationChange{
			nil, {}, {Change: &ctrlv1.WorkspaceExpirationChange_Clear{Clear: false}},
		} {
			_, err := e.ws.UpdateExpiration(ctx, &ctrlv1.UpdateWorkspaceExpirationRequest{Command: cmd(fmt.Sprintf("neither-%d", i)), WorkspaceId: id,
				ExpectedExpirationRevision: before.GetRevision(), Change: change})
			if connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "change" {
				t.Errorf("a change %v that neither sets nor clears: %v, want invalid_argument naming change", change, err)
			}
		}
		if after := get(t, e, id).GetExpiration(); !proto.Equal(after, before) {
			t.Errorf("the refused changes changed the expiration: %v, was %v", after, before)
		}
	})
}

// expireOnce sets a policy of action due in 50 ms, expecting revision
// expected, and applies it once its deadline passed.
func (e *env) expireOnce(t *testing.T, id, command string, expected uint64, action ctrlv1.WorkspaceExpirationAction) {
	t.Helper()
	deadline := time.Now().Add(50 * time.Millisecond)
	if _, err := e.ws.UpdateExpiration(ctx, &ctrlv1.UpdateWorkspaceExpirationRequest{Command: cmd(command), WorkspaceId: id, ExpectedExpirationRevision: expected,
		Change: &ctrlv1.WorkspaceExpirationChange{Change: &ctrlv1.WorkspaceExpirationChange_Set{Set: &ctrlv1.WorkspaceExpirationPolicy{Action: action, Deadline: timestamppb.New(deadline)}}}}); err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(deadline.Add(20 * time.Millisecond)) {
		time.Sleep(10 * time.Millisecond) // the deadline is the input here, not a readiness
	}
	if n, err := e.ws.ExpireDue(ctx); err != nil || n != 1 {
		t.Fatalf("ExpireDue after the deadline of %s: %d %v, want 1 expired", command, n, err)
	}
}
