package workspace

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/egress"
	"github.com/kibotos/kibotos/internal/ctrl/netpolicy"
	"github.com/kibotos/kibotos/internal/ctrl/pool"
	"github.com/kibotos/kibotos/internal/ctrl/record"
	"github.com/kibotos/kibotos/internal/ctrl/transfer"
	"github.com/kibotos/kibotos/internal/store"
)

// notDeleted refuses a Workspace that is deleted or being deleted.
func notDeleted(w *ctrlv1.Workspace) error {
	switch w.GetState() {
	case ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED, ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETING:
		return precondition(w, "workspace %s is %s", w.GetWorkspaceId(), w.GetState())
	}
	return nil
}

// notExporting refuses a change of w's spec while an ExportWorkspace of it
// runs (unavailable naming the export): the archive carries the spec the
// Transfer's manifest was made from, at its admission.
func notExporting(tx *store.Tx, w *ctrlv1.Workspace) error {
	active, err := tx.ActiveCommandOn(w.GetWorkspaceId())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	case active.GetKind() == transfer.KindExportWorkspace:
		return inProgress(w, active)
	}
	return nil
}

// stale is the failed_precondition of a CAS token the caller read before a
// change: nothing is written.
func stale(w *ctrlv1.Workspace, field string, expected, current uint64) error {
	return precondition(w, "%s %d is stale: the current revision is %d", field, expected, current)
}

// UpdateMemory replaces resources.memory_bytes; CAS on resources_revision.
// It takes effect at the next start.
func (s *Service) UpdateMemory(ctx context.Context, req *ctrlv1.UpdateWorkspaceMemoryRequest) (*ctrlv1.UpdateWorkspaceMemoryResponse, error) {
	if err := checkMemory("memory_bytes", req.GetMemoryBytes()); err != nil {
		return nil, err
	}
	out, err := s.lifecycle(ctx, req.GetCommand(), kindMemory, req.GetWorkspaceId(), req,
		func(tx *store.Tx, w *ctrlv1.Workspace, _ time.Time) (bool, error) {
			if err := notDeleted(w); err != nil {
				return false, err
			}
			if err := notExporting(tx, w); err != nil {
				return false, err
			}
			spec := w.GetSpec()
			if req.GetExpectedResourcesRevision() != spec.GetResourcesRevision() {
				return false, stale(w, "expected_resources_revision", req.GetExpectedResourcesRevision(), spec.GetResourcesRevision())
			}
			if spec.GetResources().GetMemoryBytes() != req.GetMemoryBytes() {
				spec.Resources.MemoryBytes = req.GetMemoryBytes()
				spec.ResourcesRevision++
			}
			return false, nil
		},
		func(w *ctrlv1.Workspace, _ *ctrlv1.WorkspaceCommand) proto.Message {
			return &ctrlv1.UpdateWorkspaceMemoryResponse{Workspace: w}
		})
	if err != nil {
		return nil, err
	}
	return out.(*ctrlv1.UpdateWorkspaceMemoryResponse), nil
}

// ResizeWritableLayer grows the writable layer's requested capacity; CAS on
// resources_revision. It is judged against the capacity the layer has once
// it exists (the BEST_EFFORT tier's), else against the one asked for: no
// layer exists before a first start, so the new capacity is what the first
// start creates. An existing layer is grown at the next start.
func (s *Service) ResizeWritableLayer(ctx context.Context, req *ctrlv1.ResizeWorkspaceWritableLayerRequest) (*ctrlv1.ResizeWorkspaceWritableLayerResponse, error) {
	if req.GetCapacityBytes() == 0 {
		return nil, apierr.Invalid("capacity_bytes", "is required")
	}
	if err := checkLayer("capacity_bytes", req.GetCapacityBytes()); err != nil {
		return nil, err
	}
	out, err := s.lifecycle(ctx, req.GetCommand(), kindLayer, req.GetWorkspaceId(), req,
		func(tx *store.Tx, w *ctrlv1.Workspace, _ time.Time) (bool, error) {
			if err := notDeleted(w); err != nil {
				return false, apierr.AtStage(err, ctrlv1.FailureStage_FAILURE_STAGE_RESIZING_WRITABLE_LAYER)
			}
			if err := notExporting(tx, w); err != nil {
				return false, apierr.AtStage(err, ctrlv1.FailureStage_FAILURE_STAGE_RESIZING_WRITABLE_LAYER)
			}
			spec := w.GetSpec()
			if req.GetExpectedResourcesRevision() != spec.GetResourcesRevision() {
				return false, apierr.AtStage(stale(w, "expected_resources_revision", req.GetExpectedResourcesRevision(), spec.GetResourcesRevision()),
					ctrlv1.FailureStage_FAILURE_STAGE_RESIZING_WRITABLE_LAYER)
			}
			cur, err := s.layerCapacityNow(tx, w)
			if err != nil {
				return false, err
			}
			if req.GetCapacityBytes() <= cur {
				return false, apierr.Invalid("capacity_bytes", "the writable layer only grows: %d is not above %d", req.GetCapacityBytes(), cur)
			}
			spec.Resources.WritableLayerCapacityBytes = req.GetCapacityBytes()
			spec.ResourcesRevision++
			return false, nil
		},
		func(w *ctrlv1.Workspace, c *ctrlv1.WorkspaceCommand) proto.Message {
			return &ctrlv1.ResizeWorkspaceWritableLayerResponse{Workspace: w, Command: c}
		})
	if err != nil {
		return nil, err
	}
	return out.(*ctrlv1.ResizeWorkspaceWritableLayerResponse), nil
}

