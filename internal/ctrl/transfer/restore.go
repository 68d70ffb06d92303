package transfer

// Restores (RestoreWorkspace; the Workspace domain drives them): the
// Transfer's side. A restore takes a COMPLETE, IMPORTED or RESTORED
// Transfer and holds it RESTORING while the new Workspace is made: its
// block parts reach the node that places the Workspace through
// FetchTransferPart. A restore that succeeds leaves the Transfer RESTORED;
// one that fails gives it back the state it had, so it can be restored
// again. A RESTORED Transfer keeps its archive: it downloads, and
// restores again, until it is deleted or expires. (designed here)

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/template"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// BeginRestore holds Transfer id RESTORING for a restore admitted in tx
// and returns its archive's manifest. field names the request's field in
// errors: not_found for a Transfer that does not exist, unavailable while
// it is exported, imported or restored, failed_precondition for one with
// no archive to restore from.
func BeginRestore(tx *store.Tx, field, id string, now time.Time) (*archive.Manifest, error) {
	if id == "" {
		return nil, apierr.Invalid(field, "is required")
	}
	r, err := tx.GetTransfer(id, true)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierr.New(connect.CodeNotFound, &ctrlv1.ErrorDetail{Stage: ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE, Reason: ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, Field: field}, "%s: transfer %q not found", field, id)
	} else if err != nil {
		return nil, err
	}
	if err := restorable(field, id, r.Transfer.GetState()); err != nil {
		return nil, err
	}
	m, err := decodeStored(r)
	if err != nil {
		return nil, err
	}
	r.Transfer.State, r.Transfer.UpdatedAt = ctrlv1.TransferState_TRANSFER_STATE_RESTORING, timestamppb.New(now)
	r.Transfer.DoneBytes, r.Transfer.TotalBytes = 0, restoredBytes(m)
	return m, tx.PutTransfer(r)
}

// RestoresWhole refuses, as failed_precondition naming field, an archive
// holding a part a restore would leave behind. A restore makes the Volume
// from the block part "volume", the writable layer from the block part
// "layer", and registers the template from the blob "template-image"; an
// archive with any other part (made by a newer ctrl, or by hand) restored
// here would lose that part's data without a word. An import takes such
// an archive (it is well formed); only its restore is refused.
func RestoresWhole(field string, m *archive.Manifest) error {
	known := map[string]archive.PartKind{PartVolume: archive.KindBlock, PartLayer: archive.KindBlock, PartTemplateImage: archive.KindBlob}
	for _, p := range m.Parts {
		if kind, ok := known[p.Name]; !ok || p.Kind != kind {
			return apierr.Precondition(&ctrlv1.ErrorDetail{Field: field, Stage: ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE},
				"the archive holds a %s part %q, which a restore here would leave behind: it restores the block parts %q and %q and the blob %q only",
				p.Kind, p.Name, PartVolume, PartLayer, PartTemplateImage)
		}
	}
	return nil
}

// restorable refuses a restore of Transfer id in state st unless st
// restores: unavailable while it is exported, imported or restored,
// failed_precondition when it has no archive to restore from.
func restorable(field, id string, st ctrlv1.TransferState) error {
	switch {
	case busy(st):
		return apierr.New(connect.CodeUnavailable, &ctrlv1.ErrorDetail{Stage: ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE, Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true, Field: field},
			"transfer %s is %s; restore it once that ends", id, stateName(st))
	case !downloadable(st):
		return apierr.Precondition(&ctrlv1.ErrorDetail{Stage: ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE, Field: field},
			"transfer %s is %s: only a COMPLETE, IMPORTED or RESTORED Transfer restores", id, stateName(st))
	}
	return nil
}

// StoredManifest is the manifest of Transfer id's archive, as the store
// keeps it; field names the request's field in errors. One without an
// archive yet (being exported or imported) is refused as BeginRestore
// refuses it.
func StoredManifest(tx *store.Tx, field, id string) (*archive.Manifest, error) {
	r, err := tx.GetTransfer(id, false)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierr.New(connect.CodeNotFound, &ctrlv1.ErrorDetail{Stage: ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE, Reason: ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, Field: field}, "%s: transfer %q not found", field, id)
	} else if err != nil {
		return nil, err
	}
	if len(r.ArchiveManifest) == 0 {
		if err := restorable(field, id, r.Transfer.GetState()); err != nil {
			return nil, err
		}
		return nil, apierr.Precondition(&ctrlv1.ErrorDetail{Stage: ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE, Field: field},
			"transfer %s is %s: it has no archive to restore from", id, stateName(r.Transfer.GetState()))
	}
	return decodeStored(r)
}

