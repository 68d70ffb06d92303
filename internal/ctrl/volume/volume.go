// Package volume is the Volume domain: validation, the records and their
// revisions, and the long commands that create, grow and remove a Volume's
// block file on a node.
package volume

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/labels"
	"github.com/kibotos/kibotos/internal/ctrl/page"
	"github.com/kibotos/kibotos/internal/ctrl/pool"
	"github.com/kibotos/kibotos/internal/store"
)

const mib = 1 << 20

// Profile is the storage profile: what a request that names no capacity
// gets, and the largest a Volume may be.
type Profile struct {
	DefaultCapacity uint64
	MaxCapacity     uint64
}

// DefaultProfile is 1 GiB by default, at most 16 TiB.
var DefaultProfile = Profile{DefaultCapacity: 1 << 30, MaxCapacity: 16 << 40}

// Kicker wakes the command runner after an admission.
type Kicker interface{ Kick() }

// Service is the Volume domain.
type Service struct {
	store   *store.Store
	fleet   *fleet.Fleet
	kick    Kicker
	profile Profile
	now     func() time.Time
}

// New makes the Volume domain and registers its long commands with r.
func New(s *store.Store, f *fleet.Fleet, r *command.Runner, profile Profile) *Service {
	v := &Service{store: s, fleet: f, kick: r, profile: profile, now: time.Now}
	r.Handle(kindCreate, v.runCreate)
	r.Handle(kindResize, v.runResize)
	r.Handle(kindDelete, v.runDelete)
	return v
}

const (
	kindCreate = "CreateVolume"
	kindResize = "ResizeVolume"
	kindDelete = "DeleteVolume"
)

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "vol-" + hex.EncodeToString(b)
}

// checkCapacity validates a non-zero capacity request.
func (v *Service) checkCapacity(field string, c uint64) error {
	switch {
	case c%mib != 0:
		return apierr.Invalid(field, "must be a whole number of MiB (a multiple of 1048576)")
	case c > v.profile.MaxCapacity:
		return apierr.Invalid(field, "must be at most %d bytes", v.profile.MaxCapacity)
	}
	return nil
}

func validateMetadata(labelsField string, l map[string]string, annotationsField string, a map[string]string) error {
	if err := labels.ValidateLabels(labelsField, l); err != nil {
		return err
	}
	return labels.ValidateAnnotations(annotationsField, a)
}

// Create admits a new Volume in CREATING; a node reaching its pool creates
// its block file.
func (v *Service) Create(ctx context.Context, req *ctrlv1.CreateVolumeRequest) (*ctrlv1.CreateVolumeResponse, error) {
	if err := v.validateCreate(req); err != nil {
		return nil, err
	}
	var res *ctrlv1.CreateVolumeResponse
	err := command.Do(ctx, v.store, func(tx *store.Tx) error {
		out, err := command.Admit(tx, v.now(), req.GetCommand().GetCommandId(), kindCreate, req, func() (command.Effect, error) {
			vol, err := v.newVolume(tx, req.GetSpec(), "", req.GetLabels(), req.GetAnnotations())
			if err != nil {
				return command.Effect{}, err
			}
			return command.Effect{Target: vol.GetVolumeId(), Result: &ctrlv1.CreateVolumeResponse{Volume: vol}, Long: true}, tx.PutVolume(vol)
		})
		if err == nil {
			res = out.(*ctrlv1.CreateVolumeResponse)
		}
		return err
	})
	if err == nil {
		v.kick.Kick()
	}
	return res, err
}

// validateCreate is every check of a create that needs no database.
func (v *Service) validateCreate(req *ctrlv1.CreateVolumeRequest) error {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return err
	}
	if c := req.GetSpec().GetCapacityBytes(); c != 0 {
		if err := v.checkCapacity("spec.capacity_bytes", c); err != nil {
			return err
		}
	}
	if p := req.GetSpec().GetStoragePool(); p != "" && !pool.ValidName(p) {
		return apierr.Invalid("spec.storage_pool", "is not a storage pool name")
	}
	return validateMetadata("labels", req.GetLabels(), "annotations", req.GetAnnotations())
}

