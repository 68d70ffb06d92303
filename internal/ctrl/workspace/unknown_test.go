package workspace_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/session"
	"github.com/kibotos/kibotos/internal/store"
)

// "UNKNOWN is an observed state": an AVAILABLE Workspace whose execution
// is on a node that has been without a live control session for the
// fleet's UnobservedAfter (15 s) reads UNKNOWN (ctrl cannot observe that
// execution) in GetWorkspace, WaitWorkspace (alone and with a command)
// and ListWorkspaces, with or without a Volume; a shorter loss leaves it
// AVAILABLE. Its record stays AVAILABLE, and it reads AVAILABLE again
// once the session is live. A waiter for UNKNOWN is woken by the
// session's end, which writes no Workspace, and when the loss has lasted
// long enough, which writes nothing (on SQLite a waiter reads only when
// told). A stop under way on such a node reads STOPPING: its command says
// what it waits for.
func TestAWorkspaceWhoseNodeHasNoSessionReadsUnknown(t *testing.T) {
	unknown := ctrlv1.WorkspaceState_WORKSPACE_STATE_UNKNOWN
	available := ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE
	forEachBackend(t, func(t *testing.T, e *env) {
		without := e.createWithoutVolume(t, "c1")
		s := spec(256 * mib)
		s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: e.availableVolume(t, "v1")}
		res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c2"), Spec: s})
		if err != nil {
			t.Fatal(err)
		}
		with := res.GetWorkspace().GetWorkspaceId()
		e.setSession(t, "node-a", true, 0)
		for _, id := range []string{without, with} {
			e.forceWorkspace(t, id, available)
			e.runOn(t, id, "node-a")
			e.expectState(t, id, available)
		}
		e.setSession(t, "node-a", false, 0) // lost just now
		e.expectState(t, without, available)
		e.expectState(t, with, available)

		waitUnknown := func() <-chan *ctrlv1.WaitWorkspaceResponse {
			waited := make(chan *ctrlv1.WaitWorkspaceResponse, 1)
			go func() {
				res, err := e.ws.Wait(ctx, &ctrlv1.WaitWorkspaceRequest{WorkspaceId: without, States: []ctrlv1.WorkspaceState{unknown}, Timeout: durationpb.New(time.Minute)})
				if err != nil {
					t.Error(err)
				}
				waited <- res
			}()
			return waited
		}
		// Lost 14 s ago: UNKNOWN a second from now, with no write.
		waited := waitUnknown()
		e.setSession(t, "node-a", false, 14*time.Second)
		if got := <-waited; !got.GetReached() || got.GetWorkspace().GetState() != unknown {
			t.Errorf("a wait for UNKNOWN across the loss's first 15 s: reached %t, %v", got.GetReached(), got.GetWorkspace().GetState())
		}
		for _, id := range []string{without, with} {
			e.expectState(t, id, unknown)
			var stored *ctrlv1.Workspace
			if err := e.store.Snapshot(ctx, func(tx *store.Tx) (err error) {
				stored, err = tx.GetWorkspace(id, false)
				return err
			}); err != nil || stored.GetState() != available {
				t.Errorf("the record of %s: %v, %v; want it left AVAILABLE", id, stored.GetState(), err)
			}
			// Nothing is admitted differently: a session is issued for
			// the execution, which may still run (session.proto).
			issued, err := session.New(e.store, "http://endpoint").Issue(ctx, &ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: id})
			if err != nil || issued.GetSession().GetGeneration() != stored.GetGeneration() {
				t.Errorf("IssueDataPlaneSession for %s reading UNKNOWN: %v, %v; want a session for its execution", id, issued.GetSession(), err)
			}
		}

		e.setSession(t, "node-a", true, 0)
		e.expectState(t, without, available)
		e.expectState(t, with, available)
		// Lost a minute ago, as a waiter waits: UNKNOWN at once.
		waited = waitUnknown()
		e.setSession(t, "node-a", false, time.Minute)
		if got := <-waited; !got.GetReached() || got.GetWorkspace().GetState() != unknown {
			t.Errorf("a wait for UNKNOWN across the session's end: reached %t, %v", got.GetReached(), got.GetWorkspace().GetState())
		}

		e.changeWorkspace(t, with, stoppedBy(ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPING))
		e.expectState(t, with, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPING)
	})
}

// setSession records node id's control session live now, or lost ago, as
// the replica holding it writes it.
func (e *env) setSession(t *testing.T, id string, live bool, ago time.Duration) {
	t.Helper()
	if err := e.store.Tx(ctx, func(tx *store.Tx) error {
		n, err := tx.GetNode(id, true)
		if err != nil {
			return err
		}
		now := time.Now()
		n.Session = &operatorv1.NodeSessionSummary{
			Live: true, ConnectedAt: timestamppb.New(now.Add(-time.Hour)), LastSeenAt: timestamppb.New(now), LiveUntil: timestamppb.New(now.Add(time.Minute)),
		}
		if !live {
			n.Session.Live, n.Session.LiveUntil = false, nil
			n.Session.LastSeenAt = timestamppb.New(now.Add(-ago))
			n.Session.DisconnectedAt = timestamppb.New(now.Add(-ago))
		}
		return tx.PutNode(n)
	}); err != nil {
		t.Fatal(err)
	}
}

// runOn records an execution of Workspace id on node.
func (e *env) runOn(t *testing.T, id, node string) {
	t.Helper()
	if err := e.store.Tx(ctx, func(tx *store.Tx) error {
		return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: id, InstanceId: id + ".1", NodeId: node, Starts: 1})
	}); err != nil {
		t.Fatal(err)
	}
}

// expectState checks that GetWorkspace, WaitWorkspace with the command
// that made the Workspace ("c1" or "c2": with a command the view is read
// in a snapshot) and ListWorkspaces read Workspace id in state.
func (e *env) expectState(t *testing.T, id string, state ctrlv1.WorkspaceState) {
	t.Helper()
	if got := get(t, e, id).GetState(); got != state {
		t.Errorf("GetWorkspace %s: %v, want %v", id, got, state)
	}
	for _, c := range []string{"c1", "c2"} {
		res, err := e.ws.Wait(ctx, &ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, CommandId: c, States: []ctrlv1.WorkspaceState{state}, Timeout: durationpb.New(time.Millisecond)})
		if err != nil {
			continue // another Workspace's command
		}
		if res.GetWorkspace().GetState() != state {
			t.Errorf("WaitWorkspace %s with command %s: %v, want %v", id, c, res.GetWorkspace().GetState(), state)
		}
	}
	list, err := e.ws.List(ctx, &ctrlv1.ListWorkspacesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range list.GetWorkspaces() {
		if w.GetWorkspaceId() == id && w.GetState() != state {
			t.Errorf("ListWorkspaces %s: %v, want %v", id, w.GetState(), state)
		}
	}
}
