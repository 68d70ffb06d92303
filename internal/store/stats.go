package store

import (
	"sync/atomic"
	"time"
)

// Stats is what this Store's transactions have cost since it opened.
type Stats struct {
	// Transactions counts the transactions that began (each attempt of a
	// retried one), committed or not. On SQLite several of them share one
	// database transaction and its commit (group.go).
	Transactions uint64
	// Commits counts the database transactions committed. On PostgreSQL
	// one per committed transaction; on SQLite one per group (group.go).
	Commits uint64
	// Held is the time they held a database connection, from BEGIN to the
	// end of COMMIT or ROLLBACK. On SQLite, whose one connection every
	// transaction takes in turn, Held over wall time is the share of time
	// the database was busy (its writing connection: a Snapshot's reader
	// is not counted); on PostgreSQL it sums the connections' times.
	Held time.Duration
	// Statements counts the statements transactions ran (Tx, not
	// Snapshot), SAVEPOINTs of SQLite's groups, BEGIN and COMMIT left out:
	// what a multi-row write saves shows here (Tx.Coalesce).
	Statements uint64
}

// txStats are counters, not a histogram: every transaction updates
// them, and two atomic adds cost nothing beside a commit. Rates and
// averages are derived by whoever reads them (ctrl's /metrics, the
// benchmarks).
type txStats struct {
	transactions atomic.Uint64
	commits      atomic.Uint64
	heldNanos    atomic.Int64
	statements   atomic.Uint64
}

func (t *txStats) began() { t.transactions.Add(1) }

func (t *txStats) committed() { t.commits.Add(1) }

// ran counts a statement of tx, when tx counts them (not a Snapshot's).
func (tx *Tx) ran() {
	if tx.stats != nil {
		tx.stats.statements.Add(1)
	}
}

// heldFor adds the time a database transaction held its connection (on
// SQLite one group of transactions sharing a commit).
func (t *txStats) heldFor(since time.Time) { t.heldNanos.Add(int64(time.Since(since))) }

// Stats reads the counters.
func (s *Store) Stats() Stats {
	return Stats{Transactions: s.stats.transactions.Load(), Commits: s.stats.commits.Load(), Held: time.Duration(s.stats.heldNanos.Load()),
		Statements: s.stats.statements.Load()}
}
