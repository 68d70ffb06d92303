package command

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// claimedWorks admits n long commands and claims each for a worker of r.
func claimedWorks(t *testing.T, s *store.Store, r *Runner, n int) []*Work {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("together-%d", i)
		req := &ctrlv1.CreateVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: id}}
		if err := Do(ctx, s, func(tx *store.Tx) error {
			_, err := Admit(tx, time.Now(), id, "CreateVolume", req, func() (Effect, error) {
				return Effect{Target: "vol-" + id, Result: &ctrlv1.CreateVolumeResponse{}, Long: true}, nil
			})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	var works []*Work
	for range n {
		c, err := r.claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		works = append(works, &Work{r: r, c: c})
	}
	return works
}

// Ends applied together share one transaction, and their commands' rows
// one statement: n ends read their n commands by one statement and write
// them by one. One end that fails ends none of them.
func TestEndsTogetherShareATransactionAndTheirWrites(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			s := storetest.Open(t, b.DSN(t))
			r := NewRunner(s, "test-replica", slog.Default())
			r.Handle("CreateVolume", func(context.Context, *Work) error { return nil })
			const n = 5
			works := claimedWorks(t, s, r, n)
			ends := func(fail int) *batch[*togetherEnd] {
				out := &batch[*togetherEnd]{}
				for i, w := range works {
					fn := func(*store.Tx) error { return nil }
					if i == fail {
						fn = func(*store.Tx) error { return errors.New("refused") }
					}
					out.items = append(out.items, &togetherEnd{w: w, fn: fn, done: make(chan error, 1)})
				}
				return out
			}
			if err := r.endTogether(context.Background(), ends(2)); err == nil {
				t.Fatal("ends together with one refused: no error")
			}
			for _, w := range works {
				if c := StoredCommand(t, s, w.Command().GetCommandId()); c.Final() || c.LeaseOwner != "test-replica" {
					t.Errorf("command %s after ends together failed: %v leased to %q, want it unended and leased", c.GetCommandId(), c.GetState(), c.LeaseOwner)
				}
			}
			before := s.Stats()
			if err := r.endTogether(context.Background(), ends(-1)); err != nil {
				t.Fatal(err)
			}
			after := s.Stats()
			if got := after.Transactions - before.Transactions; got != 1 {
				t.Errorf("%d ends together took %d transactions, want 1", n, got)
			}
			if got := after.Statements - before.Statements; got != 2 {
				t.Errorf("%d ends together took %d statements, want 2 (one read of their rows, one write)", n, got)
			}
			for _, w := range works {
				c := StoredCommand(t, s, w.Command().GetCommandId())
				if c.GetState() != storev1.CommandState_COMMAND_STATE_SUCCEEDED || c.GetCompletedAt() == nil {
					t.Errorf("command %s after ends together: %v completed %v", c.GetCommandId(), c.GetState(), c.GetCompletedAt())
				}
				if w.Command().GetState() != c.GetState() {
					t.Errorf("the worker's command %v, stored %v", w.Command().GetState(), c.GetState())
				}
			}
		})
	}
}

// StoredCommand reads command id as stored (for this package's black-box
// tests too).
func StoredCommand(t *testing.T, s *store.Store, id string) *store.CommandRow {
	t.Helper()
	var c *store.CommandRow
	if err := s.Tx(context.Background(), func(tx *store.Tx) error {
		var err error
		c, err = tx.GetCommand(id, false)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// Admissions made together share one transaction, and their commands'
// rows fewer statements than each alone; one that fails admits none of
// them.
func TestAdmissionsTogetherShareATransaction(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			s := storetest.Open(t, b.DSN(t))
			r := NewRunner(s, "test-replica", slog.Default())
			onSQLite := b.Name == "sqlite"
			const n = 5
			admissionsOf := func(prefix string, fail int) *batch[*admitMember] {
				out := &batch[*admitMember]{}
				for i := range n {
					id := fmt.Sprintf("%s-%d", prefix, i)
					req := &ctrlv1.CreateVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: id}}
					fn := func(tx *store.Tx) error {
						_, err := Admit(tx, time.Now(), id, "CreateVolume", req, func() (Effect, error) {
							if i == fail {
								return Effect{}, errors.New("refused")
							}
							return Effect{Target: "vol-" + id, Result: &ctrlv1.CreateVolumeResponse{}}, nil
						})
						return err
					}
					out.items = append(out.items, &admitMember{ctx: context.Background(), fn: fn, adm: &admissions{}, done: make(chan error, 1)})
				}
				return out
			}
			if err := r.admitTogether(context.Background(), admissionsOf("refused", 2)); err == nil {
				t.Fatal("admissions together with one refused: no error")
			}
			if err := s.Tx(context.Background(), func(tx *store.Tx) error { _, err := tx.GetCommand("refused-0", false); return err }); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("a command of a batch that failed: %v, want none admitted", err)
			}
			before := s.Stats()
			b := admissionsOf("together", -1)
			if err := r.admitTogether(context.Background(), b); err != nil {
				t.Fatal(err)
			}
			after := s.Stats()
			if got := after.Transactions - before.Transactions; got != 1 {
				t.Errorf("%d admissions together took %d transactions, want 1", n, got)
			}
			// On PostgreSQL the commands are inserted by one statement at
			// the end; on SQLite by a prepared insert each (store's
			// keepInsert says why).
			want := uint64(1)
			if onSQLite {
				want = n
			}
			if got := after.Statements - before.Statements; got != want {
				t.Errorf("%d admissions together took %d statements, want %d", n, got, want)
			}
			for i, m := range b.items {
				if len(m.adm.list) != 1 || m.adm.list[0].id != fmt.Sprint("together-", i) {
					t.Errorf("member %d admitted %+v, want its own command", i, m.adm.list)
				}
				if c := StoredCommand(t, s, fmt.Sprint("together-", i)); c.GetState() != storev1.CommandState_COMMAND_STATE_SUCCEEDED {
					t.Errorf("command together-%d %v, want SUCCEEDED", i, c.GetState())
				}
			}
		})
	}
}
