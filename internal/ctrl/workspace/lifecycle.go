package workspace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/pool"
	"github.com/kibotos/kibotos/internal/store"
)

// inProgress is unavailable: a long command holds the Workspace.
func inProgress(w *ctrlv1.Workspace, c *store.CommandRow) error {
	return apierr.New(connect.CodeUnavailable, &ctrlv1.ErrorDetail{
		Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true, CommandId: c.GetCommandId(), ObservedWorkspace: w,
	}, "workspace %s has command %s (%s) in progress; retry when it is over", w.GetWorkspaceId(), c.GetCommandId(), c.GetKind())
}

// supersede makes way for a new lifecycle command: a create or start that
// never reached a node is cancelled (nothing ran, nothing to undo); any
// other command in progress makes the new one unavailable.
func supersede(tx *store.Tx, w *ctrlv1.Workspace, now time.Time, by string) error {
	active, err := tx.ActiveCommandOn(w.GetWorkspaceId())
	if errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if (active.GetKind() == kindCreate || active.GetKind() == kindStart) && active.GetNodeId() == "" {
		// Placed, perhaps, but nothing sent to a node: its Allocation goes
		// (the Workspace has no other: nothing of it runs).
		if err := tx.ReleaseAllocation(w.GetWorkspaceId(), ""); err != nil {
			return err
		}
		return cancel(tx, active, now, ctrlv1.FailureStage_FAILURE_STAGE_PLACING, "superseded by "+by+" before it was placed")
	}
	return inProgress(w, active)
}

// cancel ends active, a command in progress, as FAILED (CANCELLED at
// stage, saying why). A step of it still running cannot write after this
// (command.ErrLeaseLost).
func cancel(tx *store.Tx, active *store.CommandRow, now time.Time, stage ctrlv1.FailureStage, why string) error {
	active.State = storev1.CommandState_COMMAND_STATE_FAILED
	active.WaitingFor = ""
	active.Failure = &ctrlv1.WorkspaceFailure{
		Stage: stage, Reason: ctrlv1.FailureReason_FAILURE_REASON_CANCELLED,
		Message: why, CommandId: active.GetCommandId(), FailedAt: timestamppb.New(now),
	}
	active.CompletedAt = timestamppb.New(now)
	active.UpdatedAt = timestamppb.New(now)
	active.LeaseUntil = time.Time{}
	return tx.UpdateCommand(active)
}

// lifecycle admits one lifecycle command on an existing Workspace. apply
// changes the Workspace (and anything else) and says whether the command is
// long; the response is built from the Workspace and the command.
func (s *Service) lifecycle(ctx context.Context, meta *ctrlv1.CommandMetadata, kind, id string, req proto.Message,
	apply func(tx *store.Tx, w *ctrlv1.Workspace, now time.Time) (long bool, err error),
	response func(w *ctrlv1.Workspace, c *ctrlv1.WorkspaceCommand) proto.Message,
) (proto.Message, error) {
	return s.lifecycleBegun(ctx, meta, kind, id, req, apply, response, nil)
}

// lifecycleBegun is lifecycle for a command whose first step begin
// begins in its admission's transaction, once apply wrote w
// (command.Effect.Begin; nil for none).
func (s *Service) lifecycleBegun(ctx context.Context, meta *ctrlv1.CommandMetadata, kind, id string, req proto.Message,
	apply func(tx *store.Tx, w *ctrlv1.Workspace, now time.Time) (long bool, err error),
	response func(w *ctrlv1.Workspace, c *ctrlv1.WorkspaceCommand) proto.Message,
	begin func(tx *store.Tx, c *storev1.Command, w *ctrlv1.Workspace) (*begunStart, error),
) (proto.Message, error) {
	if err := command.ValidateID("command.command_id", meta); err != nil {
		return nil, err
	}
	var out proto.Message
	var begun beginning
	// A start placed by ctrl shares its admission's transaction with
	// others, as a create does (admitCreate); the other lifecycle
	// commands, whose refusals are common (a stop of a stopped
	// Workspace), are admitted alone: one refusal in a shared
	// transaction makes every admission in it run again.
	do := s.runner.Do
	if begin != nil {
		do = s.runner.DoTogether
	}
	err := do(ctx, func(tx *store.Tx) error {
		begun.forget()
		now := s.now()
		var err error
		out, err = command.Admit(tx, now, meta.GetCommandId(), kind, req, func() (command.Effect, error) {
			w, err := get(tx, id, true)
			if err != nil {
				return command.Effect{}, err
			}
			long, err := apply(tx, w, now)
			if err != nil {
				return command.Effect{}, err
			}
			w.UpdatedAt = timestamppb.New(now)
			if err := tx.PutWorkspace(w); err != nil {
				return command.Effect{}, err
			}
			c := admitted(meta.GetCommandId(), id, kind, now)
			if !long {
				c.State = ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED
				c.CompletedAt = c.GetAdmittedAt()
			}
			eff := command.Effect{Target: id, Result: response(s.view(tx, w), c), Long: long}
			if long && begin != nil {
				eff.Begin = begun.effect(func(c *storev1.Command) (begunStep, error) { return begin(tx, c, w) })
			}
			return eff, nil
		})
		return err
	})
	if err != nil {
		begun.forget()
	}
	return out, err
}

