package command

import (
	"context"
	"sync"

	"github.com/kibotos/kibotos/internal/store"
)

// Admissions together (issue 15; docs/PLACEMENT-LOOP.md, step 4). Every
// create placed at its admission reserves its writable layer in its
// node's pool: on PostgreSQL each admission locked the shared pool's row
// and held it through its commit, so admissions queued on that row one
// commit at a time, and each ran its own BEGIN, catalog reads and
// COMMIT. Admissions that arrive while another batch of them commits are
// made together instead: one transaction, which coalesces its row writes
// (store.Tx.Coalesce), takes the pool's lock once and reads the catalog
// rows once for all of them.
//
// Each admission runs as it would alone, under its own caller's context
// (store.Tx.In: its metrics, trace and the claim offer of its runner's
// worker), and its caller is answered only once the shared transaction
// committed. Should it fail (one admission's effect refused, a replay
// found, a placement that cannot go at once, the commit), none of them is
// admitted, and each runs again alone, as Do would, which reports its own
// outcome.

// maxAdmitTogether bounds the admissions one transaction makes.
const maxAdmitTogether = 64

// admitMember is one caller's admission waiting for its batch.
type admitMember struct {
	ctx  context.Context
	fn   func(tx *store.Tx) error
	adm  *admissions
	done chan error
}

// admitters gathers the admissions to make together: the batch forming
// takes every admission that arrives until its transaction begins.
type admitters struct {
	gatherer[*admitMember]
	// turn is held by the batch whose transaction runs, when batches must
	// not run side by side: on a database shared with other writers
	// (PostgreSQL), two batches that charge the same nodes in another
	// order would deadlock, where one admission charges one node. On an
	// exclusive database (SQLite's one writer) nothing waits for a row,
	// and the next batch may share the commit of the one before it. The
	// batches of two replicas may still deadlock: PostgreSQL then fails
	// one of them (after its deadlock_timeout, a second by default), whose
	// admissions are made again, each alone.
	turn *sync.Mutex
}

// DoTogether is Do, sharing a transaction with the admissions of other
// callers (above). fn may run twice: in the shared transaction and,
// should that fail, in a transaction of its own.
func (r *Runner) DoTogether(ctx context.Context, fn func(tx *store.Tx) error) error {
	runCtx, offer, err := r.offer(ctx)
	if err != nil {
		return err
	}
	m := &admitMember{ctx: ctx, fn: fn, adm: &admissions{offer: offer}, done: make(chan error, 1)}
	r.admitting.run(m, func(b *batch[*admitMember]) error { return r.admitTogether(context.WithoutCancel(ctx), b) },
		func(o *admitMember, err error) { o.done <- err })
	adm, err := m.adm, <-m.done
	if err == nil {
		adm.committed(context.WithValue(ctx, admissionsKey{}, adm))
	} else {
		adm, err = do(ctx, r.store, offer, fn) // alone, as it would have
	}
	r.afterAdmission(runCtx, offer, adm, err)
	return err
}

// admitTogether makes the admissions of b in one transaction that
// coalesces its row writes, each under its caller's context; b is sealed
// once the transaction begins (and, when batches take turns, once its
// turn came).
func (r *Runner) admitTogether(ctx context.Context, b *batch[*admitMember]) error {
	if t := r.admitting.turn; t != nil {
		t.Lock()
		defer t.Unlock()
	}
	return r.store.Tx(ctx, func(tx *store.Tx) error {
		tx.Coalesce()
		for _, m := range r.admitting.seal(b) {
			m.adm.reset()
			if err := tx.In(context.WithValue(m.ctx, admissionsKey{}, m.adm), m.fn); err != nil {
				return err
			}
		}
		return nil
	})
}
