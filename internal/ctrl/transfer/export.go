package transfer

// Exports (ExportWorkspace, ExportVolume), docs/TRANSFER-FORMAT.md "Export
// through a node".
//
// An export is a long command on the Workspace or the Volume, so that no
// start, delete, move or resize changes what it reads until it ended. Its
// admission records the Transfer EXPORTING. The command then hands each
// block file, in archive order, to a node reaching its pool
// (ExportBlockFile); the node streams the part's body back with
// UploadTransferPart, which ctrl stages under <dir>/<transfer_id>.parts/.
// Once every part is staged, ctrl frames the archive from them
// (archive.Assemble, which checks each part's length and digest again),
// renames it into place and ends the command and the Transfer, COMPLETE,
// in one transaction. A failure anywhere ends both, FAILED at
// FAILURE_STAGE_EXPORTING_WORKSPACE, and the staged parts go.
//
// Crash safety: the command resumes where its records say. A node's
// answer is kept in its operation, so a staged part is never asked for
// again; an assembly cut short starts over from the staged parts; parts
// left by a Transfer no longer EXPORTING are swept.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/pool"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// Command kinds of exports; the Workspace's is shown as
// WORKSPACE_COMMAND_KIND_EXPORT.
const (
	KindExportWorkspace = "ExportWorkspace"
	KindExportVolume    = "ExportVolume"
)

// exportStage is the stage of every export failure.
const exportStage = ctrlv1.FailureStage_FAILURE_STAGE_EXPORTING_WORKSPACE

// Part names of the block files an archive carries: what an export writes
// and what a restore makes the Volume and the writable layer from.
const (
	PartVolume = "volume"
	PartLayer  = "layer"
)

// source is what an export captures, as the store has it.
type source struct {
	kind archive.SourceKind
	id   string
	// spec is the WorkspaceSpec or the Volume, as the archive carries it.
	spec      proto.Message
	workspace *ctrlv1.Workspace
	volume    *ctrlv1.Volume
	template  *archive.Revision
	platform  *archive.Revision
	parts     []blockPart
	// withImage: the archive carries the template revision's image.
	withImage bool
}

// blockPart is a block file to carry, under its part name.
type blockPart struct {
	name string
	ref  *nodev1.BlockFileRef
}

// summary is the provider-neutral manifest of the source, before the
// archive exists.
func (src *source) summary() *ctrlv1.TransferManifest {
	m := &ctrlv1.TransferManifest{Completeness: ctrlv1.Completeness_COMPLETENESS_COMPLETE}
	if src.kind == archive.SourceVolume {
		m.SourceVolumeId = src.id
	} else {
		m.SourceWorkspaceId = src.id
		m.Template = src.workspace.GetSpec().GetTemplate()
		m.Resources = src.workspace.GetSpec().GetResources()
	}
	if src.volume != nil {
		m.VolumeCapacityBytes = src.volume.GetSpec().GetCapacityBytes()
	}
	return m
}

// workspaceSource reads what ExportWorkspace captures of id: its spec, the
// revisions it runs on, its bound Volume and (layer) its placed writable
// layer.
func workspaceSource(tx *store.Tx, id string, layer bool) (*source, error) {
	w, err := pool.LiveWorkspace(tx, id)
	if err != nil {
		return nil, err
	}
	src := &source{kind: archive.SourceWorkspace, id: id, spec: w.GetSpec(), workspace: w}
	if src.template, err = templateRevision(tx, w.GetSpec().GetTemplate()); err != nil {
		return nil, err
	}
	if src.platform, err = platformRevision(tx, w.GetSpec().GetLaunchRef()); err != nil {
		return nil, err
	}
	if b := w.GetSpec().GetVolume(); b.GetMode() == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND {
		if src.volume, err = tx.GetVolume(b.GetVolumeId(), false); err != nil {
			return nil, err
		}
		src.parts = append(src.parts, volumePart(src.volume))
	}
	if !layer {
		return src, nil
	}
	rt, err := tx.GetRuntime(id, false)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if rt.GetLayerPool() != "" {
		// A Workspace never started has no layer: there is nothing of
		// the BEST_EFFORT tier to carry.
		src.parts = append(src.parts, blockPart{name: PartLayer, ref: &nodev1.BlockFileRef{
			StoragePool: rt.GetLayerPool(), Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_WRITABLE_LAYER, ObjectId: id,
		}})
	}
	return src, nil
}

// volumeSource reads what ExportVolume captures of id.
func volumeSource(tx *store.Tx, id string) (*source, error) {
	v, err := tx.GetVolume(id, false)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierr.NotFound("volume", id)
	} else if err != nil {
		return nil, err
	}
	return &source{kind: archive.SourceVolume, id: id, spec: v, volume: v, parts: []blockPart{volumePart(v)}}, nil
}

