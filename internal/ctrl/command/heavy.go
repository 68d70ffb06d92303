package command

import (
	"context"
	"fmt"
	"time"
)

// heavyWorkers bounds the steps of one runner doing heavy work in ctrl
// itself at once (Work.Heavy): the bound every step had when the runner
// ran eight.
const heavyWorkers = 8

// heavyWait is the longest a step waits in memory for a place to do heavy
// work, and heavyRetry when it is tried again after that.
const (
	heavyWait  = time.Second
	heavyRetry = 2 * time.Second
)

// Heavy runs fn, work of this step that loads ctrl's own CPU and disk for
// long (a template build, an export's assembly), once fewer than eight
// such run on this runner. It waits for a place in memory without taking
// one of the runner's workers (Idle), for at most a second; with none free
// by then the step ends waiting (Wait, tried again in two seconds) and
// ran is false: the caller returns err as it is.
func (w *Work) Heavy(ctx context.Context, what string, fn func() error) (ran bool, err error) {
	got := false
	w.Idle(func() {
		t := time.NewTimer(w.HoldFor(heavyWait))
		defer t.Stop()
		select {
		case w.r.heavy <- struct{}{}:
			got = true
		case <-t.C:
		case <-ctx.Done():
		}
	})
	if !got {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		return false, w.Wait(ctx, fmt.Sprintf("a free place among the %d %s this ctrl runs at once", heavyWorkers, what), heavyRetry)
	}
	defer func() { <-w.r.heavy }()
	return true, fn()
}
