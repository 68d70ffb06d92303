package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Transactions that wait while one runs share its group's commit: the
// failed one's writes are undone, the others' committed, and each returns
// only after the commit. White-box: the test holds a member on the
// connection and waits until the others queue behind it (grouper.waiting),
// which is what makes a group, so the grouping is not left to timing.
func TestGroupCommitSharesOneCommit(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "group.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := s.Stats()

	hold, holding := make(chan struct{}), make(chan struct{})
	errs := make([]error, 4)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs[0] = s.Tx(ctx, func(tx *Tx) error {
			close(holding)
			<-hold
			_, err := tx.InitSetting("first", []byte("1"))
			return err
		})
	}()
	<-holding
	failed := errors.New("this one fails after writing")
	for i := 1; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Tx(ctx, func(tx *Tx) error {
				if _, err := tx.InitSetting(fmt.Sprint("member-", i), []byte("1")); err != nil {
					return err
				}
				if i == 2 {
					return failed
				}
				return nil
			})
		}()
	}
	for s.group.waiting.Load() != 3 {
		runtime.Gosched()
	}
	close(hold)
	wg.Wait()

	for i, err := range errs {
		if want := error(nil); i == 2 {
			if !errors.Is(err, failed) {
				t.Errorf("member 2: %v, want its own error", err)
			}
		} else if err != want {
			t.Errorf("member %d: %v", i, err)
		}
	}
	if err := s.Tx(ctx, func(tx *Tx) error {
		for _, name := range []string{"first", "member-1", "member-3"} {
			if _, err := tx.Setting(name); err != nil {
				t.Errorf("%s after the commit: %v", name, err)
			}
		}
		if _, err := tx.Setting("member-2"); !errors.Is(err, ErrNotFound) {
			t.Errorf("the failed member's write: %v, want it undone", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	after := s.Stats()
	// The holder saw the three waiting and left the group open; the last
	// of them found none waiting and committed the four. The read is the
	// fifth transaction, with its own commit.
	if txs, commits := after.Transactions-before.Transactions, after.Commits-before.Commits; txs != 5 || commits != 2 {
		t.Errorf("%d transactions took %d commits; want 5 transactions in 2 commits", txs, commits)
	}
}