// Start admits starting a STOPPED or FAILED Workspace.
func (s *Service) Start(ctx context.Context, req *ctrlv1.StartWorkspaceRequest) (*ctrlv1.StartWorkspaceResponse, error) {
	return s.start(ctx, req, req, "")
}

// start admits req under the command input given (req itself, or the
// ...OnNode request around it), placed on nodeID only when it is set.
func (s *Service) start(ctx context.Context, req *ctrlv1.StartWorkspaceRequest, input proto.Message, nodeID string) (*ctrlv1.StartWorkspaceResponse, error) {
	var begin func(tx *store.Tx, c *storev1.Command, w *ctrlv1.Workspace) (*begunStart, error)
	if nodeID == "" {
		// Placed by ctrl: placed in its admission's transaction
		// (beginStart), as a create is.
		begin = func(tx *store.Tx, c *storev1.Command, w *ctrlv1.Workspace) (*begunStart, error) {
			rt, err := tx.GetRuntime(w.GetWorkspaceId(), true)
			if err != nil {
				return nil, err
			}
			return s.beginStart(tx, c, w, rt, req, false)
		}
	}
	out, err := s.lifecycleBegun(ctx, req.GetCommand(), kindStart, req.GetWorkspaceId(), input, s.startApply(nodeID),
		func(w *ctrlv1.Workspace, c *ctrlv1.WorkspaceCommand) proto.Message {
			return &ctrlv1.StartWorkspaceResponse{Workspace: w, Command: c}
		}, begin)
	if err != nil {
		return nil, err
	}
	return out.(*ctrlv1.StartWorkspaceResponse), nil
}

func (s *Service) applyStart(tx *store.Tx, w *ctrlv1.Workspace, now time.Time) (bool, error) {
	switch w.GetState() {
	case ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED, ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED:
	default:
		return false, precondition(w, "workspace %s is %s; only a STOPPED or FAILED Workspace starts", w.GetWorkspaceId(), w.GetState())
	}
	if err := s.volumeUsable(tx, w); err != nil {
		return false, err
	}
	if err := supersede(tx, w, now, kindStart); err != nil {
		return false, err
	}
	w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_STARTING
	w.LastStop = nil
	w.Failure = nil
	return true, nil
}