func volumePart(v *ctrlv1.Volume) blockPart {
	return blockPart{name: PartVolume, ref: &nodev1.BlockFileRef{
		StoragePool: v.GetSpec().GetStoragePool(), Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME, ObjectId: v.GetVolumeId(),
	}}
}

// templateRevision is the template revision ref names, by its image's
// digest; nil when the spec names none.
func templateRevision(tx *store.Tx, ref *ctrlv1.TemplateRef) (*archive.Revision, error) {
	if ref.GetTemplate() == "" {
		return nil, nil
	}
	r, err := tx.GetTemplateRevision(ref.GetTemplate(), ref.GetRevision(), false)
	if errors.Is(err, store.ErrNotFound) {
		return &archive.Revision{Name: ref.GetTemplate(), Revision: ref.GetRevision()}, nil
	} else if err != nil {
		return nil, err
	}
	return &archive.Revision{Name: ref.GetTemplate(), Revision: ref.GetRevision(), Digest: r.GetImageDigest()}, nil
}

// platformRevision is the Launch the Workspace boots (its PlatformKey and
// launch ref), by its initramfs's digest (the guest agent's build); nil
// before a start bound one.
func platformRevision(tx *store.Tx, launchRef string) (*archive.Revision, error) {
	if launchRef == "" {
		return nil, nil
	}
	l, err := tx.GetLaunch(launchRef)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return &archive.Revision{Name: l.GetPlatformKey(), Revision: l.GetLaunchRef(), Digest: l.GetInitrd().GetDigest()}, nil
}

// ExportWorkspace admits an export of a Workspace with no execution.
func (s *Service) ExportWorkspace(ctx context.Context, req *ctrlv1.ExportWorkspaceRequest) (*ctrlv1.ExportWorkspaceResponse, error) {
	if req.GetWorkspaceId() == "" {
		return nil, apierr.Invalid("workspace_id", "is required")
	}
	res, fresh, err := admit(ctx, s, "command.command_id", req.GetCommand(), KindExportWorkspace, req,
		func(tx *store.Tx, now time.Time) (string, *ctrlv1.ExportWorkspaceResponse, error) {
			if err := notDeleted(tx, req.GetWorkspaceId()); err != nil {
				return "", nil, err
			}
			src, err := workspaceSource(tx, req.GetWorkspaceId(), req.GetIncludeWritableLayer())
			if err != nil {
				return "", nil, apierr.AtStage(err, exportStage)
			}
			if err := exportable(tx, src); err != nil {
				return "", nil, apierr.AtStage(err, exportStage)
			}
			if req.GetIncludeTemplateImage() {
				if _, err := s.templateImage(src); err != nil {
					return "", nil, err
				}
			}
			tr, err := s.newExport(tx, src, now)
			if err != nil {
				return "", nil, err
			}
			c := &ctrlv1.WorkspaceCommand{
				CommandId: req.GetCommand().GetCommandId(), WorkspaceId: src.id, Kind: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_EXPORT,
				State: ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_ADMITTED, AdmittedAt: timestamppb.New(now), UpdatedAt: timestamppb.New(now),
			}
			return src.id, &ctrlv1.ExportWorkspaceResponse{Transfer: tr, Command: c}, nil
		}, true)
	if err != nil {
		return nil, err
	}
	s.kickIf(fresh)
	return res, nil
}

// ExportVolume admits an export of an AVAILABLE Volume.
func (s *Service) ExportVolume(ctx context.Context, req *ctrlv1.ExportVolumeRequest) (*ctrlv1.ExportVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, apierr.Invalid("volume_id", "is required")
	}
	res, fresh, err := admit(ctx, s, "command.command_id", req.GetCommand(), KindExportVolume, req,
		func(tx *store.Tx, now time.Time) (string, *ctrlv1.ExportVolumeResponse, error) {
			src, err := volumeSource(tx, req.GetVolumeId())
			if err != nil {
				return "", nil, apierr.AtStage(err, exportStage)
			}
			if err := exportable(tx, src); err != nil {
				return "", nil, apierr.AtStage(err, exportStage)
			}
			tr, err := s.newExport(tx, src, now)
			return src.id, &ctrlv1.ExportVolumeResponse{Transfer: tr}, err
		}, true)
	if err != nil {
		return nil, err
	}
	s.kickIf(fresh)
	return res, nil
}

func (s *Service) kickIf(fresh bool) {
	if fresh && s.deps.Runner != nil {
		s.deps.Runner.Kick()
	}
}