// UpdateVolumeBinding replaces the binding of a Workspace that holds no
// execution; CAS on binding_revision. The Volume it releases is kept.
func (s *Service) UpdateVolumeBinding(ctx context.Context, req *ctrlv1.UpdateWorkspaceVolumeBindingRequest) (*ctrlv1.UpdateWorkspaceVolumeBindingResponse, error) {
	binding, err := normalizeBinding("volume", req.GetVolume(), false)
	if err != nil {
		return nil, err
	}
	kick := false // a released Volume's creation was admitted
	out, err := s.lifecycle(ctx, req.GetCommand(), kindBinding, req.GetWorkspaceId(), req,
		func(tx *store.Tx, w *ctrlv1.Workspace, now time.Time) (bool, error) {
			switch w.GetState() {
			case ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED, ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED, ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING:
			default:
				return false, precondition(w, "workspace %s is %s; the binding changes only while it holds no execution", w.GetWorkspaceId(), w.GetState())
			}
			// A create or start not sent to a node yet takes the new
			// binding; an export holds the one it captures.
			if active, err := tx.ActiveCommandOn(w.GetWorkspaceId()); err == nil && (active.GetNodeId() != "" || active.GetKind() == transfer.KindExportWorkspace) {
				return false, inProgress(w, active)
			}
			spec := w.GetSpec()
			if req.GetExpectedBindingRevision() != spec.GetBindingRevision() {
				return false, stale(w, "expected_binding_revision", req.GetExpectedBindingRevision(), spec.GetBindingRevision())
			}
			old := spec.GetVolume()
			if proto.Equal(old, binding) {
				return false, nil
			}
			if old.GetMode() == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND && old.GetVolumeId() != binding.GetVolumeId() {
				if err := pool.NotMoving(tx, old.GetVolumeId()); err != nil {
					return false, err
				}
				made, err := s.release(tx, w, old.GetVolumeId(), req.GetCommand().GetCommandId())
				if err != nil {
					return false, err
				}
				kick = kick || made
			}
			if err := s.bind(tx, w, binding, ""); err != nil {
				return false, err
			}
			spec.BindingRevision++
			return false, nil
		},
		func(w *ctrlv1.Workspace, _ *ctrlv1.WorkspaceCommand) proto.Message {
			return &ctrlv1.UpdateWorkspaceVolumeBindingResponse{Workspace: w}
		})
	if err != nil {
		return nil, err
	}
	if kick {
		s.runner.Kick()
	}
	return out.(*ctrlv1.UpdateWorkspaceVolumeBindingResponse), nil
}

// maxDrainSeconds bounds how long moved connections keep their old path.
const maxDrainSeconds = 3600

