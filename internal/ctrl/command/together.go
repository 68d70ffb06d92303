package command

import (
	"context"

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
	rows []store.Row
	done chan error
}

// The ends are gathered (gatherer) while the batch before them waits for
// the database (on SQLite, for its one writer; on PostgreSQL, for a
// connection), and the next end forms the next batch, which may wait for
// its turn beside it. None waits for another's commit: a batch at a time,
// each waiting for the one before it to commit, made every end wait a
// commit longer and placed fewer a second on SQLite than ends each in its
// own transaction (docs/PERFORMANCE.md).

// SucceedTogether is Succeed, sharing a transaction with the ends of
// other steps (above). fn may run twice: in the shared transaction and,
// should that fail, in the step's own. rows are the rows fn reads by key:
// the shared transaction reads them, and the command rows of its ends,
// one statement per table for all its ends (store.Tx.Prefetch).
func (w *Work) SucceedTogether(ctx context.Context, fn func(tx *store.Tx) error, rows ...store.Row) error {
	e := &togetherEnd{w: w, fn: fn, rows: rows, done: make(chan error, 1)}
	w.r.together.run(e, func(b *batch[*togetherEnd]) error { return w.r.endTogether(context.WithoutCancel(ctx), b) },
		func(o *togetherEnd, err error) { o.done <- err })
	if err := <-e.done; err != nil {
		return w.Succeed(ctx, fn) // alone, as it would have
	}
	w.ended = true
	w.endCommitted(ctx)
	return nil
}

// endTogether ends the commands of b, SUCCEEDED, in one transaction that
// coalesces its row writes; b is sealed once the transaction begins.
func (r *Runner) endTogether(ctx context.Context, b *batch[*togetherEnd]) error {
	var ends []*togetherEnd
	var written []*store.CommandRow
	err := r.store.Tx(ctx, func(tx *store.Tx) error {
		ends = r.together.seal(b)
		written = make([]*store.CommandRow, len(ends))
		tx.Coalesce()
		var rows []store.Row
		for _, e := range ends {
			rows = append(append(rows, store.RowOfCommand(e.w.c.GetCommandId())), e.rows...)
		}
		if err := tx.Prefetch(rows); err != nil {
			return err
		}
		for i, e := range ends {
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
		for i, e := range ends {
			e.w.c = written[i]
		}
	}
	return err
}