// newExport records the Transfer an admitted export starts as.
func (s *Service) newExport(tx *store.Tx, src *source, now time.Time) (*ctrlv1.Transfer, error) {
	ts := timestamppb.New(now)
	tr := &ctrlv1.Transfer{
		TransferId: newID(), State: ctrlv1.TransferState_TRANSFER_STATE_EXPORTING,
		Manifest: src.summary(), CreatedAt: ts, UpdatedAt: ts,
	}
	if s.cfg.Retention > 0 {
		tr.ExpiresAt = timestamppb.New(now.Add(s.cfg.Retention))
	}
	return tr, tx.PutTransfer(&store.TransferRecord{Transfer: tr})
}

// notDeleted refuses the export of a Workspace that is deleted or being
// deleted: it exists (GetWorkspace reads it) and has nothing to export
// (failed_precondition, as a start of it answers).
func notDeleted(tx *store.Tx, id string) error {
	w, err := tx.GetWorkspace(id, false)
	if err != nil {
		return nil // workspaceSource answers
	}
	if st := w.GetState(); st == ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED || st == ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETING {
		return apierr.Precondition(&ctrlv1.ErrorDetail{Stage: exportStage, ObservedWorkspace: w}, "workspace %s is %s: nothing to export", id, st)
	}
	return nil
}

