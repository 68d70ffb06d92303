package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"modernc.org/sqlite"
)

// Transactions that wait while one runs share its group's commit: the
// failed one's writes are undone, the others' committed, and each returns
// only after the commit. White-box: the test holds a member on the
// connection and waits until the others queue behind it (grouper.waiting),
// which is what makes a group, so the grouping is not left to timing.
func TestGroupCommitSharesOneCommit(t *testing.T) {
	ctx := context.Background()
	s := openGroupTestStore(t)
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

// A group ends when it is full even while others still wait: maxGroup
// members share one commit and the ones behind them start the next group.
// The holder keeps the connection until every other call waits, so the
// first group's size is the bound, not timing.
func TestGroupCommitEndsAGroupAtMaxGroup(t *testing.T) {
	ctx := context.Background()
	s := openGroupTestStore(t)
	before := s.Stats()

	const extra = 5
	hold, holding := make(chan struct{}), make(chan struct{})
	errs := make([]error, maxGroup+extra)
	var wg sync.WaitGroup
	member := func(i int, wait func()) {
		defer wg.Done()
		errs[i] = s.Tx(ctx, func(tx *Tx) error {
			wait()
			_, err := tx.InitSetting(fmt.Sprint("member-", i), []byte("1"))
			return err
		})
	}
	wg.Add(1)
	go member(0, func() { close(holding); <-hold })
	<-holding
	for i := 1; i < len(errs); i++ {
		wg.Add(1)
		go member(i, func() {})
	}
	for int(s.group.waiting.Load()) != len(errs)-1 {
		runtime.Gosched()
	}
	close(hold)
	wg.Wait()

	for i, err := range errs {
		if err != nil {
			t.Errorf("member %d: %v", i, err)
		}
	}
	after := s.Stats()
	// maxGroup members in the first commit, the extra ones in a second:
	// each call returned after its own group's commit.
	if txs, commits := after.Transactions-before.Transactions, after.Commits-before.Commits; txs != uint64(len(errs)) || commits != 2 {
		t.Errorf("%d transactions took %d commits; want %d in 2 commits", txs, commits, len(errs))
	}
	if err := s.Tx(ctx, func(tx *Tx) error {
		for i := range errs {
			if _, err := tx.Setting(fmt.Sprint("member-", i)); err != nil {
				t.Errorf("member-%d after the commits: %v", i, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// openGroupTestStore opens a store on a new SQLite file, closed when t ends.
func openGroupTestStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "group.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// cancelDuring is what the SQL function kibotos_test_cancel() calls: the
// test's way to end a caller's context while its statement runs.
var cancelDuring func()

func init() {
	sqlite.MustRegisterScalarFunction("kibotos_test_cancel", 0, func(*sqlite.FunctionContext, []driver.Value) (driver.Value, error) {
		if cancelDuring != nil {
			cancelDuring()
		}
		return int64(0), nil
	})
}

// A caller whose context ends while its statement runs does not break the
// group it shares: SQLite's driver would interrupt the statement, and
// SQLite rolls back the whole transaction of an interrupted write, every
// member's writes with it. The member's statement sees the context end
// from inside (a SQL function cancels it), then runs on for some 300,000
// steps, where the driver looks for a cancellation every thousand.
func TestGroupCommitOutlivesAMembersCancelledContext(t *testing.T) {
	s := openGroupTestStore(t)
	cancelled, cancel := context.WithCancel(context.Background())
	cancelDuring = cancel
	t.Cleanup(func() { cancelDuring = nil })

	hold, holding := make(chan struct{}), make(chan struct{})
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		errs[0] = s.Tx(context.Background(), func(tx *Tx) error {
			if _, err := tx.InitSetting("kept", []byte("1")); err != nil {
				return err
			}
			close(holding)
			<-hold
			return nil
		})
	}()
	<-holding
	go func() {
		defer wg.Done()
		errs[1] = s.Tx(cancelled, func(tx *Tx) error {
			_, err := tx.execUnprepared(`WITH RECURSIVE c(x) AS (SELECT kibotos_test_cancel() UNION ALL SELECT x + 1 FROM c WHERE x < 300000)
				INSERT INTO settings (name, value) SELECT 'cancelled', CAST(MAX(x) AS BLOB) FROM c`)
			return err
		})
	}()
	for s.group.waiting.Load() != 1 {
		runtime.Gosched()
	}
	close(hold)
	wg.Wait()

	if errs[0] != nil {
		t.Errorf("the member beside the cancelled one: %v, want it committed", errs[0])
	}
	if cancelled.Err() == nil {
		t.Fatal("the statement never ran the function that cancels its context")
	}
	if err := s.Tx(context.Background(), func(tx *Tx) error {
		_, err := tx.Setting("kept")
		return err
	}); err != nil {
		t.Errorf("the other member's write after the group: %v", err)
	}
}
