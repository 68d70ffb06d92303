package fleet

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/failpoint"
	"github.com/kibotos/kibotos/internal/store"
)

// maxWriteBatch bounds how many registration writes share one transaction,
// so that a batch never holds the database (one connection on SQLite) for
// long while other work waits.
const maxWriteBatch = 256

// A registrationWrite is one change a live session makes to its node's
// registration: an observation, a clock measurement.
type registrationWrite struct {
	s    *session
	fn   touchFn
	lazy bool
	err  error
	done chan struct{}
	// lead hands this write's caller the writing of the next batch.
	lead chan struct{}
}

// registrationWrites coalesces the registration writes of every session
// this replica holds into shared transactions (group commit). Every session
// sends an observation every few seconds; one transaction each is one
// commit each, which at thousands of nodes is more than one SQLite
// connection, or the PostgreSQL writer, can carry. Writes queue while a
// batch commits and go together in the next one, so at low load a write
// commits at once and at high load the commits per second stay flat.
//
// There is no writer goroutine: the caller that finds no batch in flight
// writes one, then hands the next batch to the first write still queued.
// A caller waits for its write whatever happens to its context, so the
// hand-off always reaches a waiting caller.
//
// A lazy write (touchLazily: a refresh, which changes nothing anyone
// reads) may wait up to lazyWait for others to join its batch, unless a
// write that is not lazy comes meanwhile. Each node refreshes its
// registration once a refresh (a minute on PostgreSQL), at its own time:
// one transaction each, five round trips, was most of the idle fleet's
// cost on PostgreSQL (docs/PERFORMANCE.md, the idle fleet). The price: a
// session's next observation, were it urgent (memory tight), waits behind
// its lazy write, at most lazyWait.
type registrationWrites struct {
	mu      sync.Mutex
	pending []*registrationWrite
	active  bool
	// waiting says a batch of lazy writes waits; urgent ends its wait.
	waiting bool
	urgent  chan struct{}
}

// lazyWait is how long a batch of lazy writes waits for others: a
// variable so that a test can wait long enough to tell a wait ended by a
// write from one the timer ended.
var lazyWait = time.Second

// A touchFn changes a node's registration n. It gets the batch's
// transaction for what the node reports beside its registration (the
// artifacts it holds); an error it returns is the database's and fails the
// whole batch.
type touchFn func(tx *store.Tx, n *operatorv1.NodeRegistration, now time.Time) error

// touch updates a registration on behalf of the live session s, in a
// transaction it may share with other sessions' writes.
func (f *Fleet) touch(ctx context.Context, s *session, fn touchFn) error {
	return f.write(ctx, &registrationWrite{s: s, fn: fn})
}

// touchLazily is touch for a write that may wait, up to lazyWait, for
// others to share its transaction.
func (f *Fleet) touchLazily(ctx context.Context, s *session, fn touchFn) error {
	return f.write(ctx, &registrationWrite{s: s, fn: fn, lazy: true})
}

func (f *Fleet) write(ctx context.Context, w *registrationWrite) error {
	w.done, w.lead = make(chan struct{}), make(chan struct{}, 1)
	f.writes.mu.Lock()
	f.writes.pending = append(f.writes.pending, w)
	first := !f.writes.active
	f.writes.active = true
	if f.writes.waiting && (!w.lazy || len(f.writes.pending) >= maxWriteBatch) {
		select {
		case f.writes.urgent <- struct{}{}:
		default:
		}
	}
	f.writes.mu.Unlock()
	if first {
		f.writeBatch(ctx)
	}
	for {
		select {
		case <-w.done:
			return w.err
		case <-w.lead:
			f.writeBatch(ctx)
		}
	}
}

// writeBatch commits the writes queued first, up to maxWriteBatch, then
// hands the next batch on, or ends the run when nothing is queued.
func (f *Fleet) writeBatch(ctx context.Context) {
	f.awaitLazyBatch()
	f.writes.mu.Lock()
	n := min(len(f.writes.pending), maxWriteBatch)
	batch := slices.Clone(f.writes.pending[:n])
	f.writes.pending = f.writes.pending[n:]
	f.writes.mu.Unlock()

	// One caller's cancelled context must not fail the writes of others.
	f.commitWrites(context.WithoutCancel(ctx), batch)
	for _, w := range batch {
		close(w.done)
	}

	f.writes.mu.Lock()
	defer f.writes.mu.Unlock()
	if len(f.writes.pending) == 0 {
		f.writes.active = false
		return
	}
	f.writes.pending[0].lead <- struct{}{}
}