func decodeStored(r *store.TransferRecord) (*archive.Manifest, error) {
	m := &archive.Manifest{}
	if err := json.Unmarshal(r.ArchiveManifest, m); err != nil {
		return nil, fmt.Errorf("the stored manifest of transfer %s: %w", r.Transfer.GetTransferId(), err)
	}
	return m, nil
}

// restoredBytes is what a restore moves: the block parts' bodies.
func restoredBytes(m *archive.Manifest) uint64 {
	var n uint64
	for _, p := range m.Parts {
		if p.Kind == archive.KindBlock {
			n += p.Size
		}
	}
	return n
}

// EndRestore ends a restore of Transfer id: RESTORED when it succeeded
// (restored_at now), else the state it had before: RESTORED when an
// earlier restore succeeded, COMPLETE for an export of this deployment,
// which names its source, IMPORTED for an upload, which never does. A
// Transfer no longer RESTORING is left alone.
func EndRestore(tx *store.Tx, id string, ok bool, now time.Time) error {
	r, err := tx.GetTransfer(id, true)
	if err != nil || r.Transfer.GetState() != ctrlv1.TransferState_TRANSFER_STATE_RESTORING {
		return err
	}
	tr := r.Transfer
	switch {
	case ok:
		tr.State, tr.RestoredAt = ctrlv1.TransferState_TRANSFER_STATE_RESTORED, timestamppb.New(now)
		tr.DoneBytes = tr.GetTotalBytes()
	case tr.GetRestoredAt() != nil:
		tr.State = ctrlv1.TransferState_TRANSFER_STATE_RESTORED
	case tr.GetManifest().GetSourceWorkspaceId() != "" || tr.GetManifest().GetSourceVolumeId() != "":
		tr.State = ctrlv1.TransferState_TRANSFER_STATE_COMPLETE
	default:
		tr.State = ctrlv1.TransferState_TRANSFER_STATE_IMPORTED
	}
	if !ok {
		// Its progress is its archive's again, whole, as before.
		tr.DoneBytes, tr.TotalBytes = tr.GetManifest().GetSizeBytes(), tr.GetManifest().GetSizeBytes()
	}
	tr.UpdatedAt = timestamppb.New(now)
	return tx.PutTransfer(r)
}

