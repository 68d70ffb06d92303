package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// testCoalescedWritesReadAndCommitTogether: a transaction that coalesces
// its writes (Tx.Coalesce) reads what it wrote (commands, Workspaces,
// runtimes, read by key), sees its runtimes' reservations before it reads
// a pool's (the triggers' effects), commits every row it wrote, and
// leaves none when it fails.
func testCoalescedWritesReadAndCommitTogether(t *testing.T, dsn string) {
	s := Open(t, dsn)
	const n = 3
	ids := commandedWorkspaces(t, s, "co", n)
	// end writes every row of the n commands, and reads each back.
	end := func(tx *store.Tx, state storev1.CommandState, node string) error {
		tx.Coalesce()
		for i := range n {
			ws, cmd := ids(i)
			c, err := tx.GetCommand(cmd, true)
			if err != nil {
				return err
			}
			c.State, c.LeaseOwner, c.LeaseUntil = state, "", time.Time{}
			if err := tx.UpdateCommand(c); err != nil {
				return err
			}
			if got, err := tx.GetCommand(cmd, true); err != nil || got.GetState() != state || got.LeaseOwner != "" || got.GetKind() != "k" {
				t.Errorf("command %s read after its write: %v %q (%v), want %v", cmd, got.GetState(), got.LeaseOwner, err, state)
			}
			rt, err := tx.GetRuntime(ws, true)
			if err != nil {
				return err
			}
			rt.NodeId, rt.LayerCapacityBytes = node, 2<<30
			if err := tx.PutRuntime(rt); err != nil {
				return err
			}
			w, err := tx.GetWorkspace(ws, true)
			if err != nil {
				return err
			}
			w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE
			if err := tx.PutWorkspace(w); err != nil {
				return err
			}
			if got, err := tx.GetRuntime(ws, false); err != nil || got.GetNodeId() != node {
				t.Errorf("runtime %s read after its write: on %q (%v), want %q", ws, got.GetNodeId(), err, node)
			}
			if got, err := tx.GetWorkspace(ws, false); err != nil || got.GetState() != w.GetState() {
				t.Errorf("Workspace %s read after its write: %v (%v), want %v", ws, got.GetState(), err, w.GetState())
			}
		}
		// The runtimes' reservations, made by triggers, are seen.
		if got, err := tx.StoragePoolReserved("pool-co"); err != nil || got != n*2<<30 {
			t.Errorf("pool reserved after the coalesced runtimes %d (%v), want %d", got, err, n*2<<30)
		}
		return nil
	}
	check := func(when string, state storev1.CommandState, wsState ctrlv1.WorkspaceState, node string, reserved uint64) {
		t.Helper()
		mustTx(t, s, func(tx *store.Tx) error {
			for i := range n {
				ws, cmd := ids(i)
				c, err := tx.GetCommand(cmd, false)
				if err != nil || c.GetState() != state || c.GetKind() != "k" || c.GetTargetId() != ws {
					t.Errorf("%s: command %s %v kind %q target %q (%v), want %v", when, cmd, c.GetState(), c.GetKind(), c.GetTargetId(), err, state)
				}
				if w, err := tx.GetWorkspace(ws, false); err != nil || w.GetState() != wsState {
					t.Errorf("%s: Workspace %s %v (%v), want %v", when, ws, w.GetState(), err, wsState)
				}
				if rt, err := tx.GetRuntime(ws, false); err != nil || rt.GetNodeId() != node {
					t.Errorf("%s: runtime %s on %q (%v), want %q", when, ws, rt.GetNodeId(), err, node)
				}
			}
			if got, err := tx.StoragePoolReserved("pool-co"); err != nil || got != reserved {
				t.Errorf("%s: pool reserved %d (%v), want %d", when, got, err, reserved)
			}
			return nil
		})
	}
	boom := errors.New("boom")
	err := s.Tx(ctx, func(tx *store.Tx) error {
		if err := end(tx, storev1.CommandState_COMMAND_STATE_FAILED, "node-x"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("a coalesced transaction that failed: %v, want %v", err, boom)
	}
	check("after a coalesced transaction failed", storev1.CommandState_COMMAND_STATE_RUNNING, ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING, "", n<<30)
	mustTx(t, s, func(tx *store.Tx) error { return end(tx, storev1.CommandState_COMMAND_STATE_SUCCEEDED, "node-a") })
	check("after a coalesced transaction committed", storev1.CommandState_COMMAND_STATE_SUCCEEDED, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, "node-a", n*2<<30)

	// Written without reads, the n commands and runtimes take one
	// statement per table, where each is its own written at once.
	var cmds []*store.CommandRow
	var rts []*storev1.WorkspaceRuntime
	mustTx(t, s, func(tx *store.Tx) error {
		for i := range n {
			ws, cmd := ids(i)
			c, err := tx.GetCommand(cmd, false)
			if err != nil {
				return err
			}
			rt, err := tx.GetRuntime(ws, false)
			if err != nil {
				return err
			}
			cmds, rts = append(cmds, c), append(rts, rt)
		}
		return nil
	})
	write := func(coalesce bool) uint64 {
		before := s.Stats().Statements
		mustTx(t, s, func(tx *store.Tx) error {
			if coalesce {
				tx.Coalesce()
			}
			for i := range n {
				cmds[i].Attempts++
				if err := tx.UpdateCommand(cmds[i]); err != nil {
					return err
				}
				if err := tx.PutRuntime(rts[i]); err != nil {
					return err
				}
			}
			return nil
		})
		return s.Stats().Statements - before
	}
	if got := write(false); got < 2*n {
		t.Errorf("%d commands and runtimes written at once took %d statements, want at least %d", n, got, 2*n)
	}
	if got := write(true); got != 2 {
		t.Errorf("%d commands and runtimes coalesced took %d statements, want 2", n, got)
	}
	check("after coalesced writes without reads", storev1.CommandState_COMMAND_STATE_SUCCEEDED, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, "node-a", n*2<<30)
	mustTx(t, s, func(tx *store.Tx) error {
		if c, err := tx.GetCommand(cmds[0].GetCommandId(), false); err != nil || c.Attempts != cmds[0].Attempts {
			t.Errorf("attempts after coalesced writes %d (%v), want %d", c.Attempts, err, cmds[0].Attempts)
		}
		return nil
	})
}

// commandedWorkspaces stores n CREATING Workspaces, each with a runtime
// whose 1 GiB layer is in pool "pool-"+prefix and a RUNNING command leased
// to "me" (kind "k"), and returns their ids by index.
func commandedWorkspaces(t *testing.T, s *store.Store, prefix string, n int) func(i int) (ws, cmd string) {
	t.Helper()
	ids := func(i int) (ws, cmd string) {
		return fmt.Sprintf("ws-%s-%d", prefix, i), fmt.Sprintf("cmd-%s-%d", prefix, i)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		for i := range n {
			ws, cmd := ids(i)
			if err := tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: ws, State: ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING}); err != nil {
				return err
			}
			if err := tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: ws, LayerPool: "pool-" + prefix, LayerCapacityBytes: 1 << 30}); err != nil {
				return err
			}
			c := commandRow(cmd, ws, storev1.CommandState_COMMAND_STATE_RUNNING)
			c.LeaseOwner, c.LeaseUntil = "me", commandsAt.Add(time.Minute)
			if _, err := tx.InsertCommand(c); err != nil {
				return err
			}
		}
		return nil
	})
	return ids
}

// commandsAt is when the tests' commands were admitted.
var commandsAt = time.Unix(1700000000, 0)

// commandRow is a command of kind "k" on target, in state.
func commandRow(id, target string, state storev1.CommandState) *store.CommandRow {
	return &store.CommandRow{Command: &storev1.Command{CommandId: id, Kind: "k", TargetId: target, State: state,
		AdmittedAt: timestamppb.New(commandsAt), UpdatedAt: timestamppb.New(commandsAt)}, InputHash: []byte{1}, NextAttemptAt: commandsAt}
}