// exportable refuses an export, in this order: a command in progress on
// the Volume (unavailable: a Volume RESIZING or CREATING is AVAILABLE once
// it ends), a LOST Volume (failed_precondition, VOLUME_LOST), a Volume
// that is not AVAILABLE or a Workspace with an execution
// (failed_precondition), a command in progress on the Workspace,
// or a move of either (unavailable).
func exportable(tx *store.Tx, src *source) error {
	v := src.volume
	if v != nil {
		if c, err := tx.ActiveCommandOn(v.GetVolumeId()); err == nil {
			return busyWith(v.GetVolumeId(), c)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	if v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_LOST {
		return apierr.Precondition(&ctrlv1.ErrorDetail{Stage: exportStage, Reason: ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST, ObservedVolume: v},
			"the Volume %s is LOST: its storage is gone", v.GetVolumeId())
	}
	if src.kind == archive.SourceVolume && v.GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
		return apierr.Precondition(&ctrlv1.ErrorDetail{Stage: exportStage, ObservedVolume: v},
			"volume %s is %s; only an AVAILABLE Volume exports", v.GetVolumeId(), v.GetState())
	}
	workspaceID := src.workspace.GetWorkspaceId()
	if workspaceID == "" {
		workspaceID = v.GetBoundWorkspaceId()
	}
	if err := pool.NoExecution(tx, workspaceID); err != nil {
		return err
	}
	if workspaceID != "" {
		if c, err := tx.ActiveCommandOn(workspaceID); err == nil {
			return busyWith(workspaceID, c)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	if v != nil {
		if err := pool.NotMoving(tx, v.GetVolumeId()); err != nil {
			return err
		}
	}
	if workspaceID != "" {
		if mv, err := tx.GetPoolMove(store.LayerKey(workspaceID)); err == nil {
			return apierr.New(connect.CodeUnavailable, &ctrlv1.ErrorDetail{Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true, CommandId: mv.CommandID},
				"the writable layer of workspace %s is moving to storage pool %q (command %s); retry when the move settled", workspaceID, mv.TargetPool, mv.CommandID)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}

func busyWith(id string, c *store.CommandRow) error {
	return apierr.New(connect.CodeUnavailable, &ctrlv1.ErrorDetail{Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true, CommandId: c.GetCommandId()},
		"%s has command %s (%s) in progress; retry when it is over", id, c.GetCommandId(), c.GetKind())
}

// runExport drives an export: each block file from a node, then the
// archive.
func (s *Service) runExport(ctx context.Context, w *command.Work) error {
	id, src, err := s.exportOf(ctx, w)
	if err != nil {
		return err
	}
	parts := make([]archive.Part, len(src.parts))
	for i, p := range src.parts {
		part, answer, err := s.exportPart(ctx, w, id, p)
		if answer == nil || err != nil {
			return err
		}
		if answer.Failure != nil {
			return s.failExport(ctx, w, id, answer.Failure)
		}
		parts[i] = part
	}
	return s.finishExport(ctx, w, id, src, parts)
}

// exportOf reads the Transfer an export command makes and its source.
func (s *Service) exportOf(ctx context.Context, w *command.Work) (string, *source, error) {
	req, err := w.Request()
	if err != nil {
		return "", nil, err
	}
	res, err := w.Command().GetResult().UnmarshalNew()
	if err != nil {
		return "", nil, err
	}
	var id string
	var src *source
	err = s.store.Tx(ctx, func(tx *store.Tx) error {
		switch r := req.(type) {
		case *ctrlv1.ExportWorkspaceRequest:
			id = res.(*ctrlv1.ExportWorkspaceResponse).GetTransfer().GetTransferId()
			src, err = workspaceSource(tx, r.GetWorkspaceId(), r.GetIncludeWritableLayer())
			if src != nil {
				src.withImage = r.GetIncludeTemplateImage()
			}
		case *ctrlv1.ExportVolumeRequest:
			id = res.(*ctrlv1.ExportVolumeResponse).GetTransfer().GetTransferId()
			src, err = volumeSource(tx, r.GetVolumeId())
		default:
			err = fmt.Errorf("export command %s without its request", w.Command().GetCommandId())
		}
		return err
	})
	return id, src, err
}

// exportPart has a node reaching p's pool send it; it returns the part as
// the manifest describes it once the node answered. A nil answer means the
// step ended waiting.
func (s *Service) exportPart(ctx context.Context, w *command.Work, id string, p blockPart) (archive.Part, *fleet.Answer, error) {
	name := "export-" + p.name
	var nodeID string
	sent := false
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		_, err := tx.GetNodeOperation(w.Command().GetCommandId()+"/"+name, false)
		if sent = err == nil; sent || !errors.Is(err, store.ErrNotFound) {
			return err
		}
		nodeID, err = s.deps.Fleet.NodeForPool(tx, p.ref.GetStoragePool())
		return err
	})
	if err != nil {
		return archive.Part{}, nil, err
	}
	if !sent && nodeID == "" {
		return archive.Part{}, nil, w.Wait(ctx, fmt.Sprintf("a connected node that reaches storage pool %q", p.ref.GetStoragePool()), 30*time.Second)
	}
	a, err := s.deps.Fleet.Await(ctx, w, name, nodeID, &nodev1.ExportBlockFile{Ref: p.ref, TransferId: id, Part: p.name}, exportStage)
	if a == nil || err != nil || a.Failure != nil {
		return archive.Part{}, a, err
	}
	var e nodev1.BlockFileExported
	if err := a.Result.UnmarshalTo(&e); err != nil {
		return archive.Part{}, nil, fmt.Errorf("node answered %s, want BlockFileExported: %w", a.Result.GetTypeUrl(), err)
	}
	return archive.Part{Name: p.name, Kind: archive.KindBlock, Size: e.GetSizeBytes(), LogicalSize: e.GetLogicalSizeBytes(),
		Extents: e.GetExtents(), Digest: e.GetDigest()}, a, nil
}

// failExport ends the command and the Transfer with f, then removes what
// the export staged.
func (s *Service) failExport(ctx context.Context, w *command.Work, id string, f *ctrlv1.WorkspaceFailure) error {
	f = proto.CloneOf(f)
	f.Stage = exportStage
	err := w.Fail(ctx, f, func(tx *store.Tx) error {
		r, err := getTransfer(tx, id, true)
		if err != nil {
			return err
		}
		now := timestamppb.New(w.Now())
		r.Transfer.State, r.Transfer.UpdatedAt = ctrlv1.TransferState_TRANSFER_STATE_FAILED, now
		r.Transfer.Failure = &ctrlv1.TransferFailure{Stage: exportStage, Reason: f.GetReason(), Retryable: f.GetRetryable(),
			Message: f.GetMessage(), FailedAt: now}
		return tx.PutTransfer(r)
	})
	if err != nil {
		return err
	}
	s.removeStaged(id)
	return nil
}

// PartTemplateImage names the blob part carrying the template image.
const PartTemplateImage = "template-image"

// templateImage is the file of the template image src runs on, from the
// catalog; failed_precondition when there is none to carry.
func (s *Service) templateImage(src *source) (string, error) {
	if src.template == nil || src.template.Digest == "" || s.deps.Catalog == nil {
		return "", apierr.Precondition(&ctrlv1.ErrorDetail{Field: "include_template_image", Stage: exportStage},
			"workspace %s has no template image here to carry", src.id)
	}
	path, err := s.deps.Catalog.ArtifactPath(src.template.Digest)
	if err != nil {
		return "", apierr.Precondition(&ctrlv1.ErrorDetail{Field: "include_template_image", Stage: exportStage},
			"the image %s of template %s@%s is not in this ctrl's catalog: %v", src.template.Digest, src.template.Name, src.template.Revision, err)
	}
	return path, nil
}

// specJSON is the source's spec as the archive carries it.
func specJSON(m proto.Message) ([]byte, error) { return protojson.Marshal(m) }
