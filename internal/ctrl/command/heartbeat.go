package command

import (
	"context"

	"github.com/kibotos/kibotos/internal/store"
)

// Heartbeat records progress (and fn's writes) during a step that runs
// longer than a lease, such as a Template build, and extends the lease so
// that no other worker takes the command over meanwhile. It returns
// ErrLeaseLost when another worker holds the command already.
func (w *Work) Heartbeat(ctx context.Context, progress string, fn func(tx *store.Tx) error) error {
	return w.update(ctx, func(tx *store.Tx, c *store.CommandRow) error {
		c.Progress = progress
		c.LeaseUntil = w.r.now().Add(w.r.lease)
		if fn != nil {
			return fn(tx)
		}
		return nil
	})
}