// newVolume builds a CREATING Volume with its pool and capacity resolved.
// WorkspaceService uses it for NEW bindings too. nodeID is the node a
// pinned placement fixes the Volume's Workspace to, "" for none.
func (v *Service) newVolume(tx *store.Tx, spec *ctrlv1.VolumeSpec, nodeID string, l, a map[string]string) (*ctrlv1.Volume, error) {
	name, err := v.resolvePool(tx, spec.GetStoragePool(), nodeID)
	if err != nil {
		return nil, err
	}
	capacity := spec.GetCapacityBytes()
	if capacity == 0 {
		capacity = v.profile.DefaultCapacity
	}
	// The new Volume reserves its capacity in the pool from now on.
	if refusal, err := pool.Reserve(tx, name, capacity); err != nil || refusal != nil {
		if refusal != nil {
			return nil, refusal.API(ctrlv1.FailureStage_FAILURE_STAGE_CREATING_VOLUME)
		}
		return nil, err
	}
	now := timestamppb.New(v.now())
	return &ctrlv1.Volume{
		VolumeId: newID(), State: ctrlv1.VolumeState_VOLUME_STATE_CREATING,
		Spec:      &ctrlv1.VolumeSpec{StoragePool: name, CapacityBytes: capacity},
		CreatedAt: now, UpdatedAt: now,
		Labels: l, Annotations: a, LabelsRevision: 1, AnnotationsRevision: 1,
	}, nil
}

// NewVolume is newVolume for other domains admitting a Volume in their own
// transaction; the caller stores it. nodeID is the node its Workspace's
// placement is pinned to (CreateWorkspaceOnNode), "" for none.
func (v *Service) NewVolume(tx *store.Tx, spec *ctrlv1.VolumeSpec, nodeID string) (*ctrlv1.Volume, error) {
	return v.newVolume(tx, spec, nodeID, nil, nil)
}

// CreateReleased admits, in the caller's transaction, the creation of a
// CREATING Volume a Workspace's NEW binding asked for and released before
// any launch made it: the reference keeps a released Volume, and no launch
// will make this one now, so it is made as CreateVolume makes one, under
// commandID. The runner is kicked by the caller once the transaction
// commits.
func (v *Service) CreateReleased(tx *store.Tx, vol *ctrlv1.Volume, commandID string) error {
	req := &ctrlv1.CreateVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: commandID}, Spec: vol.GetSpec()}
	_, err := command.Admit(tx, v.now(), commandID, kindCreate, req, func() (command.Effect, error) {
		return command.Effect{Target: vol.GetVolumeId(), Result: &ctrlv1.CreateVolumeResponse{Volume: vol}, Long: true}, nil
	})
	return err
}

// CheckNewSpec validates a VolumeSpec a request asks ctrl to create.
func (v *Service) CheckNewSpec(field string, spec *ctrlv1.VolumeSpec) error {
	if c := spec.GetCapacityBytes(); c != 0 {
		if err := v.checkCapacity(field+".capacity_bytes", c); err != nil {
			return err
		}
	}
	if p := spec.GetStoragePool(); p != "" && !pool.ValidName(p) {
		return apierr.Invalid(field+".storage_pool", "is not a storage pool name")
	}
	return nil
}