// volumeUsable refuses a start while the bound Volume is LOST.
func (s *Service) volumeUsable(tx *store.Tx, w *ctrlv1.Workspace) error {
	b := w.GetSpec().GetVolume()
	if b.GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND {
		return nil
	}
	vol, err := tx.GetVolume(b.GetVolumeId(), false)
	if err != nil {
		return err
	}
	if vol.GetBoundWorkspaceId() != w.GetWorkspaceId() {
		// A delete of w released it, then failed: w binds it no more.
		return apierr.Precondition(&ctrlv1.ErrorDetail{Stage: ctrlv1.FailureStage_FAILURE_STAGE_STARTING, ObservedWorkspace: w},
			"the Volume %s was released by a delete of this Workspace: bind a Volume again or delete the Workspace", vol.GetVolumeId())
	}
	if vol.GetState() == ctrlv1.VolumeState_VOLUME_STATE_LOST {
		return apierr.Precondition(&ctrlv1.ErrorDetail{
			Stage: ctrlv1.FailureStage_FAILURE_STAGE_STARTING, Reason: ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST, ObservedWorkspace: w,
		}, "the bound Volume %s is LOST: bind another Volume or delete the Workspace", vol.GetVolumeId())
	}
	if c, err := tx.ActiveCommandOn(vol.GetVolumeId()); err == nil {
		// An export (or a resize) of the Volume reads or changes its
		// block file: no execution may hold it meanwhile.
		return apierr.New(connect.CodeUnavailable, &ctrlv1.ErrorDetail{
			Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true, CommandId: c.GetCommandId(), ObservedWorkspace: w,
		}, "the bound Volume %s has command %s (%s) in progress; retry when it is over", vol.GetVolumeId(), c.GetCommandId(), c.GetKind())
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return pool.NotMoving(tx, vol.GetVolumeId())
}

// Stop admits stopping a Workspace.
func (s *Service) Stop(ctx context.Context, req *ctrlv1.StopWorkspaceRequest) (*ctrlv1.StopWorkspaceResponse, error) {
	if _, ok := ctrlv1.StopMode_name[int32(req.GetMode())]; !ok {
		return nil, apierr.Invalid("mode", "is not a stop mode")
	}
	force := req.GetMode() == ctrlv1.StopMode_STOP_MODE_FORCE
	out, err := s.lifecycle(ctx, req.GetCommand(), kindStop, req.GetWorkspaceId(), req,
		func(tx *store.Tx, w *ctrlv1.Workspace, now time.Time) (bool, error) {
			return s.applyStop(tx, w, now, req.GetCommand().GetCommandId(), ctrlv1.StopCause_STOP_CAUSE_REQUESTED, force)
		},
		func(w *ctrlv1.Workspace, c *ctrlv1.WorkspaceCommand) proto.Message {
			return &ctrlv1.StopWorkspaceResponse{Workspace: w, Command: c}
		})
	if err != nil {
		return nil, err
	}
	return out.(*ctrlv1.StopWorkspaceResponse), nil
}

// forceable: active, w's command in progress, is the NORMAL stop that
// made w STOPPING, which a FORCE stop supersedes.
func forceable(w *ctrlv1.Workspace, active *store.CommandRow) bool {
	return active.GetKind() == kindStop && w.GetLastStop().GetCommandId() == active.GetCommandId() && !w.GetLastStop().GetForce()
}

// applyStop stops w. An AVAILABLE Workspace is STOPPING until its node
// stopped the execution (a long command). A start still waiting for
// placement is cancelled instead and the Workspace is STOPPED at once:
// nothing ran, so nothing needed writing back.
func (s *Service) applyStop(tx *store.Tx, w *ctrlv1.Workspace, now time.Time, commandID string, cause ctrlv1.StopCause, force bool) (bool, error) {
	switch w.GetState() {
	case ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED:
		return false, nil
	case ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE:
		if active, err := tx.ActiveCommandOn(w.GetWorkspaceId()); err == nil {
			return false, inProgress(w, active)
		}
		w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPING
		w.LastStop = &ctrlv1.WorkspaceStop{Cause: cause, Force: force, CommandId: commandID, RequestedAt: timestamppb.New(now)}
		return true, nil
	case ctrlv1.WorkspaceState_WORKSPACE_STATE_STARTING:
	case ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPING:
		// A stop under way ends within the node's stop timeout (a normal
		// stop is forced then): retry after it, rather than be told that
		// there is nothing to stop. A FORCE stop does not wait for a
		// NORMAL one: it takes its place.
		active, err := tx.ActiveCommandOn(w.GetWorkspaceId())
		switch {
		case err == nil && force && forceable(w, active):
			if err := cancel(tx, active, now, ctrlv1.FailureStage_FAILURE_STAGE_STOPPING, "superseded by the FORCE stop "+commandID); err != nil {
				return false, err
			}
			w.LastStop = &ctrlv1.WorkspaceStop{Cause: cause, Force: true, CommandId: commandID, RequestedAt: timestamppb.New(now)}
			return true, nil
		case err == nil:
			return false, inProgress(w, active)
		case !errors.Is(err, store.ErrNotFound):
			return false, err
		}
		return false, precondition(w, "workspace %s is STOPPING", w.GetWorkspaceId())
	default:
		return false, precondition(w, "workspace %s is %s and has no execution to stop", w.GetWorkspaceId(), w.GetState())
	}
	if err := supersede(tx, w, now, kindStop); err != nil {
		return false, err
	}
	durability := ctrlv1.StopDurability_STOP_DURABILITY_CONFIRMED
	if force {
		durability = ctrlv1.StopDurability_STOP_DURABILITY_UNCONFIRMED
	}
	w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED
	w.LastStop = &ctrlv1.WorkspaceStop{
		Cause: cause, Force: force, Durability: durability, CommandId: commandID,
		RequestedAt: timestamppb.New(now), CompletedAt: timestamppb.New(now),
	}
	return false, nil
}

// Delete admits deleting a Workspace.
func (s *Service) Delete(ctx context.Context, req *ctrlv1.DeleteWorkspaceRequest) (*ctrlv1.DeleteWorkspaceResponse, error) {
	out, err := s.lifecycle(ctx, req.GetCommand(), kindDelete, req.GetWorkspaceId(), req, s.applyDelete,
		func(w *ctrlv1.Workspace, c *ctrlv1.WorkspaceCommand) proto.Message {
			return &ctrlv1.DeleteWorkspaceResponse{Workspace: w, Command: c}
		})
	if err != nil {
		return nil, err
	}
	return out.(*ctrlv1.DeleteWorkspaceResponse), nil
}

// applyDelete deletes w and, per its binding, its Volume: a Volume no launch
// finished creating holds nothing and is deleted whatever the binding says;
// one to delete with the Workspace needs a node to remove its block file
// (the command is long); otherwise the binding is released.
func (s *Service) applyDelete(tx *store.Tx, w *ctrlv1.Workspace, now time.Time) (bool, error) {
	switch w.GetState() {
	case ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED:
		return false, nil
	case ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETING:
		active, err := tx.ActiveCommandOn(w.GetWorkspaceId())
		if err == nil {
			return false, inProgress(w, active)
		}
	}
	if err := supersede(tx, w, now, kindDelete); err != nil {
		return false, err
	}
	rt, err := tx.GetRuntime(w.GetWorkspaceId(), false)
	if err != nil {
		return false, err
	}
	// A running execution and a writable layer need a node to go away.
	long := rt.GetInstanceId() != "" || rt.GetLayerPool() != ""
	if b := w.GetSpec().GetVolume(); b.GetMode() == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND {
		vol, err := tx.GetVolume(b.GetVolumeId(), true)
		if err != nil {
			return false, err
		}
		// A Volume no longer bound to w was released by an earlier delete
		// of w that failed after: it is not w's to delete or release, and
		// may be another Workspace's by now.
		if vol.GetBoundWorkspaceId() == w.GetWorkspaceId() {
			switch {
			case vol.GetState() == ctrlv1.VolumeState_VOLUME_STATE_CREATING, vol.GetState() == ctrlv1.VolumeState_VOLUME_STATE_LOST:
				vol.State = ctrlv1.VolumeState_VOLUME_STATE_DELETED
				vol.BoundWorkspaceId = "" // a deleted Volume is bound by no Workspace
			case b.GetDeleteWithWorkspace():
				vol.State = ctrlv1.VolumeState_VOLUME_STATE_DELETING
				long = true
			default:
				vol.BoundWorkspaceId = ""
			}
			vol.UpdatedAt = timestamppb.New(now)
			if err := tx.PutVolume(vol); err != nil {
				return false, err
			}
		}
	}
	w.LastStop = nil
	w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED
	if long {
		w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETING
	} else if err := tx.ReleaseAllocation(w.GetWorkspaceId(), ""); err != nil {
		return false, err // deleted at once: nothing runs, nothing stays charged
	}
	return long, nil
}

// runDelete stops the execution if one runs, removes the writable layer,
// then the Volume when it goes with the Workspace.
func (s *Service) runDelete(ctx context.Context, wk *command.Work) error {
	id := wk.Command().GetTargetId()
	var w *ctrlv1.Workspace
	var vol *ctrlv1.Volume
	var rt *storev1.WorkspaceRuntime
	if err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		if w, err = tx.GetWorkspace(id, false); err != nil {
			return err
		}
		if rt, err = tx.GetRuntime(id, false); err != nil {
			return err
		}
		if b := w.GetSpec().GetVolume(); b.GetMode() == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND {
			vol, err = tx.GetVolume(b.GetVolumeId(), false)
			if vol.GetBoundWorkspaceId() != id {
				vol = nil // released (applyDelete): not this delete's to remove
			}
		}
		return err
	}); err != nil {
		return err
	}
	if rt.GetInstanceId() != "" {
		answer, err := s.fleet.Await(ctx, wk, "stop", rt.GetNodeId(), &nodev1.StopExecution{InstanceId: rt.GetInstanceId(), Force: true}, ctrlv1.FailureStage_FAILURE_STAGE_DELETING)
		if answer == nil || err != nil {
			return err
		}
		if answer.Failure != nil {
			return wk.Fail(ctx, answer.Failure, func(tx *store.Tx) error { return s.deleteFailed(tx, id, answer.Failure) })
		}
		// Released as a stop releases it: its Allocation, and the Volume
		// it had attached, which a binding released at admission leaves
		// AVAILABLE to bind again.
		if err := s.store.Tx(ctx, func(tx *store.Tx) error { return s.stopped(tx, id, rt.GetInstanceId(), nil) }); err != nil {
			return err
		}
	}
	if rt.GetLayerPool() != "" {
		done, err := s.removeLayer(ctx, wk, rt)
		if !done || err != nil {
			return err
		}
	}
	if vol == nil || vol.GetState() != ctrlv1.VolumeState_VOLUME_STATE_DELETING {
		return wk.Succeed(ctx, func(tx *store.Tx) error {
			if err := s.clearRuntime(tx, id); err != nil {
				return err
			}
			return s.setWorkspace(tx, id, func(w *ctrlv1.Workspace) { w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED })
		})
	}
	finish := func(tx *store.Tx, volState ctrlv1.VolumeState) error {
		if err := s.volumes.Update(tx, vol.GetVolumeId(), func(v *ctrlv1.Volume) {
			v.State = volState
			if volState == ctrlv1.VolumeState_VOLUME_STATE_DELETED {
				v.BoundWorkspaceId = "" // its Workspace is DELETED in the same transaction
			}
		}); err != nil {
			return err
		}
		return s.setWorkspace(tx, id, func(w *ctrlv1.Workspace) { w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED })
	}
	return s.fleet.Operate(ctx, wk, fleet.Operation{
		Name: "remove-volume", Pool: vol.GetSpec().GetStoragePool(), Stage: ctrlv1.FailureStage_FAILURE_STAGE_OBSERVING_CLEANUP,
		Body: &nodev1.RemoveBlockFile{Ref: &nodev1.BlockFileRef{StoragePool: vol.GetSpec().GetStoragePool(), Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME, ObjectId: vol.GetVolumeId()}},
		Succeeded: func(tx *store.Tx, _ *anypb.Any) error {
			if err := s.clearRuntime(tx, id); err != nil {
				return err
			}
			return finish(tx, ctrlv1.VolumeState_VOLUME_STATE_DELETED)
		},
		Failed: func(tx *store.Tx, failure *ctrlv1.WorkspaceFailure) error {
			return s.setWorkspace(tx, id, func(w *ctrlv1.Workspace) {
				w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED
				w.Failure = failure
			})
		},
	})
}

