package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/kibotos/kibotos/internal/store"
)

// testWritesLeftForLastCommitWithTheRest: a write left for last
// (Tx.Last) runs once the transaction's function returned, sees its
// writes, commits with them (one it adds runs too), and one that fails
// rolls back the whole transaction.
func testWritesLeftForLastCommitWithTheRest(t *testing.T, dsn string) {
	s := Open(t, dsn)
	var order []string
	mustTx(t, s, func(tx *store.Tx) error {
		defer func() { order = append(order, "returned") }()
		tx.Last(func(tx *store.Tx) error {
			order = append(order, "last")
			if _, err := tx.GetVolume("vol-a", false); err != nil {
				return err // the function's write, seen
			}
			tx.Last(func(tx *store.Tx) error {
				order = append(order, "added")
				return tx.PutVolume(volume("vol-c", 1))
			})
			return tx.PutVolume(volume("vol-b", 1))
		})
		return tx.PutVolume(volume("vol-a", 1))
	})
	if want := []string{"returned", "last", "added"}; !slices.Equal(order, want) {
		t.Errorf("ran %v, want %v", order, want)
	}
	for _, id := range []string{"vol-a", "vol-b", "vol-c"} {
		mustTx(t, s, func(tx *store.Tx) error {
			_, err := tx.GetVolume(id, false)
			return err
		})
	}

	boom := errors.New("boom")
	err := s.Tx(ctx, func(tx *store.Tx) error {
		tx.Last(func(*store.Tx) error { return boom })
		return tx.PutVolume(volume("vol-d", 1))
	})
	if !errors.Is(err, boom) {
		t.Fatalf("a transaction whose last write failed: %v, want %v", err, boom)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		if _, err := tx.GetVolume("vol-d", false); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the write of a transaction whose last write failed: %v, want it rolled back", err)
		}
		return nil
	})
}

// callerKey marks the contexts of testPartsRunUnderTheirCallersContext.
type callerKey struct{}

// testPartsRunUnderTheirCallersContext: a part of a transaction run
// under a caller's context (Tx.In) sees that context's values, its
// statements run though that context has ended, and the transaction's
// own context is back once the part returned.
func testPartsRunUnderTheirCallersContext(t *testing.T, dsn string) {
	s := Open(t, dsn)
	ended, cancel := context.WithCancel(context.WithValue(ctx, callerKey{}, "caller"))
	cancel()
	mustTx(t, s, func(tx *store.Tx) error {
		own := tx.Context()
		if err := tx.In(ended, func(tx *store.Tx) error {
			if got := tx.Context().Value(callerKey{}); got != "caller" {
				t.Errorf("the part's context carries %v, want the caller's value", got)
			}
			return tx.PutVolume(volume("vol-in", 1)) // the caller's context ended
		}); err != nil {
			return err
		}
		if tx.Context() != own || tx.Context().Value(callerKey{}) != nil {
			t.Error("after the part the transaction's context is not its own")
		}
		return nil
	})
	mustTx(t, s, func(tx *store.Tx) error {
		_, err := tx.GetVolume("vol-in", false)
		return err
	})
}