// resolvePool is the pool a new Volume goes to: the one its request names,
// else the default pool of the node its placement is pinned to (the
// node's own default, as the spec says of default_pool), else the
// deployment's default.
func (v *Service) resolvePool(tx *store.Tx, pool, nodeID string) (string, error) {
	if pool == "" && nodeID != "" {
		def, err := v.fleet.NodeDefaultPool(tx, nodeID)
		if def != "" || err != nil {
			return def, err
		}
	}
	if pool == "" {
		def, err := v.fleet.DefaultPool(tx)
		if err != nil {
			return "", err
		}
		if def == "" {
			return "", apierr.New(connect.CodeFailedPrecondition, &ctrlv1.ErrorDetail{
				Stage: ctrlv1.FailureStage_FAILURE_STAGE_CREATING_VOLUME, Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE,
				Retryable: true, Field: "spec.storage_pool",
			}, "no default storage pool: no node has declared one yet (start a node with --pool NAME=DIR,default)")
		}
		return def, nil
	}
	declared, err := v.fleet.PoolDeclared(tx, pool)
	if err != nil {
		return "", err
	}
	if !declared {
		return "", apierr.New(connect.CodeNotFound, &ctrlv1.ErrorDetail{
			Stage: ctrlv1.FailureStage_FAILURE_STAGE_VALIDATING, Reason: ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, Field: "spec.storage_pool",
		}, "spec.storage_pool: no node declares storage pool %q", pool)
	}
	return pool, nil
}

// get reads a Volume or answers not_found.
func get(tx *store.Tx, id string, lock bool) (*ctrlv1.Volume, error) {
	vol, err := tx.GetVolume(id, lock)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierr.NotFound("volume", id)
	}
	return vol, err
}

