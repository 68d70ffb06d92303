package command

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"
)

// A step coming back from Idle waits for a place behind at most
// admissionsAhead admissions, however many more wait for one: the others
// wait their turn among themselves first (waitPlace). Behind every
// creation queued under a load beyond what ctrl places, a step ending a
// placement doubled the time to AVAILABLE (docs/PERFORMANCE.md, "Waiting
// for a place").
func TestAStepBackFromIdleWaitsBehindAFewAdmissions(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := NewRunner(nil, "test-replica", slog.Default(), WithWorkers(1), WithPlaceWait(time.Hour))
	r.mu.Lock()
	r.running = ctx // as Run would; nothing here claims
	r.mu.Unlock()

	// The step holds the one place, gives it back as it goes idle, and
	// the place is taken again while it waits.
	var mu sync.Mutex
	var order []string
	took := func(who string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, who)
	}
	r.sem <- struct{}{}
	resume, idling := make(chan struct{}), make(chan struct{})
	go func() {
		w := &Work{r: r, slot: r.sem}
		w.Idle(func() {
			close(idling)
			<-resume
		})
		took("step")
	}()
	<-idling
	r.sem <- struct{}{}

	const admissions = admissionsAhead + 8
	for range admissions {
		go func() {
			if r.reserve(ctx) != nil {
				took("admission")
			}
		}()
	}
	waitStacks(t, "every admission waiting for a place", admissions, "command.(*Runner).waitPlace(")
	close(resume)
	waitStacks(t, "the step waiting for its place back", 1, "[chan send", "command.(*Work).Idle(")

	// Places come free one at a time; each goes to one waiter, who keeps it.
	for freed := 1; ; freed++ {
		<-r.sem
		waitUntil(t, "the freed place taken", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == freed })
		mu.Lock()
		last := order[freed-1]
		mu.Unlock()
		if last == "step" {
			if freed > admissionsAhead+1 {
				t.Errorf("the step back from idle took the %dth place freed, want one of the first %d: %v", freed, admissionsAhead+1, order)
			}
			break
		}
		if freed == admissions+1 {
			t.Fatalf("every admission took a place before the step back from idle: %v", order)
		}
	}
	cancel() // the admissions still waiting give up
	waitStacks(t, "no admission waiting", 0, "command.(*Runner).waitPlace(")
}

// waitStacks waits until exactly n goroutines' stacks hold every one of
// parts, for up to ten seconds.
func waitStacks(t *testing.T, what string, n int, parts ...string) {
	t.Helper()
	waitUntil(t, what, func() bool {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		count := 0
		for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
			all := true
			for _, p := range parts {
				all = all && bytes.Contains(g, []byte(p))
			}
			if all {
				count++
			}
		}
		return count == n
	})
}

// waitUntil waits until cond holds, for up to ten seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}
