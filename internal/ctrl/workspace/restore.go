package workspace

// RestoreWorkspace: a new Workspace from a Transfer's archive.
//
// The archive's WorkspaceSpec (template, resources, capabilities, network
// policy, the Volume's mount path) is the base; each field the request's
// spec sets replaces it. The Workspace is admitted as a create is (the same
// validation, template resolution and placement), under a command of its
// own kind, RESTORE, which holds the Transfer RESTORING. Its Volume is a NEW
// Volume of the archived capacity; once the Workspace is placed, the node
// placing it makes the Volume and the writable layer from the archive's
// parts (ImportBlockFile) instead of empty ones, so the first start
// continues from the archived layer (retention CONTINUED). A restore that
// succeeds leaves the Transfer RESTORED; one that fails (at
// FAILURE_STAGE_PLACING when no node takes it, as a create does; at
// FAILURE_STAGE_RESTORING_WORKSPACE once placed) gives it back its state
// and releases the imported Volume whatever delete_with_workspace says:
// the Volume stays, unbound and AVAILABLE, if its data arrived, and is
// deleted if it never did.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/transfer"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// Restore admits a new Workspace from a Transfer.
func (s *Service) Restore(ctx context.Context, req *ctrlv1.RestoreWorkspaceRequest) (*ctrlv1.RestoreWorkspaceResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	if req.GetTransferId() == "" {
		return nil, apierr.Invalid("transfer_id", "is required")
	}
	if req.GetSpec().GetVolume() != nil {
		return nil, apierr.Invalid("spec.volume", "must be unset: the restored Workspace is bound to the Volume the archive carries")
	}
	m, err := s.archived(ctx, req.GetTransferId())
	if err != nil {
		return nil, err
	}
	if err := transfer.RestoresWhole("transfer_id", m); err != nil {
		return nil, err
	}
	spec, err := restoreSpec(m, req.GetSpec())
	if err != nil {
		return nil, err
	}
	create := &ctrlv1.CreateWorkspaceRequest{Command: req.GetCommand(), Spec: spec}
	res, err := s.admitCreate(ctx, create, req, "", creation{kind: kindRestore,
		also: func(tx *store.Tx, now time.Time) error {
			held, err := transfer.BeginRestore(tx, "transfer_id", req.GetTransferId(), now)
			if err != nil || req.GetSpec().GetTemplate() != nil {
				return err
			}
			return archivedTemplateHere(tx, held)
		},
		respond: func(w *ctrlv1.Workspace, c *ctrlv1.WorkspaceCommand) proto.Message {
			return &ctrlv1.RestoreWorkspaceResponse{Workspace: w, Command: c}
		}})
	if err != nil {
		return nil, err
	}
	return res.(*ctrlv1.RestoreWorkspaceResponse), nil
}

// archived is the manifest of Transfer id's archive as stored now (the
// admission reads it again under its lock).
func (s *Service) archived(ctx context.Context, id string) (*archive.Manifest, error) {
	var m *archive.Manifest
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		m, err = transfer.StoredManifest(tx, "transfer_id", id)
		return err
	})
	return m, err
}

// archivedTemplateHere refuses a restore on the archive's template
// revision when this deployment lacks it (and the archive did not carry
// its image, which PrepareRestore registers), and one that would continue
// the archived writable layer over another image than it was made over: a
// revision here with the archive's name but other content.
func archivedTemplateHere(tx *store.Tx, m *archive.Manifest) error {
	if m.Template == nil {
		return nil
	}
	r, err := tx.GetTemplateRevision(m.Template.Name, m.Template.Revision, false)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.GetState() == operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_DELETED) {
		return apierr.New(connect.CodeNotFound, &ctrlv1.ErrorDetail{Reason: ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, Field: "transfer_id",
			Stage: ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE},
			"the archive's template revision %s@%s (image %s) is not in this deployment, and the archive does not carry its image: build or import it here, or export again with include_template_image",
			m.Template.Name, m.Template.Revision, m.Template.Digest)
	} else if err != nil {
		return err
	}
	if m.Template.Digest != "" && partOf(m, transfer.PartLayer) != nil && r.GetImageDigest() != m.Template.Digest {
		return apierr.Precondition(&ctrlv1.ErrorDetail{Stage: ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE, Field: "transfer_id"},
			"the archived writable layer was made over template %s@%s with image %s; here that revision has image %s",
			m.Template.Name, m.Template.Revision, m.Template.Digest, r.GetImageDigest())
	}
	return nil
}

func partOf(m *archive.Manifest, name string) *archive.Part {
	for i := range m.Parts {
		if m.Parts[i].Name == name && m.Parts[i].Kind == archive.KindBlock {
			return &m.Parts[i]
		}
	}
	return nil
}

