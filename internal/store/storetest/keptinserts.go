package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// testKeptInsertsWrittenAtTheEnd: in a transaction that coalesces its
// writes (Tx.Coalesce) on PostgreSQL, new commands, node operations and
// Allocations are kept and inserted at its end, one statement a table;
// what it reads of them (by key, or a node's sums beside them) is what it
// wrote; and an insert whose key exists fails the transaction, keeping
// none of its writes. On SQLite they are inserted at once (keepInsert
// says why), and read the same.
func testKeptInsertsWrittenAtTheEnd(t *testing.T, dsn string) {
	s := Open(t, dsn)
	kept := strings.HasPrefix(dsn, "postgres")
	putNodes(t, s, placeableNode("node-a"))
	op := func(id string) *storev1.NodeOperation {
		return &storev1.NodeOperation{OperationId: id, NodeId: "node-a", CommandId: "cmd-ki", State: storev1.NodeOperationState_NODE_OPERATION_STATE_PENDING,
			CreatedAt: timestamppb.New(commandsAt)}
	}
	const n = 3
	// n operations kept: one statement at the end, where each was one.
	before := s.Stats()
	mustTx(t, s, func(tx *store.Tx) error {
		tx.Coalesce()
		for i := range n {
			if inserted, err := tx.InsertNodeOperation(op(fmt.Sprintf("cmd-ki/op-%d", i))); err != nil || !inserted {
				return fmt.Errorf("operation %d kept: inserted %v, %v", i, inserted, err)
			}
		}
		return nil
	})
	if got := s.Stats().Statements - before.Statements; kept && got != 1 || !kept && got != n {
		t.Errorf("%d operations inserted took %d statements, want 1 kept (PostgreSQL), %d not (SQLite)", n, got, n)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		tx.Coalesce()
		for i := range n {
			if ok, err := tx.Allocate(allocation(fmt.Sprintf("ws-ki-%d", i), "node-a", 100, 1<<20), unit); err != nil || !ok {
				return fmt.Errorf("allocation %d: fits %v, %v", i, ok, err)
			}
		}
		return nil
	})
	mustTx(t, s, func(tx *store.Tx) error {
		tx.Coalesce()
		if _, err := tx.InsertNodeOperation(op("cmd-ki/op-new")); err != nil {
			return err
		}
		if _, err := tx.Allocate(allocation("ws-ki-new", "node-a", 100, 1<<20), unit); err != nil {
			return err
		}
		// Read in the transaction: written first.
		if got, err := tx.GetNodeOperation("cmd-ki/op-new", false); err != nil || got.GetCommandId() != "cmd-ki" {
			t.Errorf("an operation kept, read by key: %v (%v)", got, err)
		}
		if got, err := tx.GetAllocation("ws-ki-new"); err != nil || got.NodeID != "node-a" || got.CPUMillis != 100 {
			t.Errorf("an Allocation kept, read by key: %+v (%v)", got, err)
		}
		return nil
	})
	if a := placementOf(t, s, "node-a").Allocated; a.Count != n+1 || a.CPUMillis != (n+1)*100 {
		t.Errorf("node-a after the kept Allocations: %d allocations, %d millicores, want %d, %d", a.Count, a.CPUMillis, n+1, (n+1)*100)
	}

	// A command kept is read as written, and inserted at the end; one
	// whose id exists (a replay) fails the transaction there.
	cmd := func(id string) *store.CommandRow {
		return commandRow(id, "ws-ki", storev1.CommandState_COMMAND_STATE_ADMITTED)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		tx.Coalesce()
		if inserted, err := tx.InsertCommand(cmd("cmd-ki")); err != nil || !inserted {
			return fmt.Errorf("a command kept: inserted %v, %v", inserted, err)
		}
		if got, err := tx.GetCommand("cmd-ki", true); err != nil || got.GetKind() != "k" || got.GetTargetId() != "ws-ki" {
			t.Errorf("a command kept, read by key: %v (%v)", got, err)
		}
		return nil
	})
	if err := s.Tx(ctx, func(tx *store.Tx) error {
		tx.Coalesce()
		inserted, err := tx.InsertCommand(cmd("cmd-ki"))
		if err == nil && !kept && inserted {
			t.Error("an existing command inserted at once: inserted")
		}
		return err
	}); kept && err == nil {
		t.Error("a coalescing transaction that kept an existing command: no error")
	}

	// An operation whose id exists, kept: the transaction fails at its end
	// with nothing of it written.
	if !kept {
		return
	}
	err := s.Tx(ctx, func(tx *store.Tx) error {
		tx.Coalesce()
		if _, err := tx.Allocate(allocation("ws-ki-lost", "node-a", 100, 1<<20), unit); err != nil {
			return err
		}
		_, err := tx.InsertNodeOperation(op("cmd-ki/op-0"))
		return err
	})
	if err == nil {
		t.Fatal("a coalescing transaction that kept an existing operation: no error")
	}
	mustTx(t, s, func(tx *store.Tx) error {
		if _, err := tx.GetAllocation("ws-ki-lost"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the failed transaction's Allocation: %v, want not found", err)
		}
		return nil
	})
	if a := placementOf(t, s, "node-a").Allocated; a.Count != n+1 {
		t.Errorf("node-a after the failed transaction: %d allocations, want %d", a.Count, n+1)
	}
}
