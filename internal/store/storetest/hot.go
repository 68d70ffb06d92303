package storetest

import (
	"errors"
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// testWorkspaceReadsSeeEveryWrite reads a Workspace and its runtime, rows
// SQLite's writer keeps in memory once read or written (hot rows), after
// each kind of write to them: committed, and made by a transaction that
// then failed after reading its own write.
func testWorkspaceReadsSeeEveryWrite(t *testing.T, dsn string) {
	s := Open(t, dsn)
	boom := errors.New("boom")
	put := func(tx *store.Tx, state ctrlv1.WorkspaceState, node string) error {
		if err := tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: "ws-hot", State: state}); err != nil {
			return err
		}
		return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: "ws-hot", NodeId: node})
	}
	read := func(tx *store.Tx, state ctrlv1.WorkspaceState, node, when string) {
		t.Helper()
		w, err := tx.GetWorkspace("ws-hot", true)
		if err != nil || w.GetState() != state {
			t.Errorf("%s: Workspace %v (%v), want %v", when, w.GetState(), err, state)
		}
		rt, err := tx.GetRuntime("ws-hot", true)
		if err != nil || rt.GetNodeId() != node {
			t.Errorf("%s: runtime on %q (%v), want %q", when, rt.GetNodeId(), err, node)
		}
	}
	check := func(state ctrlv1.WorkspaceState, node, when string) {
		t.Helper()
		mustTx(t, s, func(tx *store.Tx) error {
			read(tx, state, node, when)
			return nil
		})
	}
	creating, available := ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE
	mustTx(t, s, func(tx *store.Tx) error { return put(tx, creating, "") })
	check(creating, "", "written")
	check(creating, "", "read again")
	err := s.Tx(ctx, func(tx *store.Tx) error {
		if err := put(tx, available, "node-a"); err != nil {
			return err
		}
		read(tx, available, "node-a", "read after its write in one transaction")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	check(creating, "", "after a failed transaction's write")
	mustTx(t, s, func(tx *store.Tx) error { return put(tx, available, "node-a") })
	check(available, "node-a", "rewritten")
}

// testWorkspaceAndRuntimeInOneRead reads a Workspace with its runtime in
// one statement: none for an unknown id, an empty runtime (its id set)
// before one is written, and both as written.
func testWorkspaceAndRuntimeInOneRead(t *testing.T, dsn string) {
	s := Open(t, dsn)
	if _, _, err := s.WorkspaceAndRuntime(ctx, "ws-none"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown Workspace: %v, want not found", err)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		return tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: "ws-one", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING})
	})
	w, rt, err := s.WorkspaceAndRuntime(ctx, "ws-one")
	if err != nil || w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING || rt.GetWorkspaceId() != "ws-one" || rt.GetNodeId() != "" {
		t.Errorf("without a runtime: %v, %v, %v", w, rt, err)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: "ws-one", NodeId: "node-a", Starts: 2})
	})
	if _, rt, err := s.WorkspaceAndRuntime(ctx, "ws-one"); err != nil || rt.GetNodeId() != "node-a" || rt.GetStarts() != 2 {
		t.Errorf("with its runtime: %v, %v", rt, err)
	}
}