// Get reads one Volume, with its observation.
func (v *Service) Get(ctx context.Context, req *ctrlv1.GetVolumeRequest) (*ctrlv1.GetVolumeResponse, error) {
	var vol *ctrlv1.Volume
	err := v.store.Snapshot(ctx, func(tx *store.Tx) error {
		var err error
		vol, err = get(tx, req.GetVolumeId(), false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.GetVolumeResponse{Volume: vol}, nil
}

// List pages Volumes by volume_id, narrowed by a label selector.
func (v *Service) List(ctx context.Context, req *ctrlv1.ListVolumesRequest) (*ctrlv1.ListVolumesResponse, error) {
	sel, err := labels.Parse(req.GetLabelSelector())
	if err != nil {
		return nil, err
	}
	filter := fmt.Sprintf("%s|deleted=%t", sel.String(), req.GetIncludeDeleted())
	after, err := page.After(req.GetPageToken(), filter)
	if err != nil {
		return nil, err
	}
	res := &ctrlv1.ListVolumesResponse{}
	err = v.store.Snapshot(ctx, func(tx *store.Tx) error {
		var err error
		res.Volumes, res.NextPageToken, err = page.Collect(page.Size(req.GetPageSize()), after, filter,
			func(vol *ctrlv1.Volume) string { return vol.GetVolumeId() },
			func(vol *ctrlv1.Volume) bool { return sel.Matches(vol.GetLabels()) },
			func(after string, n int) ([]*ctrlv1.Volume, error) {
				return tx.ListVolumes(after, n, req.GetIncludeDeleted())
			})
		return err
	})
	return res, err
}

// inProgress is unavailable: a long command holds the Volume.
func inProgress(vol *ctrlv1.Volume, c *store.CommandRow) error {
	return apierr.New(connect.CodeUnavailable, &ctrlv1.ErrorDetail{
		Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true, CommandId: c.GetCommandId(), ObservedVolume: vol,
	}, "volume %s has command %s (%s) in progress; retry when it is over", vol.GetVolumeId(), c.GetCommandId(), c.GetKind())
}

func precondition(vol *ctrlv1.Volume, format string, args ...any) error {
	return apierr.Precondition(&ctrlv1.ErrorDetail{ObservedVolume: vol}, format, args...)
}

// lostVolume refuses a change to LOST Volume vol: failed_precondition with
// FAILURE_REASON_VOLUME_LOST, as a binding to it and its export say.
func lostVolume(vol *ctrlv1.Volume) error {
	return apierr.Precondition(&ctrlv1.ErrorDetail{ObservedVolume: vol, Reason: ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST},
		"volume %s is LOST: its storage is gone; it can only be read and deleted", vol.GetVolumeId())
}

// Resize admits growing a Volume; it is RESIZING until the node grew its
// block file and filesystem.
func (v *Service) Resize(ctx context.Context, req *ctrlv1.ResizeVolumeRequest) (*ctrlv1.ResizeVolumeResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	if req.GetCapacityBytes() == 0 {
		return nil, apierr.Invalid("capacity_bytes", "is required")
	}
	if err := v.checkCapacity("capacity_bytes", req.GetCapacityBytes()); err != nil {
		return nil, err
	}
	var res *ctrlv1.ResizeVolumeResponse
	err := command.Do(ctx, v.store, func(tx *store.Tx) error {
		out, err := command.Admit(tx, v.now(), req.GetCommand().GetCommandId(), kindResize, req, func() (command.Effect, error) {
			vol, err := get(tx, req.GetVolumeId(), true)
			if err != nil {
				return command.Effect{}, err
			}
			if err := v.mutable(tx, vol); err != nil {
				return command.Effect{}, err
			}
			if err := growable(tx, vol); err != nil {
				return command.Effect{}, err
			}
			if req.GetCapacityBytes() <= vol.GetSpec().GetCapacityBytes() {
				return command.Effect{}, apierr.Invalid("capacity_bytes", "a Volume only grows: %d is not above its capacity %d", req.GetCapacityBytes(), vol.GetSpec().GetCapacityBytes())
			}
			// Growing reserves the difference in the Volume's pool.
			growth := req.GetCapacityBytes() - vol.GetSpec().GetCapacityBytes()
			if refusal, err := pool.Reserve(tx, vol.GetSpec().GetStoragePool(), growth); err != nil || refusal != nil {
				if refusal != nil {
					return command.Effect{}, refusal.API(ctrlv1.FailureStage_FAILURE_STAGE_RESIZING_VOLUME)
				}
				return command.Effect{}, err
			}
			vol.State = ctrlv1.VolumeState_VOLUME_STATE_RESIZING
			vol.UpdatedAt = timestamppb.New(v.now())
			return command.Effect{Target: vol.GetVolumeId(), Result: &ctrlv1.ResizeVolumeResponse{Volume: withoutObservation(vol)}, Long: true}, tx.PutVolume(vol)
		})
		if err == nil {
			res = out.(*ctrlv1.ResizeVolumeResponse)
		}
		return err
	})
	if err == nil {
		v.kick.Kick()
	}
	return res, err
}

// growable refuses a resize while an execution holds the Volume, or may
// soon: the node grows the block file and runs e2fsck and resize2fs on it,
// which a filesystem a guest has mounted would not survive. As for a move,
// a bound Workspace with a command in progress (a create or a start, say)
// answers unavailable, and one with an execution failed_precondition.
func growable(tx *store.Tx, vol *ctrlv1.Volume) error {
	if id := vol.GetBoundWorkspaceId(); id != "" {
		// Locked, so that a start admitted at the same time on another
		// connection comes before this resize or after it, and sees it.
		if _, err := tx.GetWorkspace(id, true); err != nil {
			return err
		}
		if c, err := tx.ActiveCommandOn(id); err == nil {
			return apierr.New(connect.CodeUnavailable, &ctrlv1.ErrorDetail{
				Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true, CommandId: c.GetCommandId(), ObservedVolume: vol,
			}, "workspace %s, which binds volume %s, has command %s (%s) in progress; retry when it is over", id, vol.GetVolumeId(), c.GetCommandId(), c.GetKind())
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err := pool.NoExecution(tx, id); err != nil {
			return err
		}
	}
	if vol.GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
		return precondition(vol, "volume %s is %s; only an AVAILABLE Volume grows", vol.GetVolumeId(), vol.GetState())
	}
	return nil
}

// mutable refuses a Volume that is lost, deleted, or held by a command.
func (v *Service) mutable(tx *store.Tx, vol *ctrlv1.Volume) error {
	switch vol.GetState() {
	case ctrlv1.VolumeState_VOLUME_STATE_LOST:
		return lostVolume(vol)
	case ctrlv1.VolumeState_VOLUME_STATE_DELETED, ctrlv1.VolumeState_VOLUME_STATE_DELETING:
		return precondition(vol, "volume %s is %s", vol.GetVolumeId(), vol.GetState())
	case ctrlv1.VolumeState_VOLUME_STATE_FAILED:
		return precondition(vol, "volume %s is FAILED: it can only be read and deleted", vol.GetVolumeId())
	}
	if c, err := tx.ActiveCommandOn(vol.GetVolumeId()); err == nil {
		return inProgress(vol, c)
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// Delete admits deleting a Volume no undeleted Workspace binds.
func (v *Service) Delete(ctx context.Context, req *ctrlv1.DeleteVolumeRequest) (*ctrlv1.DeleteVolumeResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	var res *ctrlv1.DeleteVolumeResponse
	long := false
	err := command.Do(ctx, v.store, func(tx *store.Tx) error {
		out, err := command.Admit(tx, v.now(), req.GetCommand().GetCommandId(), kindDelete, req, func() (command.Effect, error) {
			vol, err := get(tx, req.GetVolumeId(), true)
			if err != nil {
				return command.Effect{}, err
			}
			long, err = v.startDelete(tx, vol)
			if err != nil {
				return command.Effect{}, apierr.AtStage(err, ctrlv1.FailureStage_FAILURE_STAGE_DELETING_VOLUME)
			}
			return command.Effect{Target: vol.GetVolumeId(), Result: &ctrlv1.DeleteVolumeResponse{Volume: withoutObservation(vol)}, Long: long}, nil
		})
		if err == nil {
			res = out.(*ctrlv1.DeleteVolumeResponse)
		}
		return err
	})
	if err == nil && long {
		v.kick.Kick()
	}
	return res, err
}

// startDelete moves vol towards deletion and stores it. long is whether a
// node must still remove its block file.
func (v *Service) startDelete(tx *store.Tx, vol *ctrlv1.Volume) (long bool, err error) {
	if vol.GetBoundWorkspaceId() != "" {
		return false, precondition(vol, "volume %s is bound to workspace %s; delete the Workspace or release the binding first", vol.GetVolumeId(), vol.GetBoundWorkspaceId())
	}
	now := timestamppb.New(v.now())
	switch vol.GetState() {
	case ctrlv1.VolumeState_VOLUME_STATE_DELETED:
		return false, nil
	case ctrlv1.VolumeState_VOLUME_STATE_LOST:
		vol.State = ctrlv1.VolumeState_VOLUME_STATE_DELETED // its storage is gone: nothing to remove
		vol.UpdatedAt = now
		return false, tx.PutVolume(vol)
	}
	active, err := tx.ActiveCommandOn(vol.GetVolumeId())
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return false, err
	case active.GetKind() == kindCreate && active.GetNodeId() == "":
		// Its creation never reached a node: nothing exists to remove.
		if err := cancel(tx, active, v.now()); err != nil {
			return false, err
		}
		vol.State = ctrlv1.VolumeState_VOLUME_STATE_DELETED
		vol.UpdatedAt = now
		return false, tx.PutVolume(vol)
	default:
		return false, inProgress(vol, active)
	}
	vol.State = ctrlv1.VolumeState_VOLUME_STATE_DELETING
	vol.UpdatedAt = now
	return true, tx.PutVolume(vol)
}

// cancel ends a command that a later one superseded before it did anything.
func cancel(tx *store.Tx, c *store.CommandRow, now time.Time) error {
	c.State = storev1.CommandState_COMMAND_STATE_FAILED
	c.WaitingFor = ""
	c.Failure = &ctrlv1.WorkspaceFailure{
		Stage: ctrlv1.FailureStage_FAILURE_STAGE_CREATING_VOLUME, Reason: ctrlv1.FailureReason_FAILURE_REASON_CANCELLED,
		Message: "the Volume was deleted before a node created it", CommandId: c.GetCommandId(), FailedAt: timestamppb.New(now),
	}
	c.CompletedAt = timestamppb.New(now)
	c.UpdatedAt = timestamppb.New(now)
	c.LeaseUntil = time.Time{}
	return tx.UpdateCommand(c)
}

func withoutObservation(vol *ctrlv1.Volume) *ctrlv1.Volume {
	out := proto.Clone(vol).(*ctrlv1.Volume)
	out.Observation = nil
	return out
}