// restoreSpec is the create spec of a restore: the archive's, with what
// over sets in its place.
func restoreSpec(m *archive.Manifest, over *ctrlv1.WorkspaceCreateSpec) (*ctrlv1.WorkspaceCreateSpec, error) {
	base := &ctrlv1.WorkspaceCreateSpec{Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}}
	archivedSpec := &ctrlv1.WorkspaceSpec{}
	if m.Source.Kind == archive.SourceWorkspace && len(m.Source.Spec) > 0 {
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(m.Source.Spec, archivedSpec); err != nil {
			return nil, apierr.Precondition(&ctrlv1.ErrorDetail{Field: "transfer_id"}, "the archive's workspace spec does not decode: %v", err)
		}
		if t := archivedSpec.GetTemplate(); t != nil {
			base.Template = &ctrlv1.TemplateSelector{Template: t.GetTemplate(), Revision: t.GetRevision()}
		}
		base.Resources, base.Capabilities = archivedSpec.GetResources(), archivedSpec.GetCapabilities()
		if p := proto.CloneOf(archivedSpec.GetNetworkPolicy()); p != nil {
			p.Revision = 0
			base.NetworkPolicy = p
		}
	}
	if v := partOf(m, transfer.PartVolume); v != nil {
		b := archivedSpec.GetVolume() // nil for a Volume's archive
		base.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW, MountPath: b.GetMountPath(),
			NewVolume: &ctrlv1.VolumeSpec{CapacityBytes: v.LogicalSize}}
		if b != nil {
			base.Volume.DeleteWithWorkspace = b.DeleteWithWorkspace
		}
	}
	if over != nil {
		if partOf(m, transfer.PartLayer) != nil && over.GetTemplate() != nil {
			return nil, apierr.Invalid("spec.template", "must be unset: the archived writable layer continues only over the template it was made over")
		}
		merge(base, over)
	}
	if l := partOf(m, transfer.PartLayer); l != nil && base.GetResources().GetWritableLayerCapacityBytes() < l.LogicalSize {
		base.Resources = proto.CloneOf(base.GetResources())
		if base.Resources == nil {
			base.Resources = &ctrlv1.ResourceRequest{}
		}
		base.Resources.WritableLayerCapacityBytes = l.LogicalSize
	}
	return base, nil
}

// merge replaces in base each field over sets, whole: a request's
// resources replace the archived resources, not some of them.
func merge(base, over *ctrlv1.WorkspaceCreateSpec) {
	dst := base.ProtoReflect()
	over.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
}

// importParts has the node that placed a restore make its Volume and
// writable layer from the Transfer's parts. done is false when the step
// ended (waiting for the node, or the restore failed).
func (s *Service) importParts(ctx context.Context, wk *command.Work, plan *launchPlan, nodeID string) (done bool, err error) {
	req, err := wk.Request()
	if err != nil {
		return false, err
	}
	id := req.(*ctrlv1.RestoreWorkspaceRequest).GetTransferId()
	var m *archive.Manifest
	if err := s.store.Tx(ctx, func(tx *store.Tx) error {
		m, err = transfer.StoredManifest(tx, "transfer_id", id)
		return err
	}); err != nil {
		return false, err
	}
	if v := plan.volume; v != nil && v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_CREATING && partOf(m, transfer.PartVolume) != nil {
		if ok, err := s.importPart(ctx, wk, nodeID, id, transfer.PartVolume, volumeRef(v)); !ok || err != nil {
			return false, err
		}
		if err := s.store.Tx(ctx, func(tx *store.Tx) error {
			return s.volumes.Update(tx, v.GetVolumeId(), func(v *ctrlv1.Volume) { v.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE })
		}); err != nil {
			return false, err
		}
		v.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
	}
	if partOf(m, transfer.PartLayer) != nil {
		if ok, err := s.importPart(ctx, wk, nodeID, id, transfer.PartLayer, layerRef(plan.runtime)); !ok || err != nil {
			return false, err
		}
	}
	return true, nil
}

// importPart awaits the node's ImportBlockFile of one part.
func (s *Service) importPart(ctx context.Context, wk *command.Work, nodeID, transferID, part string, ref *nodev1.BlockFileRef) (bool, error) {
	answer, err := s.fleet.Await(ctx, wk, "import-"+part, nodeID, &nodev1.ImportBlockFile{Ref: ref, TransferId: transferID, Part: part}, restoreStage)
	if answer == nil || err != nil {
		return false, err
	}
	if answer.Failure != nil {
		answer.Failure.Message = fmt.Sprintf("the archive's %s part: %s", part, answer.Failure.GetMessage())
		return false, s.failStart(ctx, wk, answer.Failure)
	}
	return true, nil
}

const restoreStage = ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE

// endRestore ends the Transfer's restore with the command, and on failure
// releases the imported Volume: kept unbound if its data arrived, deleted
// if it never did.
func (s *Service) endRestore(tx *store.Tx, wk *command.Work, ok bool) error {
	if wk.Command().GetKind() != kindRestore {
		return nil
	}
	req, err := wk.Request()
	if err != nil {
		return err
	}
	now := s.now()
	if err := transfer.EndRestore(tx, req.(*ctrlv1.RestoreWorkspaceRequest).GetTransferId(), ok, now); err != nil || ok {
		return err
	}
	w, err := tx.GetWorkspace(wk.Command().GetTargetId(), true)
	if err != nil {
		return err
	}
	b := w.GetSpec().GetVolume()
	if b.GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND {
		return nil
	}
	err = s.volumes.Update(tx, b.GetVolumeId(), func(v *ctrlv1.Volume) {
		v.BoundWorkspaceId = ""
		if v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_CREATING {
			v.State = ctrlv1.VolumeState_VOLUME_STATE_DELETED
		}
	})
	if err != nil {
		return err
	}
	w.Spec.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
	w.Spec.BindingRevision++
	w.UpdatedAt = timestamppb.New(now)
	return tx.PutWorkspace(w)
}
