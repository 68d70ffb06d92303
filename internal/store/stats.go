package store

import (
	"sync/atomic"
	"time"
)

// Stats is what this Store's transactions have cost since it opened.
type Stats struct {
	// Transactions counts the transactions that began (each attempt of a
	// retried one), committed or not.
	Transactions uint64
	// Held is the time they held a database connection, from BEGIN to the
	// end of COMMIT or ROLLBACK. On SQLite, whose one connection every
	// transaction takes in turn, Held over wall time is the share of time
	// the database was busy; on PostgreSQL it sums the connections' times.
	Held time.Duration
}

// txStats are two counters, not a histogram: every transaction updates
// them, and two atomic adds cost nothing beside a commit. Rates and
// averages are derived by whoever reads them (ctrl's /metrics, the
// benchmarks).
type txStats struct {
	transactions atomic.Uint64
	heldNanos    atomic.Int64
}

func (t *txStats) held(since time.Time) {
	t.transactions.Add(1)
	t.heldNanos.Add(int64(time.Since(since)))
}

// Stats reads the counters.
func (s *Store) Stats() Stats {
	return Stats{Transactions: s.stats.transactions.Load(), Held: time.Duration(s.stats.heldNanos.Load())}
}