// ServePart streams, from req.offset, the body of the part a pending
// ImportBlockFile operation of nodeID asks for; the first message
// describes the part.
func (s *Service) ServePart(ctx context.Context, nodeID string, req *nodev1.FetchTransferPartRequest, send func(*nodev1.FetchTransferPartResponse) error) error {
	op, err := s.importOperation(ctx, nodeID, req.GetOperationId())
	if err != nil {
		return err
	}
	f, err := os.Open(s.archivePath(op.GetTransferId()))
	if err != nil {
		return fmt.Errorf("open the archive of transfer %s: %w", op.GetTransferId(), err)
	}
	defer f.Close()
	m, spans, err := archive.Locate(f, archive.Limits{})
	if err != nil {
		return fmt.Errorf("the archive of transfer %s: %w", op.GetTransferId(), err)
	}
	i := partIndex(m, op.GetPart())
	if i < 0 {
		return apierr.Precondition(nil, "transfer %s has no part %q", op.GetTransferId(), op.GetPart())
	}
	p, span := m.Parts[i], spans[i]
	if req.GetOffset() > span.Size {
		return apierr.Invalid("offset", "is %d, past the end of the %d-byte part", req.GetOffset(), span.Size)
	}
	first := &nodev1.FetchTransferPartResponse{Offset: req.GetOffset(), Part: &nodev1.TransferPart{
		Name: p.Name, Kind: string(p.Kind), SizeBytes: p.Size, LogicalSizeBytes: p.LogicalSize, Extents: p.Extents, Digest: p.Digest,
	}}
	if err := send(first); err != nil {
		return err
	}
	body := io.NewSectionReader(f, span.Offset+int64(req.GetOffset()), int64(span.Size-req.GetOffset()))
	// done_bytes counts the block parts before this one as restored: a
	// restore imports them in manifest order.
	before := restoredBytes(&archive.Manifest{Parts: m.Parts[:i]})
	progress := s.newMeter(op.GetTransferId(), ctrlv1.TransferState_TRANSFER_STATE_RESTORING, restoredBytes(m))
	buf := make([]byte, downloadChunk)
	for off := req.GetOffset(); ; {
		n, err := body.Read(buf)
		if n > 0 {
			if err := send(&nodev1.FetchTransferPartResponse{Offset: off, Data: buf[:n]}); err != nil {
				return err
			}
			off += uint64(n)
			if err := progress.at(ctx, before+off); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func partIndex(m *archive.Manifest, name string) int {
	for i, p := range m.Parts {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// importOperation is the pending ImportBlockFile operation opID of nodeID
// whose Transfer is RESTORING.
func (s *Service) importOperation(ctx context.Context, nodeID, opID string) (*nodev1.ImportBlockFile, error) {
	var body nodev1.ImportBlockFile
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		return pendingOperation(tx, nodeID, opID, &body, ctrlv1.TransferState_TRANSFER_STATE_RESTORING)
	})
	return &body, err
}

// PrepareRestore registers the template revision Transfer id's archive
// names when this deployment lacks it and the archive carries its image
// (ExportWorkspace's include_template_image), so that the restore can boot
// it. Without the image a missing revision is left to the admission, which
// answers not_found naming it.
//
// It registers nothing for a request that names its own template or that
// the admission refuses for its form (no transfer_id, a volume binding);
// what a later admission refuses leaves the revision registered, as the
// immutable copy of the archive's it is.
func (s *Service) PrepareRestore(ctx context.Context, req *ctrlv1.RestoreWorkspaceRequest) error {
	const field = "transfer_id"
	id := req.GetTransferId()
	if id == "" || req.GetSpec().GetTemplate() != nil || req.GetSpec().GetVolume() != nil {
		return nil
	}
	var m *archive.Manifest
	missing := false
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		if m, err = StoredManifest(tx, field, id); err != nil || m.Template == nil || RestoresWhole(field, m) != nil {
			m = nil
			return nil // the admission answers what is wrong with the Transfer
		}
		_, err = tx.GetTemplateRevision(m.Template.Name, m.Template.Revision, false)
		if missing = errors.Is(err, store.ErrNotFound); missing {
			return nil
		}
		return err
	})
	i := -1
	if err == nil && missing {
		i = partIndex(m, PartTemplateImage)
	}
	if err != nil || i < 0 {
		return err
	}
	if p := m.Parts[i]; p.Kind != archive.KindBlob || p.Digest != m.Template.Digest {
		return apierr.Precondition(&ctrlv1.ErrorDetail{Field: field, Stage: ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE},
			"the archive's template image (%s) is not the image of template %s@%s (%s)", p.Digest, m.Template.Name, m.Template.Revision, m.Template.Digest)
	}
	img, err := s.extractBlob(id, i)
	if err != nil {
		return err
	}
	defer os.Remove(img.Path)
	return s.deps.Catalog.AdoptTemplateRevision(ctx, m.Template.Name, m.Template.Revision, img)
}

// extractBlob writes part i of Transfer id's archive to a temporary file,
// verified.
func (s *Service) extractBlob(id string, i int) (*template.Image, error) {
	f, err := os.Open(s.archivePath(id))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, spans, err := archive.Locate(f, archive.Limits{})
	if err != nil {
		return nil, err
	}
	out, err := os.CreateTemp(s.cfg.Dir, id+".*.image")
	if err != nil {
		return nil, err
	}
	defer out.Close()
	p := m.Parts[i]
	if err := archive.ReadBody(io.NewSectionReader(f, spans[i].Offset, int64(spans[i].Size)), p, out, archive.Limits{}); err != nil {
		os.Remove(out.Name())
		return nil, err
	}
	return &template.Image{Path: out.Name(), Digest: p.Digest, Size: int64(p.LogicalSize)}, nil
}