func (s *Service) setWorkspace(tx *store.Tx, id string, fn func(w *ctrlv1.Workspace)) error {
	w, err := tx.GetWorkspace(id, true)
	if err != nil {
		return err
	}
	fn(w)
	w.UpdatedAt = timestamppb.New(s.now())
	return tx.PutWorkspace(w)
}

// removeLayer has a node reaching the layer's pool remove its block file.
// done is false while the node has not answered (the step ended).
func (s *Service) removeLayer(ctx context.Context, wk *command.Work, rt *storev1.WorkspaceRuntime) (bool, error) {
	nodeID := rt.GetNodeId()
	if nodeID == "" {
		if err := s.store.Tx(ctx, func(tx *store.Tx) error {
			var err error
			nodeID, err = s.fleet.NodeForPool(tx, rt.GetLayerPool())
			return err
		}); err != nil {
			return false, err
		}
		if nodeID == "" {
			return false, wk.Wait(ctx, fmt.Sprintf("a connected node that reaches storage pool %q, to remove the writable layer", rt.GetLayerPool()), time.Minute)
		}
	}
	answer, err := s.fleet.Await(ctx, wk, "remove-layer", nodeID, &nodev1.RemoveBlockFile{Ref: layerRef(rt)}, ctrlv1.FailureStage_FAILURE_STAGE_OBSERVING_CLEANUP)
	if answer == nil || err != nil {
		return false, err
	}
	if answer.Failure != nil {
		return false, wk.Fail(ctx, answer.Failure, func(tx *store.Tx) error { return s.deleteFailed(tx, rt.GetWorkspaceId(), answer.Failure) })
	}
	return true, nil
}

// deleteFailed records that a node did not do its part of Workspace id's
// delete: FAILED with why, rather than DELETING with nothing in progress.
// A delete sent again goes on from there.
func (s *Service) deleteFailed(tx *store.Tx, id string, failure *ctrlv1.WorkspaceFailure) error {
	return s.setWorkspace(tx, id, func(w *ctrlv1.Workspace) {
		w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED
		w.Failure = failure
	})
}

// clearRuntime forgets a deleted Workspace's execution and layer.
func (s *Service) clearRuntime(tx *store.Tx, id string) error {
	if err := tx.ReleaseAllocation(id, ""); err != nil {
		return err
	}
	return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: id})
}
