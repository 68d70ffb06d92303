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
type registrationWrites struct {
	mu      sync.Mutex
	pending []*registrationWrite
	active  bool
}

// A touchFn changes a node's registration n. It gets the batch's
// transaction for what the node reports beside its registration (the
// artifacts it holds); an error it returns is the database's and fails the
// whole batch.
type touchFn func(tx *store.Tx, n *operatorv1.NodeRegistration, now time.Time) error

// touch updates a registration on behalf of the live session s, in a
// transaction it may share with other sessions' writes.
func (f *Fleet) touch(ctx context.Context, s *session, fn touchFn) error {
	w := &registrationWrite{s: s, fn: fn, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	f.writes.mu.Lock()
	f.writes.pending = append(f.writes.pending, w)
	first := !f.writes.active
	f.writes.active = true
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
