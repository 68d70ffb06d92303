package guest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Exit is how a child process ended.
type Exit struct {
	Pid    int
	Status unix.WaitStatus
}

// Code is the exit status, or -1 when a signal ended the process.
func (e Exit) Code() int {
	if e.Status.Exited() {
		return e.Status.ExitStatus()
	}
	return -1
}

// Signal is the signal that ended the process, or 0.
func (e Exit) Signal() int {
	if e.Status.Signaled() {
		return int(e.Status.Signal())
	}
	return 0
}

// Reaper waits for every child of this process: PID 1 inherits the orphans
// of the whole guest, and they stay zombies until someone waits for them.
//
// Because Reaper waits for any child, nothing else in the process may wait:
// start children with Reaper.Start and never call exec.Cmd.Wait (it would
// race the reaper for the exit status).
type Reaper struct {
	mu      sync.Mutex
	waiters map[int]chan Exit
	// Orphan, if set, is told about reaped processes that were not started
	// through Start. It is called with the reaper's lock held.
	Orphan func(Exit)
}

// NewReaper returns a Reaper; call Run to make it reap.
func NewReaper() *Reaper { return &Reaper{waiters: map[int]chan Exit{}} }

// Start starts cmd and returns a channel that receives its Exit. The
// reaper's lock is held from before the fork until the pid is recorded, so
// an exit cannot be reaped before it has a waiter.
func (r *Reaper) Start(cmd *exec.Cmd) (<-chan Exit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := make(chan Exit, 1)
	r.waiters[cmd.Process.Pid] = ch
	return ch, nil
}

// Reap waits for every child that has exited, without blocking.
func (r *Reaper) Reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD: no children; 0: none has exited
		}
		e := Exit{Pid: pid, Status: ws}
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- e
		} else if r.Orphan != nil {
			r.Orphan(e)
		}
	}
}

// Run reaps on every SIGCHLD, and every few seconds in case one was
// coalesced away, until ctx ends.
func (r *Reaper) Run(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	defer signal.Stop(sig)
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		r.Reap()
		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-t.C:
		}
	}
}
