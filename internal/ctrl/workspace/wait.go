package workspace

import (
	"context"
	"errors"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store"
)

// Wait bounds: a waiting call holds a goroutine and a connection, not a
// database connection or a transaction.
const (
	defaultWaitTimeout = 30 * time.Second
	maxWaitTimeout     = time.Minute
	// waitPoll is how often a waiter reads again on its own, for the
	// writes of other replicas, which it does not hear. A database that
	// is this process's alone (SQLite) has none: its waiters read only
	// when told, as a second's poll of each of thousands of waiting calls
	// (creations queued beyond what ctrl places a second) cost ctrl more
	// than the placements they waited for (docs/PERFORMANCE.md, "Waiting
	// for a place").
	waitPoll = time.Second
)

// Wait answers once the Workspace is in one of req's states or req's
// command ended, or req's timeout passed. It reads the Workspace again
// whenever this process commits a write of it or of one of its commands
// (store.WatchWorkspace), and every waitPoll for other replicas' writes
// where there may be some.
func (s *Service) Wait(ctx context.Context, req *ctrlv1.WaitWorkspaceRequest) (*ctrlv1.WaitWorkspaceResponse, error) {
	timeout, err := waitTimeout(req)
	if err != nil {
		return nil, err
	}
	// The reads run under the call's context, not the wait's timeout: a
	// read the timeout cut short (a loaded store) would answer
	// deadline_exceeded instead of "not reached".
	timer, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var poll <-chan time.Time // nil: never
	if !s.store.Exclusive() {
		t := time.NewTicker(waitPoll)
		defer t.Stop()
		poll = t.C
	}
	node := "" // the node whose session the last read judged
	for {
		w := s.watch(req.GetWorkspaceId(), node)
		res, seen, err := s.waitRead(ctx, req)
		if err != nil || res.GetReached() {
			w.stop()
			return res, err
		}
		if seen.node != node {
			// Watch the node's session from before a read.
			w.stop()
			node = seen.node
			continue
		}
		var unknown <-chan time.Time // nil: never
		if !seen.unknownAt.IsZero() {
			t := time.NewTimer(time.Until(seen.unknownAt))
			unknown = t.C
			w.stop = stopAlso(w.stop, func() { t.Stop() })
		}
		select {
		case <-w.workspace:
		case <-w.node:
		case <-unknown:
		case <-poll:
		case <-timer.Done():
			w.stop()
			if ctx.Err() == nil {
				return res, nil // the timeout passed: not reached
			}
			return nil, ctx.Err()
		}
		w.stop()
	}
}

// watching is a waiter's watch of a Workspace's writes and of the
// registration of the node its view judged (observeSession): that node's
// session ending or coming back changes the view with no write of the
// Workspace.
type watching struct {
	workspace, node <-chan struct{} // node is nil (never) for no node
	stop            func()
}

func (s *Service) watch(id, node string) watching {
	var w watching
	w.workspace, w.stop = s.store.WatchWorkspace(id)
	if node != "" {
		var stopNode func()
		w.node, stopNode = s.store.WatchNode(node)
		w.stop = stopAlso(w.stop, stopNode)
	}
	return w
}

// stopAlso is stop, then also.
func stopAlso(stop, also func()) func() {
	return func() { stop(); also() }
}

// waitTimeout checks req and says how long it may wait.
func waitTimeout(req *ctrlv1.WaitWorkspaceRequest) (time.Duration, error) {
	if len(req.GetStates()) == 0 && req.GetCommandId() == "" {
		return 0, apierr.Invalid("states", "name at least one state, or a command_id")
	}
	for i, st := range req.GetStates() {
		if _, ok := ctrlv1.WorkspaceState_name[int32(st)]; !ok || st == ctrlv1.WorkspaceState_WORKSPACE_STATE_UNSPECIFIED {
			return 0, apierr.Invalid("states", "states[%d] is not a Workspace state", i)
		}
	}
	if req.Timeout == nil {
		return defaultWaitTimeout, nil
	}
	if err := req.GetTimeout().CheckValid(); err != nil {
		return 0, apierr.Invalid("timeout", "%v", err)
	}
	switch d := req.GetTimeout().AsDuration(); {
	case d < 0 || d > maxWaitTimeout:
		return 0, apierr.Invalid("timeout", "must lie in [0, %v], not %v", maxWaitTimeout, d)
	case d == 0:
		return defaultWaitTimeout, nil
	default:
		return d, nil
	}
}

// waitRead reads the Workspace (and the command) once, from one snapshot
// so that they agree (one statement for the Workspace alone: read), and
// says whether the wait is over.
func (s *Service) waitRead(ctx context.Context, req *ctrlv1.WaitWorkspaceRequest) (*ctrlv1.WaitWorkspaceResponse, judged, error) {
	res := &ctrlv1.WaitWorkspaceResponse{}
	var node judged
	var err error
	if req.GetCommandId() == "" {
		res.Workspace, node, err = s.readAndNode(ctx, req.GetWorkspaceId())
	} else {
		node, err = s.readWithCommand(ctx, req, res)
	}
	if err != nil {
		return nil, judged{}, err
	}
	for _, st := range req.GetStates() {
		res.Reached = res.Reached || res.GetWorkspace().GetState() == st
	}
	switch res.GetCommand().GetState() {
	case ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED, ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED:
		res.Reached = true
	}
	return res, node, nil
}

// readWithCommand reads req's Workspace and command into res, in one
// snapshot, and says which node's session the view judged.
func (s *Service) readWithCommand(ctx context.Context, req *ctrlv1.WaitWorkspaceRequest, res *ctrlv1.WaitWorkspaceResponse) (node judged, err error) {
	err = s.store.Snapshot(ctx, func(tx *store.Tx) error {
		w, err := get(tx, req.GetWorkspaceId(), false)
		if err != nil {
			return err
		}
		res.Workspace, node = s.viewAndNode(tx, w)
		c, err := tx.GetCommand(req.GetCommandId(), false)
		if errors.Is(err, store.ErrNotFound) || (err == nil && (commandKinds[c.GetKind()] == 0 || c.GetTargetId() != req.GetWorkspaceId())) {
			return apierr.NotFound("workspace command", req.GetCommandId())
		}
		res.Command = commandView(c.Command)
		return err
	})
	return node, err
}
