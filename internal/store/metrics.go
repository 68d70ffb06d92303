package store

import (
	"context"
	"time"
)

// Context is the context the transaction runs under, with what its
// caller's context carries: command admission finds ctrl's metrics there
// (internal/ctrl/metrics.FromContext).
func (t *Tx) Context() context.Context { return t.ctx }

// In runs fn in t under ctx instead of t's own context, which it is given
// back after: a transaction that does the work of several callers (their
// admissions together) runs each caller's part with what that caller's
// context carries. ctx's cancellation does not end t's statements: one
// caller gone must not fail the others' work.
func (t *Tx) In(ctx context.Context, fn func(*Tx) error) error {
	own := t.ctx
	t.ctx = context.WithoutCancel(ctx)
	defer func() { t.ctx = own }()
	return fn(t)
}

// CountWorkspacesByState counts the Workspaces not deleted, by state (the
// enum's name, WORKSPACE_STATE_AVAILABLE), in one grouped query: the
// kibotos_workspaces gauge, read at each scrape.
func (t *Tx) CountWorkspacesByState() (map[string]int64, error) {
	rows, err := t.query("SELECT state, COUNT(*) FROM workspaces WHERE deleted = 0 GROUP BY state")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := map[string]int64{}
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return nil, err
		}
		counts[state] = n
	}
	return counts, rows.Err()
}

// CountDueCommands counts the unfinished commands due by now (their next
// attempt is not later), leased or not: the runner's queue depth, the
// kibotos_command_queue_depth gauge.
func (t *Tx) CountDueCommands(now time.Time) (int64, error) {
	var n int64
	err := t.queryRow("SELECT COUNT(*) FROM commands WHERE "+unfinished+" AND next_attempt_at <= ?", now.UnixNano()).Scan(&n)
	return n, err
}
