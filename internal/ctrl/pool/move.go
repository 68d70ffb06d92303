package pool

// Moves between pools (MoveVolume, MoveWritableLayer).
//
// A move is a durable command on the object (target_id: the Volume, or the
// Workspace for its writable layer). Admission checks the spec's
// preconditions and records a pool_moves row, which reserves the object's
// capacity in the target pool (its own record keeps reserving it in the
// source). The command then asks one node that reaches both pools to copy
// the block file (CopyBlockFile: data extents only, sparse, verified,
// renamed into place), and in one transaction records the object in the
// target pool, drops the move and records the source's copy as a cleanup
// (pool_cleanups, counted in cleanup_count). A last step has a node
// reaching the source pool remove that copy, which ends the cleanup; when
// that removal fails, a command of its own retries it (cleanup.go). A copy
// that fails leaves the object in its source; what it may have left in the
// target is the target's cleanup, removed the same way before the command
// fails.
//
// Copies never cross nodes: the simplest correct design is a node that
// reaches both pools (a directory declared by two nodes stands in for
// shared storage, so "both pools" may be one local and one shared).
//
// The call waits until the move settled (the object is in the target pool,
// or the command failed), at most one minute and never past its deadline;
// a move still copying answers unavailable with the StoragePoolObject in
// the error details, and the same command_id waits again.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/telemetry"
)

const (
	kindMoveVolume = "MoveVolume"
	kindMoveLayer  = "MoveWritableLayer"
)

// MoveWait is the longest a move call waits for its move to settle.
const MoveWait = time.Minute

// movePoll is how often a waiting call reads the move again.
const movePoll = 100 * time.Millisecond

// moveStage is the stage of a move's failures: the API has no stage of its
// own for moves, and a move is no Workspace or Volume lifecycle step.
const moveStage = ctrlv1.FailureStage_FAILURE_STAGE_UNSPECIFIED

// moved is an object that can move: a Volume or a Workspace's writable
// layer.
type moved struct {
	key      string // store.VolumeKey or store.LayerKey
	target   string // the command target: the Volume or the Workspace
	kind     nodev1.BlockFileKind
	pool     string
	capacity uint64
	// workspace is the Workspace bound to the Volume, or the layer's own.
	workspace string
	// otherPool is where the Workspace's other object lives (the layer of
	// a Volume's Workspace, the Volume of a layer's), "" when none.
	otherPool string
	volume    *ctrlv1.Volume
	runtime   *storev1.WorkspaceRuntime
}

func (m *moved) ref(pool string) *nodev1.BlockFileRef {
	return &nodev1.BlockFileRef{StoragePool: pool, Kind: m.kind, ObjectId: m.target}
}

// object is the StoragePoolObject as the API shows it, with its move.
func (m *moved) object(tx *store.Tx) (*operatorv1.StoragePoolObject, error) {
	var o *operatorv1.StoragePoolObject
	if m.volume != nil {
		var err error
		if o, err = volumeObject(tx, m.volume); err != nil {
			return nil, err
		}
	} else {
		o = layerObject(m.runtime)
	}
	return o, withMove(tx, o)
}

