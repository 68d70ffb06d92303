package command

import (
	"context"
	"sync"

	"github.com/kibotos/kibotos/internal/store"
)

// Steps ended together (issue 15; docs/PLACEMENT-LOOP.md, "Answers").
// Every placement ends with a step that records the node's answer: its
// command, its Workspace and its runtime written, each by a statement of
// its own, in a transaction of its own. Ends that arrive while another
// batch of them commits are applied together instead (as Nomad's plan
// applier does): one transaction, which coalesces its row writes
// (store.Tx.Coalesce), so the rows of every end in it are written by a
// few multi-row statements.
//
// Nothing is durable before the shared transaction commits, as for an
// end of its own. Should it fail (one step's lease lost, one answer that
// no longer agrees, a commit that fails), no step ended, and each runs
// its end again alone, as Succeed would, which reports its own outcome.

// maxTogether bounds the ends one transaction applies.
const maxTogether = 256

// togetherEnd is a step's end waiting for its batch.
type togetherEnd struct {
	w    *Work
	fn   func(tx *store.Tx) error
	done chan error
}

// enders gathers the ends to apply together: the batch forming takes
// every end that arrives until its transaction begins its work (on
// SQLite, while it waits for the one writer; on PostgreSQL, for a
// connection), and the next end forms the next batch, which may wait
// for its turn beside it. None waits for another's commit: a batch at a
// time, each waiting for the one before it to commit, made every end
// wait a commit longer and placed fewer a second on SQLite than ends
// each in its own transaction (docs/PERFORMANCE.md).
type enders struct {
	mu      sync.Mutex
	forming *endBatch
}

// endBatch is the ends one transaction applies.
type endBatch struct {
	ends []*togetherEnd
}

// SucceedTogether is Succeed, sharing a transaction with the ends of
// other steps (above). fn may run twice: in the shared transaction and,
// should that fail, in the step's own.
func (w *Work) SucceedTogether(ctx context.Context, fn func(tx *store.Tx) error) error {
	e := &togetherEnd{w: w, fn: fn, done: make(chan error, 1)}
	if b := w.r.together.join(e); b != nil {
		err := w.r.endTogether(context.WithoutCancel(ctx), b)
		for _, o := range b.ends {
			o.done <- err
		}
	}
	if err := <-e.done; err != nil {
		return w.Succeed(ctx, fn) // alone, as it would have
	}
	w.ended = true
	w.endCommitted(ctx)
	return nil
}

// join adds e to the batch forming, and answers the batch when e begins
// it: its caller then runs it.
func (q *enders) join(e *togetherEnd) *endBatch {
	q.mu.Lock()
	defer q.mu.Unlock()
	var lead *endBatch
	if q.forming == nil {
		q.forming = &endBatch{}
		lead = q.forming
	}
	q.forming.ends = append(q.forming.ends, e)
	if len(q.forming.ends) >= maxTogether {
		q.forming = nil
	}
	return lead
}

// seal ends b's forming: the ends that arrive from now on form another.
func (q *enders) seal(b *endBatch) []*togetherEnd {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.forming == b {
		q.forming = nil
	}
	return b.ends
}

// endTogether ends the commands of b, SUCCEEDED, in one transaction that
// coalesces its row writes; b is sealed once the transaction begins.
func (r *Runner) endTogether(ctx context.Context, b *endBatch) error {
	var batch []*togetherEnd
	var written []*store.CommandRow
	err := r.store.Tx(ctx, func(tx *store.Tx) error {
		batch = r.together.seal(b)
		written = make([]*store.CommandRow, len(batch))
		tx.Coalesce()
		for i, e := range batch {
			c, err := e.w.updateIn(tx, func(tx *store.Tx, c *store.CommandRow) error {
				e.w.ending(c)
				succeeded(c)
				return e.fn(tx)
			})
			if err != nil {
				return err
			}
			written[i] = c
		}
		return nil
	})
	if err == nil {
		for i, e := range batch {
			e.w.c = written[i]
		}
	}
	return err
}
