package workspace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
)

// RunExpiration executes expiration policies until ctx ends: every interval
// it expires the Workspaces whose deadline passed.
func (s *Service) RunExpiration(ctx context.Context, interval time.Duration, log *slog.Logger) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	// A sweep's lines concern no request: they name the sweep (the
	// commands it admits log their own ids).
	log = log.With("sweep", "expiration")
	for {
		if n, err := s.ExpireDue(ctx); err != nil && ctx.Err() == nil {
			log.Warn("sweep failed", "err", err)
		} else if n > 0 {
			log.Info("expired workspaces", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// ExpireDue applies the policy of every Workspace whose deadline passed, and
// returns how many it expired. Each expiration is a command whose id names
// the Workspace and the policy revision, so replicas doing this at once
// admit it once. A policy that fired is cleared: it no longer applies. A
// STOP stops a running (AVAILABLE) or STARTING Workspace as StopWorkspace
// does, with STOP_CAUSE_EXPIRED; it waits for a CREATING Workspace to be
// AVAILABLE (the create runs on), and of a Workspace with no execution to
// stop it just clears the policy.
func (s *Service) ExpireDue(ctx context.Context) (int, error) {
	var due []*ctrlv1.Workspace
	if err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		due, err = tx.ExpiredWorkspaces(s.now().UnixNano(), 100)
		return err
	}); err != nil {
		return 0, err
	}
	// One Workspace that cannot expire now (a command in progress) does not
	// hold up the others; it is tried again at the next pass.
	var errs []error
	n := 0
	for _, w := range due {
		if err := s.expire(ctx, w); errors.Is(err, errNotYet) {
			continue
		} else if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", w.GetWorkspaceId(), err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// errNotYet: the policy applies once the Workspace is out of CREATING.
var errNotYet = errors.New("the Workspace is still being created")

func (s *Service) expire(ctx context.Context, due *ctrlv1.Workspace) error {
	exp := due.GetExpiration()
	commandID := fmt.Sprintf("expire:%s:%d", due.GetWorkspaceId(), exp.GetRevision())
	kind, req := kindStop, proto.Message(&ctrlv1.StopWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: commandID}, WorkspaceId: due.GetWorkspaceId()})
	if exp.GetPolicy().GetAction() == ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_DELETE {
		kind, req = kindDelete, &ctrlv1.DeleteWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: commandID}, WorkspaceId: due.GetWorkspaceId()}
	}
	long := false
	err := command.Do(ctx, s.store, func(tx *store.Tx) error {
		now := s.now()
		_, err := command.Admit(tx, now, commandID, kind, req, func() (command.Effect, error) {
			w, err := get(tx, due.GetWorkspaceId(), true)
			if err != nil {
				return command.Effect{}, err
			}
			if w.GetExpiration().GetRevision() != exp.GetRevision() {
				return command.Effect{Target: w.GetWorkspaceId(), Result: w}, nil // changed meanwhile
			}
			if kind == kindStop && w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING {
				return command.Effect{}, errNotYet
			}
			w.Expiration = cleared(exp)
			if kind == kindDelete {
				long, err = s.applyDelete(tx, w, now)
			} else if hasExecutionToStop(w) {
				long, err = s.applyStop(tx, w, now, commandID, ctrlv1.StopCause_STOP_CAUSE_EXPIRED, false)
			}
			if err != nil {
				return command.Effect{}, err
			}
			w.UpdatedAt = timestamppb.New(now)
			return command.Effect{Target: w.GetWorkspaceId(), Result: w, Long: long}, tx.PutWorkspace(w)
		})
		return err
	})
	if err == nil && long {
		s.runner.Kick()
	}
	return err
}

// hasExecutionToStop: w runs, or is starting one, which a STOP policy
// stops.
func hasExecutionToStop(w *ctrlv1.Workspace) bool {
	switch w.GetState() {
	case ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, ctrlv1.WorkspaceState_WORKSPACE_STATE_STARTING:
		return true
	}
	return false
}
