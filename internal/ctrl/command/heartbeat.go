package command

import (
	"context"
	"time"

	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"

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

// Hold records progress (and fn's writes) as Continue does, but keeps the
// command's lease (extended): the step goes on in this worker, which waits
// for what it handed out (a node's answer) in memory instead of ending
// the step and being claimed again once it arrives. A step that then does
// not want to wait longer ends with Continue or Wait as usual.
func (w *Work) Hold(ctx context.Context, progress string, fn func(tx *store.Tx, c *storev1.Command) error) error {
	return w.update(ctx, func(tx *store.Tx, c *store.CommandRow) error {
		c.State = storev1.CommandState_COMMAND_STATE_RUNNING
		c.WaitingFor = ""
		c.Progress = progress
		c.LeaseUntil = w.r.now().Add(w.r.lease)
		if fn != nil {
			return fn(tx, c.Command)
		}
		return nil
	})
}

// HoldFor is the longest a step may wait in memory after Hold: well
// within the lease Hold took, so that no other worker takes the command
// over while this one still means to go on.
func (w *Work) HoldFor(want time.Duration) time.Duration { return min(want, w.r.lease/3) }

// Idle runs wait (a step waiting in memory after Hold) without taking one
// of the runner's workers: the runner claims other commands meanwhile.
func (w *Work) Idle(wait func()) {
	if w.slot == nil {
		wait()
		return
	}
	<-w.slot
	defer func() { w.slot <- struct{}{} }()
	wait()
}