// awaitLazyBatch waits, when every queued write is lazy, until lazyWait
// passed, the queue holds a full batch, or a write that is not lazy came.
func (f *Fleet) awaitLazyBatch() {
	f.writes.mu.Lock()
	if !f.allLazy() {
		f.writes.mu.Unlock()
		return
	}
	if f.writes.urgent == nil {
		f.writes.urgent = make(chan struct{}, 1)
	}
	select { // a signal left from an earlier wait
	case <-f.writes.urgent:
	default:
	}
	f.writes.waiting = true
	f.writes.mu.Unlock()
	t := time.NewTimer(lazyWait)
	select {
	case <-t.C:
	case <-f.writes.urgent:
	}
	t.Stop()
	f.writes.mu.Lock()
	f.writes.waiting = false
	f.writes.mu.Unlock()
}

// allLazy says every queued write is lazy and they fill less than a
// batch. Called with mu held.
func (f *Fleet) allLazy() bool {
	if len(f.writes.pending) >= maxWriteBatch {
		return false
	}
	for _, w := range f.writes.pending {
		if !w.lazy {
			return false
		}
	}
	return true
}

// commitWrites applies batch in one transaction: one read of every node
// it names (locked in node_id order, the order every batch takes, so that
// the batches of several replicas do not deadlock) and one write of them
// all. A write that no longer applies (the session was replaced, the node
// is no longer admitted) fails alone.
func (f *Fleet) commitWrites(ctx context.Context, batch []*registrationWrite) {
	byNode := map[string][]*registrationWrite{}
	for _, w := range batch {
		byNode[w.s.nodeID] = append(byNode[w.s.nodeID], w)
	}
	ids := slices.Sorted(maps.Keys(byNode))
	start := time.Now()
	defer func() { f.metrics.ObservationBatch(len(batch), time.Since(start)) }()
	err := f.store.Tx(ctx, func(tx *store.Tx) error {
		lost, err := tx.LostPools()
		if err != nil {
			return err
		}
		nodes, err := tx.LockNodes(ids)
		if err != nil {
			return err
		}
		var unchangedPools []*operatorv1.NodeRegistration
		for _, id := range ids {
			n := nodes[id]
			if n == nil {
				failAll(byNode[id], store.ErrNotFound)
				continue
			}
			pools := poolNames(n)
			applied, err := f.applyWrites(tx, n, byNode[id], lost)
			if err != nil {
				return err
			}
			if !applied {
				continue
			}
			if !slices.Equal(pools, poolNames(n)) {
				// Rare: a pool declared or dropped; PutNode records it.
				if err := tx.PutNode(n); err != nil {
					return err
				}
				continue
			}
			unchangedPools = append(unchangedPools, n)
		}
		if err := tx.UpdateNodes(unchangedPools); err != nil {
			return err
		}
		failpoint.Hit(failpoint.BatchWritten, "")
		return nil
	})
	if err != nil {
		failAll(batch, err)
		return
	}
	failpoint.Hit(failpoint.BatchCommitted, "")
}

// applyWrites applies the writes of one node to its registration n, and
// reports whether any applied. Only a database error is returned; the
// others are each write's own.
func (f *Fleet) applyWrites(tx *store.Tx, n *operatorv1.NodeRegistration, writes []*registrationWrite, lost map[string]bool) (bool, error) {
	applied := false
	for _, w := range writes {
		w.err = nil // the transaction may be a retry
		switch {
		case !n.GetSession().GetConnectedAt().AsTime().Equal(w.s.connectedAt):
			w.err = errors.New("the session was replaced")
		case n.GetAdmission() != operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED:
			w.err = notAdmitted(n) // retired or revoked while connected: the session ends
		default:
			now := f.now()
			n.Session.LastSeenAt = timestamppb.New(now)
			n.Session.LiveUntil = timestamppb.New(now.Add(f.lease(w.s.currentInterval())))
			if err := w.fn(tx, n, now); err != nil {
				return false, err
			}
			applied = true
		}
	}
	if applied {
		markLostPools(n, lost)
	}
	return applied, nil
}

func failAll(writes []*registrationWrite, err error) {
	for _, w := range writes {
		w.err = err
	}
}

func poolNames(n *operatorv1.NodeRegistration) []string {
	var out []string
	for _, a := range n.GetStoragePools() {
		out = append(out, a.GetStoragePool())
	}
	return out
}
