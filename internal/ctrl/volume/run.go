package volume

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/store"
)

func blockFile(vol *ctrlv1.Volume) *nodev1.BlockFileRef {
	return &nodev1.BlockFileRef{StoragePool: vol.GetSpec().GetStoragePool(), Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME, ObjectId: vol.GetVolumeId()}
}

// current reads the command's Volume at the start of a step.
func (v *Service) current(ctx context.Context, w *command.Work) (*ctrlv1.Volume, error) {
	var vol *ctrlv1.Volume
	err := v.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		vol, err = tx.GetVolume(w.Command().GetTargetId(), false)
		return err
	})
	return vol, err
}

// Update changes a stored Volume inside the caller's transaction, stamping
// updated_at. Other domains (a Workspace's binding and executions) use it too.
func (v *Service) Update(tx *store.Tx, id string, fn func(vol *ctrlv1.Volume)) error {
	vol, err := tx.GetVolume(id, true)
	if err != nil {
		return err
	}
	fn(vol)
	vol.UpdatedAt = timestamppb.New(v.now())
	return tx.PutVolume(vol)
}

func statusOf(result *anypb.Any) (*nodev1.BlockFileStatus, error) {
	st := &nodev1.BlockFileStatus{}
	if err := result.UnmarshalTo(st); err != nil {
		return nil, fmt.Errorf("node answered %s, want BlockFileStatus: %w", result.GetTypeUrl(), err)
	}
	return st, nil
}

func failVolume(failure *ctrlv1.WorkspaceFailure) func(vol *ctrlv1.Volume) {
	return func(vol *ctrlv1.Volume) {
		vol.State = ctrlv1.VolumeState_VOLUME_STATE_FAILED
		vol.Failure = &ctrlv1.VolumeFailure{
			Stage: failure.GetStage(), Reason: failure.GetReason(), Retryable: failure.GetRetryable(),
			Message: failure.GetMessage(), FailedAt: failure.GetFailedAt(), CommandId: failure.GetCommandId(),
		}
	}
}

// lostWhileWaiting ends a command whose Volume's pool was declared lost
// while it waited for a node: the Volume is LOST and no node will act on
// it again. ended is false when the Volume is not LOST.
func lostWhileWaiting(ctx context.Context, w *command.Work, vol *ctrlv1.Volume, stage ctrlv1.FailureStage) (ended bool, err error) {
	if vol.GetState() != ctrlv1.VolumeState_VOLUME_STATE_LOST {
		return false, nil
	}
	return true, w.Fail(ctx, &ctrlv1.WorkspaceFailure{
		Stage: stage, Reason: ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST,
		Message: fmt.Sprintf("storage pool %q of volume %s was declared lost", vol.GetSpec().GetStoragePool(), vol.GetVolumeId()),
	}, func(*store.Tx) error { return nil })
}

func (v *Service) runCreate(ctx context.Context, w *command.Work) error {
	vol, err := v.current(ctx, w)
	if err != nil {
		return err
	}
	if ended, err := lostWhileWaiting(ctx, w, vol, ctrlv1.FailureStage_FAILURE_STAGE_CREATING_VOLUME); ended || err != nil {
		return err
	}
	id := vol.GetVolumeId()
	return v.fleet.Operate(ctx, w, fleet.Operation{
		Name: "ensure", Pool: vol.GetSpec().GetStoragePool(), Stage: ctrlv1.FailureStage_FAILURE_STAGE_CREATING_VOLUME,
		Body: &nodev1.EnsureBlockFile{Ref: blockFile(vol), CapacityBytes: vol.GetSpec().GetCapacityBytes()},
		Succeeded: func(tx *store.Tx, result *anypb.Any) error {
			if _, err := statusOf(result); err != nil {
				return err
			}
			return v.Update(tx, id, func(vol *ctrlv1.Volume) {
				if vol.GetState() == ctrlv1.VolumeState_VOLUME_STATE_CREATING {
					vol.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
				}
			})
		},
		Failed: func(tx *store.Tx, failure *ctrlv1.WorkspaceFailure) error {
			return v.Update(tx, id, failVolume(failure))
		},
	})
}

