package storetest

import (
	"errors"
	"testing"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// testReservationsCountedInMemory: a transaction's second read of a pool
// for a reservation costs no statement and counts what it reserved there
// since (Tx.ReservedInPool), with its rows kept unwritten (Coalesce); a
// write to the pool drops the count; and a transaction whose count missed
// a write that puts the pool past its capacity fails, keeping nothing.
func testReservationsCountedInMemory(t *testing.T, dsn string) {
	s := Open(t, dsn)
	const gib = 1 << 30
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.PutNode(nodeDeclaring("node-a", time.Now(), "pool-l")); err != nil {
			return err
		}
		if err := tx.SetStoragePoolCapacity("pool-l", 10*gib); err != nil {
			return err
		}
		return putLayer(tx, "ws-l0", "pool-l", ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, 2*gib)
	})

	// Three reservations as a batch of admissions makes them: each reads
	// the pool, then keeps its object's rows to write.
	before := s.Stats()
	mustTx(t, s, func(tx *store.Tx) error {
		tx.Coalesce()
		for i, id := range []string{"ws-l1", "ws-l2", "ws-l3"} {
			p, reserved, err := tx.StoragePoolForReservation("pool-l")
			if err != nil {
				return err
			}
			if want := uint64(2+i) * gib; reserved != want || p.CapacityBytes != 10*gib {
				t.Errorf("read %d: %d of %d reserved, want %d of %d", i+1, reserved, p.CapacityBytes, want, 10*gib)
			}
			tx.ReservedInPool("pool-l", gib)
			if err := putLayer(tx, id, "pool-l", ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING, gib); err != nil {
				return err
			}
		}
		return nil
	})
	// The first read (one statement on SQLite, two on PostgreSQL), the
	// rows kept (a statement a table), the check once they are written,
	// and the transaction's own: 7 and 8. Read each time, the pool cost a
	// statement or two more a reservation, and each reservation's rows
	// were written before it: 12 and 15.
	if got := s.Stats().Statements - before.Statements; got > 8 {
		t.Errorf("three reservations in a pool, their rows kept, took %d statements, want at most 8", got)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		if reserved, err := tx.StoragePoolReserved("pool-l"); err != nil || reserved != 5*gib {
			t.Errorf("after the transaction: %d reserved (%v), want %d", reserved, err, 5*gib)
		}
		// A write to the pool drops the count: read again.
		if _, _, err := tx.StoragePoolForReservation("pool-l"); err != nil {
			return err
		}
		if err := tx.SetStoragePoolCapacity("pool-l", 6*gib); err != nil {
			return err
		}
		p, reserved, err := tx.StoragePoolForReservation("pool-l")
		if err != nil {
			return err
		}
		if p.CapacityBytes != 6*gib || reserved != 5*gib {
			t.Errorf("read after the pool's capacity was set: %d of %d reserved, want %d of %d", reserved, p.CapacityBytes, 5*gib, 6*gib)
		}
		return nil
	})

	// A count that missed a write: 1 GiB counted, 4 written, 9 of 6.
	err := s.Tx(ctx, func(tx *store.Tx) error {
		tx.Coalesce()
		if _, _, err := tx.StoragePoolForReservation("pool-l"); err != nil {
			return err
		}
		tx.ReservedInPool("pool-l", gib)
		if err := putLayer(tx, "ws-l4", "pool-l", ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING, 4*gib); err != nil {
			return err
		}
		_, reserved, err := tx.StoragePoolForReservation("pool-l")
		if err == nil && reserved != 6*gib {
			t.Errorf("counted: %d, want %d", reserved, 6*gib)
		}
		return err
	})
	if !errors.Is(err, store.ErrReservationsExceed) {
		t.Fatalf("a transaction whose count missed a write past the pool's capacity: %v, want %v", err, store.ErrReservationsExceed)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		if reserved, err := tx.StoragePoolReserved("pool-l"); err != nil || reserved != 5*gib {
			t.Errorf("after the transaction that failed: %d reserved (%v), want %d", reserved, err, 5*gib)
		}
		if _, err := tx.GetWorkspace("ws-l4", false); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the failed transaction's Workspace: %v, want not found", err)
		}
		return nil
	})
}