// withMove fills in the move of o, if one is in progress.
func withMove(tx *store.Tx, o *operatorv1.StoragePoolObject) error {
	key := store.LayerKey(o.GetWorkspaceId())
	if o.GetKind() == operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_VOLUME {
		key = store.VolumeKey(o.GetVolumeId())
	}
	mv, err := tx.GetPoolMove(key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	o.MovingTo, o.MoveCommandId = mv.TargetPool, mv.CommandID
	return nil
}

// volumeToMove reads a Volume that lives in a pool, with its Workspace's
// layer pool.
func volumeToMove(tx *store.Tx, id string) (*moved, error) {
	if _, err := volumeIn(tx, id); err != nil {
		return nil, err
	}
	v, err := tx.GetVolume(id, true)
	if err != nil {
		return nil, err
	}
	m := &moved{key: store.VolumeKey(id), target: id, kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME,
		pool: v.GetSpec().GetStoragePool(), capacity: v.GetSpec().GetCapacityBytes(), workspace: v.GetBoundWorkspaceId(), volume: v}
	if m.workspace != "" {
		rt, err := tx.GetRuntime(m.workspace, false)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		m.otherPool = rt.GetLayerPool()
	}
	return m, nil
}

// layerToMove reads a Workspace's placed writable layer, with its bound
// Volume's pool.
func layerToMove(tx *store.Tx, id string) (*moved, error) {
	w, err := LiveWorkspace(tx, id)
	if err != nil {
		return nil, err
	}
	rt, err := tx.GetRuntime(id, true)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if rt.GetLayerPool() == "" {
		// The spec's rule: only a layer an earlier start placed moves.
		return nil, apierr.Precondition(&ctrlv1.ErrorDetail{ObservedWorkspace: w},
			"workspace %s has no writable layer yet: a start places it", id)
	}
	m := &moved{key: store.LayerKey(id), target: id, kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_WRITABLE_LAYER,
		pool: rt.GetLayerPool(), capacity: rt.GetLayerCapacityBytes(), workspace: id, runtime: rt}
	if b := w.GetSpec().GetVolume(); b.GetMode() == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND {
		v, err := tx.GetVolume(b.GetVolumeId(), false)
		if err != nil {
			return nil, err
		}
		m.otherPool = v.GetSpec().GetStoragePool()
	}
	return m, nil
}

// MoveVolume moves a Volume to another pool.
func (s *Service) MoveVolume(ctx context.Context, req *operatorv1.MoveVolumeRequest) (*operatorv1.MoveVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, apierr.Invalid("volume_id", "is required")
	}
	o, err := s.move(ctx, req.GetCommand(), kindMoveVolume, req, req.GetStoragePool(),
		func(tx *store.Tx) (*moved, error) { return volumeToMove(tx, req.GetVolumeId()) })
	if err != nil {
		return nil, err
	}
	return &operatorv1.MoveVolumeResponse{Object: o}, nil
}

// MoveWritableLayer moves a Workspace's writable layer to another pool.
func (s *Service) MoveWritableLayer(ctx context.Context, req *operatorv1.MoveWritableLayerRequest) (*operatorv1.MoveWritableLayerResponse, error) {
	if req.GetWorkspaceId() == "" {
		return nil, apierr.Invalid("workspace_id", "is required")
	}
	o, err := s.move(ctx, req.GetCommand(), kindMoveLayer, req, req.GetStoragePool(),
		func(tx *store.Tx) (*moved, error) { return layerToMove(tx, req.GetWorkspaceId()) })
	if err != nil {
		return nil, err
	}
	return &operatorv1.MoveWritableLayerResponse{Object: o}, nil
}