// UpdateNetworkPolicy replaces the network policy; CAS on its revision. A
// content change increases the revision by one, and on a Workspace that
// runs (or is starting) the command goes on to apply it to the execution
// (runPolicy): network_policy_status moves only once the node confirmed it.
func (s *Service) UpdateNetworkPolicy(ctx context.Context, req *ctrlv1.UpdateWorkspaceNetworkPolicyRequest) (*ctrlv1.UpdateWorkspaceNetworkPolicyResponse, error) {
	policy, err := validatePolicyUpdate(req)
	if err != nil {
		return nil, err
	}
	out, err := s.lifecycle(ctx, req.GetCommand(), kindPolicy, req.GetWorkspaceId(), req,
		func(tx *store.Tx, w *ctrlv1.Workspace, _ time.Time) (bool, error) {
			if err := notDeleted(w); err != nil {
				return false, err
			}
			cur := w.GetSpec().GetNetworkPolicy()
			if req.GetExpectedRevision() != cur.GetRevision() {
				return false, stale(w, "expected_revision", req.GetExpectedRevision(), cur.GetRevision())
			}
			if err := egress.CheckPolicyReferences(tx, "network_policy", policy); err != nil {
				return false, err
			}
			if netpolicy.SameContent(cur, policy) {
				return false, nil
			}
			policy.Revision = cur.GetRevision() + 1
			w.Spec.NetworkPolicy = policy
			switch w.GetState() {
			case ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING, ctrlv1.WorkspaceState_WORKSPACE_STATE_STARTING:
				return true, nil // an execution runs, or may by the time it is applied
			}
			return false, nil
		},
		func(w *ctrlv1.Workspace, _ *ctrlv1.WorkspaceCommand) proto.Message {
			return &ctrlv1.UpdateWorkspaceNetworkPolicyResponse{Workspace: w}
		})
	if err != nil {
		return nil, err
	}
	return out.(*ctrlv1.UpdateWorkspaceNetworkPolicyResponse), nil
}

// validatePolicyUpdate is the part of UpdateNetworkPolicy's checks that
// needs no database (lifecycle checks the command_id): it returns the
// policy to store.
func validatePolicyUpdate(req *ctrlv1.UpdateWorkspaceNetworkPolicyRequest) (*ctrlv1.NetworkPolicy, error) {
	policy, err := netpolicy.Normalize("network_policy", req.GetNetworkPolicy())
	if err != nil {
		return nil, err
	}
	if req.GetDrainSeconds() > maxDrainSeconds {
		return nil, apierr.Invalid("drain_seconds", "must be at most %d", maxDrainSeconds)
	}
	return policy, nil
}

// UpdateExpiration sets or clears the expiration policy; CAS on its
// revision (zero when none is set).
func (s *Service) UpdateExpiration(ctx context.Context, req *ctrlv1.UpdateWorkspaceExpirationRequest) (*ctrlv1.UpdateWorkspaceExpirationResponse, error) {
	change := req.GetChange()
	switch {
	case change.GetSet() != nil:
		if err := checkExpiration("change.set", change.GetSet(), s.now()); err != nil {
			return nil, err
		}
	case change.GetClear():
	default:
		return nil, apierr.Invalid("change", "must set a policy or clear it (clear: true)")
	}
	out, err := s.lifecycle(ctx, req.GetCommand(), kindExpiration, req.GetWorkspaceId(), req,
		func(_ *store.Tx, w *ctrlv1.Workspace, _ time.Time) (bool, error) {
			if err := notDeleted(w); err != nil {
				return false, err
			}
			cur := w.GetExpiration().GetRevision()
			if req.GetExpectedExpirationRevision() != cur {
				return false, stale(w, "expected_expiration_revision", req.GetExpectedExpirationRevision(), cur)
			}
			switch {
			case change.GetSet() != nil:
				w.Expiration = &ctrlv1.WorkspaceExpiration{Policy: change.GetSet(), Revision: cur + 1}
			case w.GetExpiration().GetPolicy() != nil:
				w.Expiration = cleared(w.GetExpiration())
			}
			return false, nil
		},
		func(w *ctrlv1.Workspace, _ *ctrlv1.WorkspaceCommand) proto.Message {
			return &ctrlv1.UpdateWorkspaceExpirationResponse{Workspace: w}
		})
	if err != nil {
		return nil, err
	}
	return out.(*ctrlv1.UpdateWorkspaceExpirationResponse), nil
}

// release gives up w's binding of the Volume volumeID, which is kept. A
// Volume a failed delete of w released already is another's to touch. One
// a NEW binding asked for that no launch has made yet (CREATING) is made
// as CreateVolume makes one, under commandID/create-volume (a command_id a
// caller cannot send): made says so.
func (s *Service) release(tx *store.Tx, w *ctrlv1.Workspace, volumeID, commandID string) (made bool, err error) {
	vol, err := tx.GetVolume(volumeID, true)
	if err != nil || vol.GetBoundWorkspaceId() != w.GetWorkspaceId() {
		return false, err
	}
	vol.BoundWorkspaceId = ""
	vol.UpdatedAt = timestamppb.New(s.now())
	if err := tx.PutVolume(vol); err != nil {
		return false, err
	}
	if vol.GetState() != ctrlv1.VolumeState_VOLUME_STATE_CREATING {
		return false, nil
	}
	return true, s.volumes.CreateReleased(tx, vol, commandID+"/create-volume")
}

