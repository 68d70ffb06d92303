package store

import (
	"context"
	"database/sql"
	"sync"
)

// maxStatements bounds the prepared statements one Store keeps.
const maxStatements = 512

// statements keeps SQLite statements prepared across transactions, so that
// the single-row reads and writes every transaction repeats (a node's
// registration on each observation, a command's row) are parsed once, not
// on every call: parsing was a tenth of ctrl's CPU at 10,000 nodes.
//
// A statement is prepared after the transaction that first ran it ended:
// SQLite has one connection, which that transaction holds. Only exec and
// queryRow use them; a query whose rows stay open while the same statement
// runs again would reset it under the open rows. PostgreSQL needs none of
// this: pgx caches prepared statements per connection itself.
type statements struct {
	mu      sync.Mutex
	byQuery map[string]*sql.Stmt
	wanted  map[string]bool
}

func newStatements() *statements {
	return &statements{byQuery: map[string]*sql.Stmt{}, wanted: map[string]bool{}}
}

// get is the prepared statement of query, or nil until it is prepared.
func (c *statements) get(query string) *sql.Stmt {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.byQuery[query]
	if st == nil && len(c.byQuery)+len(c.wanted) < maxStatements {
		c.wanted[query] = true
	}
	return st
}

// prepareWanted prepares the statements transactions asked for. It runs
// outside any transaction.
func (c *statements) prepareWanted(ctx context.Context, db *sql.DB) {
	if c == nil {
		return
	}
	c.mu.Lock()
	var queries []string
	for q := range c.wanted {
		queries = append(queries, q)
	}
	clear(c.wanted)
	c.mu.Unlock()
	for _, q := range queries {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			continue // it runs unprepared, as before
		}
		c.mu.Lock()
		if c.byQuery[q] == nil {
			c.byQuery[q], st = st, nil
		}
		c.mu.Unlock()
		if st != nil {
			st.Close()
		}
	}
}

func (c *statements) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.byQuery {
		st.Close()
	}
	clear(c.byQuery)
}
