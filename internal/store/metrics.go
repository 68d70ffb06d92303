package store

import "context"

// Context is the context the transaction runs under, with what its
// caller's context carries: command admission finds ctrl's metrics there
// (internal/ctrl/metrics.FromContext).
func (t *Tx) Context() context.Context { return t.ctx }

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