func (v *Service) runResize(ctx context.Context, w *command.Work) error {
	vol, err := v.current(ctx, w)
	if err != nil {
		return err
	}
	req, err := w.Request()
	if err != nil {
		return err
	}
	if ended, err := lostWhileWaiting(ctx, w, vol, ctrlv1.FailureStage_FAILURE_STAGE_RESIZING_VOLUME); ended || err != nil {
		return err
	}
	resize, ok := req.(*ctrlv1.ResizeVolumeRequest)
	if !ok {
		return errors.New("ResizeVolume command without its request")
	}
	id := vol.GetVolumeId()
	restore := func(vol *ctrlv1.Volume) {
		if vol.GetState() == ctrlv1.VolumeState_VOLUME_STATE_RESIZING {
			vol.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
		}
	}
	return v.fleet.Operate(ctx, w, fleet.Operation{
		Name: "grow", Pool: vol.GetSpec().GetStoragePool(), Stage: ctrlv1.FailureStage_FAILURE_STAGE_RESIZING_VOLUME,
		Body: &nodev1.EnsureBlockFile{Ref: blockFile(vol), CapacityBytes: resize.GetCapacityBytes()},
		Succeeded: func(tx *store.Tx, result *anypb.Any) error {
			st, err := statusOf(result)
			if err != nil {
				return err
			}
			return v.Update(tx, id, func(vol *ctrlv1.Volume) {
				restore(vol)
				vol.Spec.CapacityBytes = st.GetCapacityBytes()
			})
		},
		// A grow that failed leaves the Volume as it was: AVAILABLE at its
		// old capacity (the node never shrinks or half-grows a file).
		Failed: func(tx *store.Tx, _ *ctrlv1.WorkspaceFailure) error { return v.Update(tx, id, restore) },
	})
}

func (v *Service) runDelete(ctx context.Context, w *command.Work) error {
	vol, err := v.current(ctx, w)
	if err != nil {
		return err
	}
	if vol.GetState() == ctrlv1.VolumeState_VOLUME_STATE_DELETED {
		// Its pool was declared lost while the removal waited: the removal
		// was dropped and nothing is left to remove.
		return w.Succeed(ctx, func(*store.Tx) error { return nil })
	}
	id := vol.GetVolumeId()
	return v.fleet.Operate(ctx, w, fleet.Operation{
		Name: "remove", Pool: vol.GetSpec().GetStoragePool(), Stage: ctrlv1.FailureStage_FAILURE_STAGE_OBSERVING_CLEANUP,
		Body: &nodev1.RemoveBlockFile{Ref: blockFile(vol)},
		Succeeded: func(tx *store.Tx, _ *anypb.Any) error {
			return v.Update(tx, id, func(vol *ctrlv1.Volume) { vol.State = ctrlv1.VolumeState_VOLUME_STATE_DELETED })
		},
		Failed: func(tx *store.Tx, failure *ctrlv1.WorkspaceFailure) error {
			return v.Update(tx, id, failVolume(failure))
		},
	})
}

// Observed records what the Volume's holder (the node running the
// execution that has it attached) reported, as its observation at now on
// ctrl's clock. It is diagnostic: it changes neither state, nor
// updated_at, nor any revision. Nothing else writes it, so it is kept as
// it was while nothing holds the Volume.
func (v *Service) Observed(tx *store.Tx, volumeID string, r *nodev1.VolumeReport) error {
	vol, err := tx.GetVolume(volumeID, true)
	if err != nil {
		return err
	}
	obs := &ctrlv1.VolumeObservation{
		Condition: ctrlv1.VolumeCondition_VOLUME_CONDITION_HEALTHY, CapacityBytes: r.GetCapacityBytes(),
		ObservedAt: timestamppb.New(v.now()),
	}
	if r.GetDamaged() {
		obs.Condition, obs.Message = ctrlv1.VolumeCondition_VOLUME_CONDITION_DAMAGED, r.GetMessage()
	}
	vol.Observation = obs
	return tx.PutVolume(vol)
}
