package pool

// Removals retried (pool_cleanups a move could not remove at once).
//
// A move removes the copy it left (the source of a settled move, what a
// failed copy left in the target) as its last step. When that removal
// fails, the move still ends as it would have: it settled, and the object,
// its Workspace and its Volume take other commands again. The copy stays in
// pool_cleanups (cleanup_count), and an internal command of its own,
// kindRemoveCopy, tries the removal again with a growing delay until a node
// removed it, or the pool was declared lost (which drops the cleanup). It
// is a command, so it is durable, leased to one ctrl replica and resumed
// after a crash like any other; its target is the copy, not the object, so
// it holds up none of the object's commands.

import (
	"context"
	"fmt"
	"time"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
)

// kindRemoveCopy retries the removal of a copy a pool keeps; its request
// is the RemoveBlockFile the nodes are sent.
const kindRemoveCopy = "RemovePoolCopy"

// The first retry runs at once after the move's failed removal; after a
// failed retry the next waits removalRetryFirst, twice as long after each
// failure since, and never more than removalRetryMax.
const (
	removalRetryFirst = time.Second
	removalRetryMax   = 5 * time.Minute
)

// removalRetry is the wait after the attempt-th retry failed (0: the
// first).
func removalRetry(attempt uint32) time.Duration {
	if attempt >= 16 {
		return removalRetryMax
	}
	return min(removalRetryFirst<<attempt, removalRetryMax)
}

// retryRemoval admits, in tx, the command that retries removing the copy
// ref names, for the move moveCommandID whose removal failed. One move
// leaves at most one copy, so one retry command per move.
func (s *Service) retryRemoval(tx *store.Tx, moveCommandID string, ref *nodev1.BlockFileRef) error {
	_, err := command.Admit(tx, s.now(), "remove-copy:"+moveCommandID, kindRemoveCopy, &nodev1.RemoveBlockFile{Ref: ref},
		func() (command.Effect, error) {
			return command.Effect{Target: cleanupTarget(ref), Result: &nodev1.RemoveBlockFile{Ref: ref}, Long: true}, nil
		})
	return err
}

// cleanupTarget names a copy in a pool as a command target: no Volume or
// Workspace id, so no command of the object waits for it.
func cleanupTarget(ref *nodev1.BlockFileRef) string {
	return "cleanup/" + ref.GetStoragePool() + "/" + refKey(ref)
}

// refKey is the pool_moves and pool_cleanups key of the object ref
// names.
func refKey(ref *nodev1.BlockFileRef) string {
	if ref.GetKind() == nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME {
		return store.VolumeKey(ref.GetObjectId())
	}
	return store.LayerKey(ref.GetObjectId())
}

// runRemoveCopy makes one more attempt at removing a kept copy: on a node
// reaching its pool, under an operation of its own per attempt (Step
// counts them). A failure waits removalRetry before the next; a success,
// or a pool that no longer keeps the copy (it was declared lost), ends the
// command.
func (s *Service) runRemoveCopy(ctx context.Context, w *command.Work) error {
	req, err := w.Request()
	if err != nil {
		return err
	}
	op, ok := req.(*nodev1.RemoveBlockFile)
	if !ok {
		return fmt.Errorf("command %s: request %T, want RemoveBlockFile", w.Command().GetCommandId(), req)
	}
	pool, key := op.GetRef().GetStoragePool(), refKey(op.GetRef())
	attempt := w.Command().GetStep()
	var kept bool
	nodeID := w.Command().GetNodeId()
	err = s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		if kept, err = tx.HasPoolCleanup(pool, key); err != nil || !kept || nodeID != "" {
			return err
		}
		nodeID, err = s.fleet.NodeForPool(tx, pool)
		return err
	})
	switch {
	case err != nil:
		return err
	case !kept:
		return w.Succeed(ctx, func(*store.Tx) error { return nil })
	case nodeID == "":
		return w.Wait(ctx, fmt.Sprintf("no connected node reaches storage pool %q to remove the copy of %s", pool, key), removalRetry(attempt))
	}
	answer, err := s.fleet.Await(ctx, w, fmt.Sprintf("remove-%d", attempt), nodeID, op, moveStage)
	if answer == nil || err != nil {
		return err
	}
	if f := answer.Failure; f != nil {
		s.log.WarnContext(ctx, "copy a move left not removed; trying again", "storage_pool", pool,
			"object", key, "attempt", attempt+1, "err", f.GetMessage())
		return w.Continue(ctx, fmt.Sprintf("removal %d failed (%s); trying again", attempt+1, f.GetMessage()), removalRetry(attempt),
			func(_ *store.Tx, c *storev1.Command) error {
				c.Step++
				c.NodeId = ""
				return nil
			})
	}
	return w.Succeed(ctx, func(tx *store.Tx) error { return tx.DeletePoolCleanup(pool, key) })
}
