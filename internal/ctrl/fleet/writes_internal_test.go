package fleet

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// Lazy writes (a registration's refresh) wait for one another to share a
// transaction, and a write that is not lazy ends their wait: it commits
// with them at once. A lazy write alone commits when lazyWait passed.
func TestLazyWritesShareATransactionAnUrgentOneEndsTheirWait(t *testing.T) {
	f, sessions := writesFleet(t, 3)
	defer func(d time.Duration) { lazyWait = d }(lazyWait)
	lazyWait = time.Hour // were the wait not ended, the test would time out

	var mu sync.Mutex
	txs := map[string]*store.Tx{}
	record := func(id string) touchFn {
		return func(tx *store.Tx, _ *operatorv1.NodeRegistration, _ time.Time) error {
			mu.Lock()
			defer mu.Unlock()
			txs[id] = tx
			return nil
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i, s := range sessions[:2] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f.touchLazily(context.Background(), s, record(s.nodeID))
		}()
		awaitQueued(t, f, i+1)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- f.touch(context.Background(), sessions[2], record(sessions[2].nodeID))
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a write that is not lazy did not end the lazy writes' wait")
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(txs) != 3 || txs["node-0"] != txs["node-1"] || txs["node-1"] != txs["node-2"] {
		t.Errorf("the writes' transactions: %v, want one for all three", txs)
	}

	lazyWait = time.Millisecond
	if err := f.touchLazily(context.Background(), sessions[0], record("alone")); err != nil || txs["alone"] == nil {
		t.Errorf("a lazy write alone: %v, written %v", err, txs["alone"] != nil)
	}
}

// awaitQueued waits until n writes are queued and the batch waits for
// more (the first is waited on, the others queued behind it).
func awaitQueued(t *testing.T, f *Fleet, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		f.writes.mu.Lock()
		queued, waiting := len(f.writes.pending), f.writes.waiting
		f.writes.mu.Unlock()
		if queued == n && waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued (waiting %v), want %d", queued, waiting, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// writesFleet is a fleet on a new SQLite database holding n admitted
// nodes, node-0 and on, each with a live session.
func writesFleet(t *testing.T, n int) (*Fleet, []*session) {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "ctrl.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	connected := time.Now().Truncate(time.Microsecond)
	var sessions []*session
	err = st.Tx(context.Background(), func(tx *store.Tx) error {
		for i := range n {
			id := "node-" + string(rune('0'+i))
			sessions = append(sessions, &session{nodeID: id, connectedAt: connected})
			if err := tx.PutNode(&operatorv1.NodeRegistration{NodeId: id,
				Admission: operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED,
				Session:   &operatorv1.NodeSessionSummary{Live: true, ConnectedAt: timestamppb.New(connected)}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return New(st, nil, slog.New(slog.DiscardHandler), Config{}, Deps{}), sessions
}

// An observation due only because a refresh is is lazy; the first one, and
// one whose report changed, are not.
func TestOnlyARefreshIsLazy(t *testing.T) {
	s := &session{}
	now := time.Now()
	running := &nodev1.ExecutionReport{InstanceId: "ws-a.1", Running: true, Responding: true}
	o := &nodev1.NodeObservation{InstanceIds: []string{"ws-a.1"}, Executions: []*nodev1.ExecutionReport{running}}
	if due, _, _, lazy := s.observationDue(o, now, time.Minute, nil); !due || lazy {
		t.Errorf("the first observation: due %v, lazy %v", due, lazy)
	}
	s.wrote(o, o.GetExecutions(), true, now)
	if due, _, _, _ := s.observationDue(o, now.Add(time.Second), time.Minute, nil); due {
		t.Error("an unchanged observation is due before its refresh")
	}
	if due, reports, _, lazy := s.observationDue(o, now.Add(time.Minute), time.Minute, nil); !due || !lazy || len(reports) != 1 {
		t.Errorf("a refresh: due %v, lazy %v, reports %v", due, lazy, reports)
	}
	unresponsive := &nodev1.ExecutionReport{InstanceId: "ws-a.1", Running: true}
	changed := &nodev1.NodeObservation{InstanceIds: []string{"ws-a.1"}, Executions: []*nodev1.ExecutionReport{unresponsive}}
	if due, _, _, lazy := s.observationDue(changed, now.Add(time.Minute), time.Minute, nil); !due || lazy {
		t.Errorf("a changed report at a refresh: due %v, lazy %v", due, lazy)
	}
}