// cleared is exp without its policy, at the next revision: the record
// stays, so that a revision (the CAS token, and the id of the expiration's
// command) is never handed out twice.
func cleared(exp *ctrlv1.WorkspaceExpiration) *ctrlv1.WorkspaceExpiration {
	return &ctrlv1.WorkspaceExpiration{Revision: exp.GetRevision() + 1}
}

// metadataUpdate fills what labels and annotations updates share.
func (s *Service) metadataUpdate(u record.MetadataUpdate[*ctrlv1.Workspace]) record.MetadataUpdate[*ctrlv1.Workspace] {
	u.Load = func(tx *store.Tx, id string) (*ctrlv1.Workspace, error) { return get(tx, id, true) }
	u.Check = notDeleted
	u.Save = func(tx *store.Tx, w *ctrlv1.Workspace, now time.Time) error {
		w.UpdatedAt = timestamppb.New(now)
		return tx.PutWorkspace(w)
	}
	u.Stale = func(w *ctrlv1.Workspace, format string, args ...any) error { return precondition(w, format, args...) }
	u.Result = func(w *ctrlv1.Workspace) proto.Message { return w }
	return u
}

// UpdateLabels replaces all labels; CAS on labels_revision.
func (s *Service) UpdateLabels(ctx context.Context, req *ctrlv1.UpdateWorkspaceLabelsRequest) (*ctrlv1.UpdateWorkspaceLabelsResponse, error) {
	out, err := record.ReplaceMetadata(ctx, s.store, s.now(), s.metadataUpdate(record.MetadataUpdate[*ctrlv1.Workspace]{
		Kind: kindLabels, Command: req.GetCommand(), Request: req, ID: req.GetWorkspaceId(),
		Expected: req.GetExpectedLabelsRevision(), Values: req.GetLabels(), RevisionField: "expected_labels_revision",
		Slot: func(w *ctrlv1.Workspace) (*map[string]string, *uint64) { return &w.Labels, &w.LabelsRevision },
	}))
	if err != nil {
		return nil, err
	}
	return &ctrlv1.UpdateWorkspaceLabelsResponse{Workspace: s.viewOf(ctx, out.(*ctrlv1.Workspace))}, nil
}

// UpdateAnnotations replaces all annotations; CAS on annotations_revision.
func (s *Service) UpdateAnnotations(ctx context.Context, req *ctrlv1.UpdateWorkspaceAnnotationsRequest) (*ctrlv1.UpdateWorkspaceAnnotationsResponse, error) {
	out, err := record.ReplaceMetadata(ctx, s.store, s.now(), s.metadataUpdate(record.MetadataUpdate[*ctrlv1.Workspace]{
		Kind: kindAnnotations, Annotations: true, Command: req.GetCommand(), Request: req, ID: req.GetWorkspaceId(),
		Expected: req.GetExpectedAnnotationsRevision(), Values: req.GetAnnotations(), RevisionField: "expected_annotations_revision",
		Slot: func(w *ctrlv1.Workspace) (*map[string]string, *uint64) { return &w.Annotations, &w.AnnotationsRevision },
	}))
	if err != nil {
		return nil, err
	}
	return &ctrlv1.UpdateWorkspaceAnnotationsResponse{Workspace: s.viewOf(ctx, out.(*ctrlv1.Workspace))}, nil
}

// viewOf projects w in its own read transaction.
func (s *Service) viewOf(ctx context.Context, w *ctrlv1.Workspace) *ctrlv1.Workspace {
	out := w
	_ = s.store.Tx(ctx, func(tx *store.Tx) error {
		out = s.view(tx, w)
		return nil
	})
	return out
}

// layerCapacityNow is what a resize of w's writable layer must exceed: the
// capacity asked for, or the one the layer has when that is more (a layer
// made with the storage profile's default for a request of zero).
func (s *Service) layerCapacityNow(tx *store.Tx, w *ctrlv1.Workspace) (uint64, error) {
	asked := w.GetSpec().GetResources().GetWritableLayerCapacityBytes()
	rt, err := tx.GetRuntime(w.GetWorkspaceId(), false)
	if err != nil {
		return 0, err
	}
	if layerExists(rt) {
		return max(asked, rt.GetLayerCapacityBytes()), nil
	}
	return asked, nil
}
