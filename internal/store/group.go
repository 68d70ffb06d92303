package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Group commit (SQLite). SQLite has one connection here and one writer, and
// every commit ends in an fsync of the WAL: with each transaction its own
// commit, the connection spent most of its time waiting for the disk, and
// the commits a second were what capped placements a second (issue 15).
//
// So transactions that arrive while another runs share one database
// transaction. Each runs alone on the connection, in turn, inside its own
// SAVEPOINT: an fn that fails is rolled back to it, and its writes are
// undone while the others' stay. The last of a run of transactions (no
// other waiting) commits them all, with one fsync, and every one of them
// returns only after that commit: a caller never sees its transaction
// succeed before it is durable, and a failed commit fails each of them
// (they retry or report it, as after any failed commit). A transaction
// reads the uncommitted writes of those before it in its group, which is
// what it would have read had they committed first; none of them has
// returned to its caller yet.
//
// PostgreSQL needs none of this: its connections commit concurrently, and
// the server batches their WAL flushes itself.

// maxGroup bounds how many transactions share a commit, so a steady stream
// of them cannot hold one open (and their callers waiting) for long.
const maxGroup = 64

// grouper holds the database transaction a group of Tx calls shares.
type grouper struct {
	// mu is held by the one transaction running on the connection.
	mu sync.Mutex
	// waiting counts the calls waiting for mu: while some wait, the group
	// is left open for them.
	waiting atomic.Int32
	// open is the group not yet committed, nil when none.
	open *group
}

// group is one database transaction and the Tx calls in it.
type group struct {
	tx      *sql.Tx
	began   time.Time
	members int
	// written are the ids the members wrote, told once it commits.
	written []string
	// patches are the members' writes to the placement mirror, applied
	// once it commits; readIndex says a member read rows into the mirror,
	// which may have seen the group's writes: should the group fail, the
	// mirror is read again.
	patches   []placementPatch
	readIndex bool
	// charged are the nodes its members charged through the mirror,
	// settled once it ends.
	charged []string
	// done is closed once it committed (err nil) or failed (err).
	done chan struct{}
	err  error
}

// groupTx runs fn as one member of the open group (or of a new one), and
// returns once the group committed.
func (s *Store) groupTx(ctx context.Context, fn func(*Tx) error) error {
	g := &s.group
	g.waiting.Add(1)
	g.mu.Lock()
	g.waiting.Add(-1)
	b, err := s.joinGroup()
	if err != nil {
		g.mu.Unlock()
		return err
	}
	s.stats.began()
	fnErr := s.runMember(ctx, b, fn)
	if b.err != nil || g.waiting.Load() == 0 || b.members >= maxGroup {
		s.endGroup(b)
	}
	g.mu.Unlock()
	<-b.done
	if fnErr != nil {
		return fnErr
	}
	return b.err
}

// joinGroup is the open group, begun if there is none. Called with mu held.
func (s *Store) joinGroup() (*group, error) {
	g := &s.group
	if g.open == nil {
		// Not the caller's context: its end must not roll back the
		// other members' work.
		tx, err := s.db.BeginTx(context.Background(), nil)
		if err != nil {
			return nil, err
		}
		g.open = &group{tx: tx, began: time.Now(), done: make(chan struct{})}
	}
	g.open.members++
	return g.open, nil
}

// runMember runs fn inside a savepoint of b, undoing its writes when it
// fails. A savepoint that cannot be rolled back to (SQLite rolls the whole
// transaction back on some errors) fails the group.
func (s *Store) runMember(ctx context.Context, b *group, fn func(*Tx) error) error {
	// The savepoint statements go through the statements kept prepared,
	// as fn's do: parsed at every member they were 3% of ctrl's CPU, on
	// the one connection (docs/PERFORMANCE.md).
	around := &Tx{ctx: context.Background(), tx: b.tx, d: s.d, stmts: s.stmts}
	if _, err := around.exec("SAVEPOINT member"); err != nil {
		b.err = fmt.Errorf("group commit: %w", err)
		return b.err
	}
	// Its statements do not end with the caller's context: SQLite's driver
	// watched a cancellable one from a goroutine of its own at every
	// statement, and an interrupt would break the group's transaction
	// for every member (the statements are short; fn sees ctx itself).
	tx := &Tx{ctx: context.WithoutCancel(ctx), tx: b.tx, d: s.d, stmts: s.stmts, index: &s.index, cache: &s.cache, hot: &s.hot, stats: &s.stats}
	fnErr := tx.finish(fn)
	b.charged = append(b.charged, tx.charged...) // settled when the group ends, however
	if fnErr != nil {
		tx.rolledBack()
		s.cache.drop() // rows read after its writes may hold them
		s.hot.forget(tx.hotWritten)
		if _, err := around.exec("ROLLBACK TO member"); err != nil {
			b.err = fmt.Errorf("group commit: undoing a failed transaction (%v): %w", fnErr, err)
			return fnErr
		}
	}
	if _, err := around.exec("RELEASE member"); err != nil {
		b.err = fmt.Errorf("group commit: %w", err)
		return cmp.Or(fnErr, b.err)
	}
	if fnErr == nil {
		b.written = append(b.written, tx.written...)
		b.patches = append(b.patches, tx.patches...)
		b.readIndex = b.readIndex || tx.readAll || len(tx.read) > 0
	}
	return fnErr
}

// endGroup commits b (or rolls it back when a member broke it) and
// releases its members. Called with mu held.
func (s *Store) endGroup(b *group) {
	s.group.open = nil
	if b.err == nil {
		b.err = b.tx.Commit()
	} else {
		_ = b.tx.Rollback()
	}
	if b.err == nil {
		s.stats.committed()
		s.index.committed(b.patches) // under mu: in commit order
		s.changes.committed(b.written)
	} else {
		s.cache.drop()
		s.hot.drop()
		if b.readIndex {
			s.index.forget(nil)
		}
	}
	s.index.settle(b.charged)
	if b.err != nil && !errors.Is(b.err, errGroupBroken) {
		b.err = fmt.Errorf("%w: %w", errGroupBroken, b.err)
	}
	s.stats.heldFor(b.began)
	close(b.done)
}

// errGroupBroken marks the failure of a group's commit, which fails every
// member however its own fn went.
var errGroupBroken = errors.New("group commit failed")