// move admits a move (or finds the one admitted under the same
// command_id) and waits for it to settle.
func (s *Service) move(ctx context.Context, meta *ctrlv1.CommandMetadata, kind string, req proto.Message, target string,
	load func(tx *store.Tx) (*moved, error)) (*operatorv1.StoragePoolObject, error) {
	if err := command.ValidateID("command.command_id", meta); err != nil {
		return nil, err
	}
	if err := checkName("storage_pool", target); err != nil {
		return nil, err
	}
	commandID := meta.GetCommandId()
	long := false
	err := command.Do(ctx, s.store, func(tx *store.Tx) error {
		_, err := command.Admit(tx, s.now(), commandID, kind, req, func() (command.Effect, error) {
			m, err := load(tx)
			if err != nil {
				return command.Effect{}, err
			}
			if m.pool == target {
				// Already there: answered at once, nothing moves.
				o, err := m.object(tx)
				return command.Effect{Target: m.target, Result: o}, err
			}
			if err := s.admitMove(tx, m, target, commandID); err != nil {
				return command.Effect{}, err
			}
			long = true
			o, err := m.object(tx)
			return command.Effect{Target: m.target, Result: o, Long: true}, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	if long {
		s.kick.Kick()
	}
	return s.awaitMove(ctx, commandID, target, load)
}

// admitMove checks a move's preconditions, in the spec's order of answers,
// and records it.
func (s *Service) admitMove(tx *store.Tx, m *moved, target, commandID string) error {
	for _, id := range []string{m.target, m.workspace} {
		if id == "" {
			continue
		}
		if c, err := tx.ActiveCommandOn(id); err == nil {
			return busy(m, tx, "%s has command %s (%s) in progress; retry when it is over", id, c.GetCommandId(), c.GetKind())
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	if m.volume != nil && m.volume.GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
		return apierr.Precondition(&ctrlv1.ErrorDetail{ObservedVolume: m.volume},
			"volume %s is %s; only an AVAILABLE Volume moves", m.target, m.volume.GetState())
	}
	if err := NoExecution(tx, m.workspace); err != nil {
		return err
	}
	p, err := read(tx, target, true)
	if err != nil {
		return err
	}
	if p.Lost() {
		return apierr.Precondition(nil, "storage pool %q was declared lost: it takes no new objects", target)
	}
	if kept, err := tx.HasPoolCleanup(target, m.key); err != nil {
		return err
	} else if kept {
		return busy(m, tx, "storage pool %q still keeps an earlier copy of %s for removal; retry when a node removed it", target, m.target)
	}
	if ok, err := reached(tx, m.pool, target); err != nil || !ok {
		if err != nil {
			return err
		}
		return apierr.Precondition(nil, "no node reaches both storage pools %q and %q", m.pool, target)
	}
	if m.otherPool != "" {
		if ok, err := reached(tx, m.otherPool, target); err != nil || !ok {
			if err != nil {
				return err
			}
			return apierr.Precondition(nil, "after the move no node would reach workspace %s's Volume and writable layer together (storage pools %q and %q)",
				m.workspace, target, m.otherPool)
		}
	}
	refusal, err := Reserve(tx, target, m.capacity)
	if err != nil {
		return err
	}
	if refusal != nil {
		return refusal.API(moveStage)
	}
	return tx.PutPoolMove(store.PoolMove{ObjectKey: m.key, CommandID: commandID, SourcePool: m.pool, TargetPool: target, CapacityBytes: m.capacity})
}

// NoExecution refuses a move or an export while the Workspace has an execution: only a
// STOPPED Workspace, or a FAILED one whose execution was released, has
// none.
func NoExecution(tx *store.Tx, workspaceID string) error {
	if workspaceID == "" {
		return nil
	}
	w, err := tx.GetWorkspace(workspaceID, false)
	if err != nil {
		return err
	}
	rt, err := tx.GetRuntime(workspaceID, false)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	switch {
	case w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED:
		return nil
	case w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED && rt.GetNodeId() == "":
		return nil
	}
	return apierr.Precondition(&ctrlv1.ErrorDetail{ObservedWorkspace: w},
		"workspace %s is %s and has an execution; stop it first", workspaceID, w.GetState())
}

// reached reports whether some admitted node declares all of pools.
func reached(tx *store.Tx, pools ...string) (bool, error) {
	nodes, err := tx.AllNodes()
	if err != nil {
		return false, err
	}
	for _, n := range nodes {
		if n.GetAdmission() != operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED {
			continue
		}
		found := 0
		for _, p := range pools {
			for _, a := range n.GetStoragePools() {
				if a.GetStoragePool() == p {
					found++
					break
				}
			}
		}
		if found == len(pools) {
			return true, nil
		}
	}
	return false, nil
}

// busy is unavailable, with the object as it stands in the details.
func busy(m *moved, tx *store.Tx, format string, args ...any) error {
	o, err := m.object(tx)
	if err != nil {
		return err
	}
	return unavailable(o, "", format, args...)
}

func unavailable(o *operatorv1.StoragePoolObject, commandID, format string, args ...any) error {
	e := apierr.New(connect.CodeUnavailable, &ctrlv1.ErrorDetail{
		Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true, CommandId: commandID,
	}, format, args...)
	if d, err := connect.NewErrorDetail(o); err == nil {
		e.AddDetail(d)
	}
	return e
}

// awaitMove waits until the move of commandID settled: the object lives
// in target (its move row gone), or the command failed. It waits at most
// s.moveWait and never past ctx's deadline, then answers unavailable with
// the object as it stands.
func (s *Service) awaitMove(ctx context.Context, commandID, target string, load func(tx *store.Tx) (*moved, error)) (*operatorv1.StoragePoolObject, error) {
	deadline := s.now().Add(s.moveWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		// Leave room to answer before the caller gives up.
		deadline = d.Add(-time.Second)
	}
	t := time.NewTicker(movePoll)
	defer t.Stop()
	for {
		o, done, err := s.settled(ctx, commandID, target, load)
		if done || err != nil {
			return o, err
		}
		if !s.now().Before(deadline) {
			return nil, unavailable(o, commandID, "the move (command %s) to storage pool %q has not settled yet; call again with the same command_id to wait again", commandID, target)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// settled reads the move's object and says whether the move settled: the
// object lives in target with no move (whatever the removal of the source
// copy does after), or the command failed (an error).
func (s *Service) settled(ctx context.Context, commandID, target string, load func(tx *store.Tx) (*moved, error)) (o *operatorv1.StoragePoolObject, done bool, err error) {
	err = s.store.Tx(ctx, func(tx *store.Tx) error {
		m, err := load(tx)
		if err != nil {
			return err
		}
		if o, err = m.object(tx); err != nil {
			return err
		}
		if done = m.pool == target && o.GetMovingTo() == ""; done {
			return nil
		}
		c, err := tx.GetCommand(commandID, false)
		if err != nil {
			return err
		}
		if c.GetState() == storev1.CommandState_COMMAND_STATE_SUCCEEDED {
			// A replay long after: the object may have moved on since.
			done = true
			return nil
		}
		if c.GetState() == storev1.CommandState_COMMAND_STATE_FAILED {
			f := c.GetFailure()
			return apierr.New(apierr.CodeOf(f.GetReason()), &ctrlv1.ErrorDetail{Stage: f.GetStage(), Reason: f.GetReason(), Retryable: f.GetRetryable(), CommandId: commandID},
				"the move (command %s) failed and left the object in storage pool %q: %s", commandID, m.pool, f.GetMessage())
		}
		return nil
	})
	return o, done, err
}

// runMove drives a move: copy, then record, then remove the source.
func (s *Service) runMove(ctx context.Context, w *command.Work) error {
	req, err := w.Request()
	if err != nil {
		return err
	}
	var load func(tx *store.Tx) (*moved, error)
	switch r := req.(type) {
	case *operatorv1.MoveVolumeRequest:
		load = func(tx *store.Tx) (*moved, error) { return volumeToMove(tx, r.GetVolumeId()) }
	case *operatorv1.MoveWritableLayerRequest:
		load = func(tx *store.Tx) (*moved, error) { return layerToMove(tx, r.GetWorkspaceId()) }
	default:
		return fmt.Errorf("move command %s without its request", w.Command().GetCommandId())
	}
	var m *moved
	var mv *store.PoolMove
	err = s.store.Tx(ctx, func(tx *store.Tx) error {
		if m, err = load(tx); err != nil {
			return err
		}
		mv, err = tx.GetPoolMove(m.key)
		if errors.Is(err, store.ErrNotFound) || (err == nil && mv.CommandID != w.Command().GetCommandId()) {
			mv, err = nil, nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if mv == nil {
		return s.removeCopy(ctx, w, m)
	}
	return s.copy(ctx, w, m, mv)
}

// copy has a node reaching both pools copy the block file, then records
// the object in the target pool and the source's copy as a cleanup.
func (s *Service) copy(ctx context.Context, w *command.Work, m *moved, mv *store.PoolMove) error {
	if lost, err := s.lostPool(ctx, mv.SourcePool, mv.TargetPool); err != nil || lost != "" {
		if err != nil {
			return err
		}
		// Nothing can copy from or to a pool declared lost, nor remove
		// what a copy left there: the move fails as it stands.
		return w.Fail(ctx, &ctrlv1.WorkspaceFailure{Stage: moveStage, Reason: ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST,
			Message: fmt.Sprintf("storage pool %q was declared lost during the move", lost)},
			func(tx *store.Tx) error { return tx.DeletePoolMove(m.key) })
	}
	nodeID := w.Command().GetNodeId()
	if nodeID == "" {
		err := s.store.Tx(ctx, func(tx *store.Tx) error {
			var err error
			nodeID, err = s.fleet.NodeForPools(tx, mv.SourcePool, mv.TargetPool)
			return err
		})
		if err != nil {
			return err
		}
		if nodeID == "" {
			return w.Wait(ctx, fmt.Sprintf("a connected node that reaches both storage pools %q and %q", mv.SourcePool, mv.TargetPool), 30*time.Second)
		}
	}
	answer, err := s.fleet.Await(ctx, w, "copy", nodeID,
		&nodev1.CopyBlockFile{Source: m.ref(mv.SourcePool), TargetStoragePool: mv.TargetPool}, moveStage)
	if answer == nil || err != nil {
		return err
	}
	if answer.Failure != nil {
		// The object stays where it was and reserves nothing in the target
		// any more; whatever the copy left there (a crash's temporary
		// file) is the target's cleanup until a node removed it, and the
		// command fails with the copy's failure after that removal.
		failure := answer.Failure
		s.log.WarnContext(ctx, "move failed", "object", m.key, "err", failure.GetMessage())
		return w.Continue(ctx, fmt.Sprintf("copy failed; removing what it left in storage pool %q", mv.TargetPool), 0,
			func(tx *store.Tx, c *storev1.Command) error {
				c.NodeId = ""
				c.Failure = failure
				if err := tx.DeletePoolMove(m.key); err != nil {
					return err
				}
				return tx.AddPoolCleanup(mv.TargetPool, m.key, c.GetCommandId())
			})
	}
	if err := checkCopied(answer.Result, m.capacity); err != nil {
		return err
	}
	return w.Continue(ctx, fmt.Sprintf("copied to storage pool %q; removing the copy in %q", mv.TargetPool, mv.SourcePool), 0,
		func(tx *store.Tx, c *storev1.Command) error {
			c.NodeId = "" // the removal goes to any node reaching the source
			if err := s.relocate(tx, m, mv.TargetPool); err != nil {
				return err
			}
			if err := tx.DeletePoolMove(m.key); err != nil {
				return err
			}
			return tx.AddPoolCleanup(mv.SourcePool, m.key, c.GetCommandId())
		})
}

// lostPool is the first of pools declared lost, or "".
func (s *Service) lostPool(ctx context.Context, pools ...string) (string, error) {
	var lost string
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		for _, name := range pools {
			p, err := read(tx, name, false)
			if err != nil {
				return err
			}
			if p.Lost() {
				lost = name
				return nil
			}
		}
		return nil
	})
	return lost, err
}

func checkCopied(result *anypb.Any, capacity uint64) error {
	var c nodev1.BlockFileCopied
	if err := result.UnmarshalTo(&c); err != nil {
		return fmt.Errorf("node answered %s, want BlockFileCopied: %w", result.GetTypeUrl(), err)
	}
	if !c.GetTarget().GetExists() || c.GetTarget().GetCapacityBytes() != capacity {
		return fmt.Errorf("node's copy is %v, want %d bytes", c.GetTarget(), capacity)
	}
	return nil
}

// relocate records the object in pool.
func (s *Service) relocate(tx *store.Tx, m *moved, pool string) error {
	if m.volume != nil {
		v, err := tx.GetVolume(m.target, true)
		if err != nil {
			return err
		}
		v.Spec.StoragePool = pool
		return tx.PutVolume(v)
	}
	rt, err := tx.GetRuntime(m.target, true)
	if err != nil {
		return err
	}
	rt.LayerPool = pool
	return tx.PutRuntime(rt)
}

// removeCopy has a node reaching the pool that keeps this command's
// cleanup of m remove it: the source a settled move left, or what a failed
// copy left in the target. It then ends the command: with the copy's
// failure, if it failed, else successfully. A removal that fails leaves the
// copy counted in its pool's cleanup_count, and a command of its own
// (kindRemoveCopy) retries it.
func (s *Service) removeCopy(ctx context.Context, w *command.Work, m *moved) error {
	var pool, nodeID string
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		pool, err = tx.PoolCleanupOf(m.key, w.Command().GetCommandId())
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err == nil && w.Command().GetNodeId() == "" {
			nodeID, err = s.fleet.NodeForPool(tx, pool)
		}
		return err
	})
	if err != nil {
		return err
	}
	end := func(fn func(tx *store.Tx) error) error {
		if f := w.Command().GetFailure(); f != nil {
			return w.Fail(ctx, proto.Clone(f).(*ctrlv1.WorkspaceFailure), fn)
		}
		return w.Succeed(ctx, fn)
	}
	if pool == "" {
		return end(func(*store.Tx) error { return nil })
	}
	if nodeID == "" {
		nodeID = w.Command().GetNodeId()
	}
	if nodeID == "" {
		return w.Wait(ctx, fmt.Sprintf("no connected node reaches storage pool %q to remove the copy the move left", pool), 30*time.Second)
	}
	answer, err := s.fleet.Await(ctx, w, "remove-copy", nodeID, &nodev1.RemoveBlockFile{Ref: m.ref(pool)}, moveStage)
	if answer == nil || err != nil {
		return err
	}
	if answer.Failure != nil {
		// The move ends as it would have; the removal is retried by a
		// command of its own, which holds up none of the object's.
		s.log.WarnContext(ctx, "copy a move left not removed; retrying", "storage_pool", pool, "err", answer.Failure.GetMessage())
		err := end(func(tx *store.Tx) error { return s.retryRemoval(tx, w.Command().GetCommandId(), m.ref(pool)) })
		if err == nil {
			s.kick.Kick()
		}
		return err
	}
	return end(func(tx *store.Tx) error { return tx.DeletePoolCleanup(pool, m.key) })
}

// CopyProgress records how far a move's copy has come as its command's
// progress (operation ids are "<command_id>/copy").
func (s *Service) CopyProgress(ctx context.Context, nodeID string, p *nodev1.CopyProgress) {
	commandID, ok := strings.CutSuffix(p.GetOperationId(), "/copy")
	if !ok {
		return
	}
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		c, err := tx.GetCommand(commandID, true)
		if err != nil || c.Final() {
			return err
		}
		c.Progress = fmt.Sprintf("copy: node %s copied %d of %d bytes in use", nodeID, p.GetCopiedBytes(), p.GetTotalBytes())
		return tx.UpdateCommand(c)
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.DebugContext(telemetry.WithCommandID(ctx, commandID), "copy progress not recorded", "node_id", nodeID, "operation_id", p.GetOperationId(), "err", err)
	}
}

// NotMoving answers unavailable while the Volume moves between pools:
// it does not start, and is not resized, bound, released, deleted or
// exported until the move settles.
func NotMoving(tx *store.Tx, volumeID string) error {
	mv, err := tx.GetPoolMove(store.VolumeKey(volumeID))
	if errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	return apierr.New(connect.CodeUnavailable, &ctrlv1.ErrorDetail{
		Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true, CommandId: mv.CommandID,
	}, "volume %s is moving to storage pool %q (command %s); retry when the move settled", volumeID, mv.TargetPool, mv.CommandID)
}
