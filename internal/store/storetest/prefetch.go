package storetest

import (
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// testPrefetchedRowsReadAsWritten: rows a transaction read ahead
// (Tx.Prefetch) answer its reads by key, one statement for all of a
// table's; and it still reads what it wrote: a statement that writes the
// table, or rows it kept (Coalesce) once written, are what it reads
// after; a row that did not exist when prefetched is read when it does.
func testPrefetchedRowsReadAsWritten(t *testing.T, dsn string) {
	s := Open(t, dsn)
	const n = 4
	ids := commandedWorkspaces(t, s, "pre", n)
	var rows []store.Row
	for i := range n {
		ws, cmd := ids(i)
		rows = append(append(rows, store.RowOfCommand(cmd)), store.RowsOfWorkspace(ws)...)
	}

	// The n commands', Workspaces' and runtimes' rows, prefetched, are
	// read with no statement more: one a table (on SQLite the hot rows
	// serve the Workspaces and runtimes, and are not prefetched).
	before := s.Stats()
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.Prefetch(rows); err != nil {
			return err
		}
		for i := range n {
			ws, cmd := ids(i)
			if c, err := tx.GetCommand(cmd, true); err != nil || c.GetTargetId() != ws || c.LeaseOwner != "me" || c.GetKind() != "k" {
				t.Errorf("command %s prefetched: target %q lease %q kind %q (%v), want %q, me, k", cmd, c.GetTargetId(), c.LeaseOwner, c.GetKind(), err, ws)
			}
			if w, err := tx.GetWorkspace(ws, true); err != nil || w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING {
				t.Errorf("Workspace %s prefetched: %v (%v)", ws, w.GetState(), err)
			}
			if rt, err := tx.GetRuntime(ws, true); err != nil || rt.GetLayerPool() != "pool-pre" {
				t.Errorf("runtime %s prefetched: pool %q (%v)", ws, rt.GetLayerPool(), err)
			}
		}
		return nil
	})
	if got := s.Stats().Statements - before.Statements; got > 3 {
		t.Errorf("%d commands, Workspaces and runtimes prefetched and read took %d statements, want at most 3", n, got)
	}

	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.Prefetch(append(rows, store.RowOfCommand("cmd-pre-new"))); err != nil {
			return err
		}
		ws, cmd := ids(0)
		// Written by a statement of their own: read as written.
		c, err := tx.GetCommand(cmd, true)
		if err != nil {
			return err
		}
		c.State = storev1.CommandState_COMMAND_STATE_SUCCEEDED
		if err := tx.UpdateCommand(c); err != nil {
			return err
		}
		if got, err := tx.GetCommand(cmd, true); err != nil || got.GetState() != c.GetState() {
			t.Errorf("command %s prefetched, then written: read %v (%v), want %v", cmd, got.GetState(), err, c.GetState())
		}
		w, err := tx.GetWorkspace(ws, true)
		if err != nil {
			return err
		}
		w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE
		if err := tx.PutWorkspace(w); err != nil {
			return err
		}
		if got, err := tx.GetWorkspace(ws, true); err != nil || got.GetState() != w.GetState() {
			t.Errorf("Workspace %s prefetched, then written: read %v (%v), want %v", ws, got.GetState(), err, w.GetState())
		}
		// Not there when prefetched, inserted after: read.
		fresh := commandRow("cmd-pre-new", ws, storev1.CommandState_COMMAND_STATE_ADMITTED)
		if _, err := tx.InsertCommand(fresh); err != nil {
			return err
		}
		if got, err := tx.GetCommand("cmd-pre-new", false); err != nil || got.GetState() != fresh.GetState() {
			t.Errorf("a command prefetched before it existed, then inserted: %v (%v), want %v", got.GetState(), err, fresh.GetState())
		}
		return nil
	})

	// Kept (Coalesce), then written by a later statement's need: read as
	// written, not as prefetched.
	mustTx(t, s, func(tx *store.Tx) error {
		tx.Coalesce()
		if err := tx.Prefetch(rows); err != nil {
			return err
		}
		ws, cmd := ids(1)
		c, err := tx.GetCommand(cmd, true)
		if err != nil {
			return err
		}
		c.State = storev1.CommandState_COMMAND_STATE_FAILED
		if err := tx.UpdateCommand(c); err != nil {
			return err
		}
		rt, err := tx.GetRuntime(ws, true)
		if err != nil {
			return err
		}
		rt.NodeId = "node-pre"
		if err := tx.PutRuntime(rt); err != nil {
			return err
		}
		// Both read the tables of the rows kept: those are written first.
		if err := tx.Prefetch([]store.Row{store.RowOfCommand(cmd)}); err != nil {
			return err
		}
		if _, err := tx.StoragePoolReserved("pool-pre"); err != nil {
			return err
		}
		if got, err := tx.GetCommand(cmd, true); err != nil || got.GetState() != c.GetState() {
			t.Errorf("command %s kept, written, then read: %v (%v), want %v", cmd, got.GetState(), err, c.GetState())
		}
		if got, err := tx.GetRuntime(ws, true); err != nil || got.GetNodeId() != rt.GetNodeId() {
			t.Errorf("runtime %s kept, written, then read: on %q (%v), want %q", ws, got.GetNodeId(), err, rt.GetNodeId())
		}
		return nil
	})
	mustTx(t, s, func(tx *store.Tx) error {
		want := map[string]storev1.CommandState{"cmd-pre-0": storev1.CommandState_COMMAND_STATE_SUCCEEDED, "cmd-pre-1": storev1.CommandState_COMMAND_STATE_FAILED,
			"cmd-pre-2": storev1.CommandState_COMMAND_STATE_RUNNING, "cmd-pre-new": storev1.CommandState_COMMAND_STATE_ADMITTED}
		for id, state := range want {
			if c, err := tx.GetCommand(id, false); err != nil || c.GetState() != state {
				t.Errorf("after the transactions, command %s %v (%v), want %v", id, c.GetState(), err, state)
			}
		}
		return nil
	})
}
