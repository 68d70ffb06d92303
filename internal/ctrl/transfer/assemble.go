package transfer

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/node/fsutil"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

const (
	stagedSuffix = ".parts"
	bodySuffix   = ".body"
)

// stagedDir holds the part bodies nodes sent for Transfer id's export.
func (s *Service) stagedDir(id string) string { return filepath.Join(s.cfg.Dir, id+stagedSuffix) }

func (s *Service) stagedPath(id, part string) string {
	return filepath.Join(s.stagedDir(id), part+bodySuffix)
}

// removeStaged drops what an export staged; what it cannot remove now the
// sweep removes later.
func (s *Service) removeStaged(id string) {
	_ = os.RemoveAll(s.stagedDir(id))
	_ = os.Remove(s.partialPath(id))
}

// PartRecv is the next message of an UploadTransferPart stream, io.EOF
// after the last.
type PartRecv func() (*nodev1.UploadTransferPartRequest, error)

// ReceivePart stages one part body that nodeID sends for an
// ExportBlockFile operation ctrl handed it and that is still pending. The
// body is written under a temporary name and renamed into place only once
// its length matches the header's; the answer is its length and digest as
// received.
func (s *Service) ReceivePart(ctx context.Context, nodeID string, recv PartRecv) (*nodev1.UploadTransferPartResponse, error) {
	first, err := recv()
	if err != nil {
		return nil, err
	}
	h := first.GetHeader()
	if h == nil {
		return nil, apierr.Invalid("header", "is required: the first message must be the header")
	}
	if err := s.checkPartHeader(ctx, nodeID, h); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(s.stagedDir(h.GetTransferId()), 0o700); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(s.stagedDir(h.GetTransferId()), h.GetPart()+".*.partial")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	sum := sha256.New()
	n, err := s.takePart(ctx, h, recv, io.MultiWriter(tmp, sum))
	if err != nil {
		return nil, err
	}
	if err := tmp.Sync(); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), s.stagedPath(h.GetTransferId(), h.GetPart())); err != nil {
		return nil, err
	}
	if err := fsutil.SyncDir(s.stagedDir(h.GetTransferId())); err != nil {
		return nil, err
	}
	return &nodev1.UploadTransferPartResponse{SizeBytes: n, Digest: digestOf(sum)}, nil
}

// checkPartHeader refuses a part no pending ExportBlockFile of nodeID asks
// for.
func (s *Service) checkPartHeader(ctx context.Context, nodeID string, h *nodev1.UploadTransferPartHeader) error {
	return s.store.Tx(ctx, func(tx *store.Tx) error {
		var body nodev1.ExportBlockFile
		if err := pendingOperation(tx, nodeID, h.GetOperationId(), &body, ctrlv1.TransferState_TRANSFER_STATE_EXPORTING); err != nil {
			return err
		}
		if body.GetTransferId() != h.GetTransferId() || body.GetPart() != h.GetPart() {
			return apierr.Invalid("header", "names transfer %s part %q; operation %q asks for transfer %s part %q",
				h.GetTransferId(), h.GetPart(), h.GetOperationId(), body.GetTransferId(), body.GetPart())
		}
		if h.GetSizeBytes() > s.cfg.MaxArchiveBytes {
			return apierr.Invalid("header.size_bytes", "is %d; at most %d bytes are accepted", h.GetSizeBytes(), s.cfg.MaxArchiveBytes)
		}
		return nil
	})
}

// transferPart is the body of an operation that moves a Transfer's part.
type transferPart interface {
	proto.Message
	GetTransferId() string
}

// pendingOperation decodes into body the operation opID, which ctrl must
// have handed nodeID, must not have been answered, and must be for a
// Transfer in state: a node calls beside its session only for what its
// session asked of it.
func pendingOperation(tx *store.Tx, nodeID, opID string, body transferPart, state ctrlv1.TransferState) error {
	op, err := tx.GetNodeOperation(opID, false)
	if errors.Is(err, store.ErrNotFound) {
		return apierr.Precondition(nil, "operation %q is not one ctrl handed out", opID)
	} else if err != nil {
		return err
	}
	if op.GetNodeId() != nodeID || op.GetBody().UnmarshalTo(body) != nil {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("operation %q is not a %s this node was asked for", opID, body.ProtoReflect().Descriptor().Name()))
	}
	if op.GetState() != storev1.NodeOperationState_NODE_OPERATION_STATE_PENDING {
		return apierr.Precondition(nil, "operation %q was answered already", opID)
	}
	r, err := getTransfer(tx, body.GetTransferId(), false)
	if err != nil {
		return err
	}
	if st := r.Transfer.GetState(); st != state {
		return apierr.Precondition(nil, "transfer %s is %s, not %s", body.GetTransferId(), stateName(st), stateName(state))
	}
	return nil
}

// takePart copies the body's chunks to w, exactly h.size_bytes of them,
// with the Transfer's progress moving.
func (s *Service) takePart(ctx context.Context, h *nodev1.UploadTransferPartHeader, recv PartRecv, w io.Writer) (uint64, error) {
	// An export's progress counts its parts twice, as they arrive and as
	// the archive is written (assemble): the bytes known so far, twice.
	base := s.stagedBytes(h.GetTransferId())
	m := s.newMeter(h.GetTransferId(), ctrlv1.TransferState_TRANSFER_STATE_EXPORTING, 2*(base+h.GetSizeBytes()))
	var n uint64
	for {
		msg, err := recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, err
		}
		data := msg.GetData()
		if msg.GetHeader() != nil || len(data) > MaxChunkBytes || uint64(len(data)) > h.GetSizeBytes()-n {
			return n, apierr.Invalid("data", "only data may follow the header, in chunks of at most %d bytes, %d bytes in all", MaxChunkBytes, h.GetSizeBytes())
		}
		if _, err := w.Write(data); err != nil {
			return n, err
		}
		n += uint64(len(data))
		if err := m.at(ctx, base+n); err != nil {
			return n, err
		}
	}
	if n != h.GetSizeBytes() {
		return n, apierr.Invalid("header.size_bytes", "declares %d bytes; %d arrived", h.GetSizeBytes(), n)
	}
	return n, nil
}

// stagedBytes is what the parts staged so far for id hold.
func (s *Service) stagedBytes(id string) uint64 {
	entries, _ := os.ReadDir(s.stagedDir(id))
	var n uint64
	for _, e := range entries {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), bodySuffix) {
			n += uint64(info.Size())
		}
	}
	return n
}

// meter stores a Transfer's progress as bytes go by, while it stays in
// state: every 1/256 of the total (at least 1 MiB), and at least every
// progressPeriod.
type meter struct {
	s       *Service
	id      string
	state   ctrlv1.TransferState
	total   uint64
	saved   uint64
	savedAt time.Time
}

func (s *Service) newMeter(id string, state ctrlv1.TransferState, total uint64) *meter {
	return &meter{s: s, id: id, state: state, total: total, savedAt: s.cfg.Now()}
}

func (m *meter) at(ctx context.Context, done uint64) error {
	now := m.s.cfg.Now()
	if done < m.total && done-m.saved < max(m.total/256, 1<<20) && now.Sub(m.savedAt) < progressPeriod {
		return nil
	}
	m.saved, m.savedAt = done, now
	_, err := m.s.update(ctx, m.id, func(r *store.TransferRecord, now time.Time) error {
		tr := r.Transfer
		if tr.GetState() != m.state {
			return apierr.Precondition(nil, "transfer %s is %s, not %s", m.id, stateName(tr.GetState()), stateName(m.state))
		}
		// Neither goes back: a step after a restart meters again from
		// where the files stand.
		tr.DoneBytes, tr.TotalBytes, tr.UpdatedAt = max(done, tr.GetDoneBytes()), max(m.total, tr.GetTotalBytes()), timestamppb.New(now)
		return nil
	})
	return err
}

// finishExport frames the archive from the staged parts and ends the
// command and the Transfer, COMPLETE, in one transaction.
func (s *Service) finishExport(ctx context.Context, w *command.Work, id string, src *source, parts []archive.Part) error {
	spec, err := specJSON(src.spec)
	if err != nil {
		return err
	}
	m := archive.Manifest{
		Source:   archive.Source{Kind: src.kind, ID: src.id, Spec: spec},
		Template: src.template, Platform: src.platform, Completeness: "complete",
		CreatedAt: w.Now().UTC().Truncate(time.Second),
	}
	var written *archive.Written
	ran, err := w.Heavy(ctx, "export assemblies", func() error {
		staged, closeAll, err := s.staged(id, src, parts)
		defer closeAll()
		if err == nil {
			written, err = s.assemble(ctx, id, m, staged)
		}
		return err
	})
	if !ran {
		return err
	}
	if errors.Is(err, archive.ErrSourceChanged) || errors.Is(err, os.ErrNotExist) || connect.CodeOf(err) == connect.CodeFailedPrecondition {
		// A staged part is not what its node sent, or the template image
		// went from the catalog: nothing to make an archive of, and asking
		// again would take a new command.
		return s.failExport(ctx, w, id, &ctrlv1.WorkspaceFailure{Reason: ctrlv1.FailureReason_FAILURE_REASON_INTERNAL, Retryable: true,
			Message: "a staged part of the archive is damaged: " + err.Error()})
	}
	if err != nil {
		return err
	}
	private, err := json.Marshal(written.Manifest)
	if err != nil {
		return err
	}
	err = w.Succeed(ctx, func(tx *store.Tx) error {
		r, err := getTransfer(tx, id, true)
		if err != nil {
			return err
		}
		tr := r.Transfer
		tr.State, tr.UpdatedAt = ctrlv1.TransferState_TRANSFER_STATE_COMPLETE, timestamppb.New(w.Now())
		tr.Manifest.SizeBytes, tr.Manifest.Digest, tr.Manifest.CreatedAt = written.Size, written.Digest, timestamppb.New(m.CreatedAt)
		tr.DoneBytes, tr.TotalBytes = written.Size, written.Size
		r.ArchiveManifest = private
		return tx.PutTransfer(r)
	})
	if err != nil {
		return err
	}
	_ = os.RemoveAll(s.stagedDir(id))
	return nil
}

// staged opens the bodies of an export's parts: the block files' staged
// bodies, then the template image from the catalog when it is carried.
func (s *Service) staged(id string, src *source, parts []archive.Part) ([]archive.Staged, func(), error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	open := func(path string, p archive.Part) (archive.Staged, error) {
		f, err := os.Open(path)
		if err != nil {
			return archive.Staged{}, err
		}
		files = append(files, f)
		return archive.Staged{Part: p, File: f}, nil
	}
	out := make([]archive.Staged, 0, len(parts)+1)
	for _, p := range parts {
		st, err := open(s.stagedPath(id, p.Name), p)
		if err != nil {
			return nil, closeAll, err
		}
		out = append(out, st)
	}
	if !src.withImage {
		return out, closeAll, nil
	}
	path, err := s.templateImage(src)
	if err != nil {
		return nil, closeAll, err
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, closeAll, err
	}
	size := uint64(info.Size())
	st, err := open(path, archive.Part{Name: PartTemplateImage, Kind: archive.KindBlob, Size: size, LogicalSize: size, Digest: src.template.Digest})
	return append(out, st), closeAll, err
}

// assemble writes the archive of m from the staged parts into its partial
// file, then renames it into place.
func (s *Service) assemble(ctx context.Context, id string, m archive.Manifest, staged []archive.Staged) (*archive.Written, error) {
	var total uint64
	for _, st := range staged {
		total += st.Part.Size
	}
	out, err := os.OpenFile(s.partialPath(id), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	// The parts arrived (takePart): the writing is the second half.
	cw := &countingWriter{w: out, m: s.newMeter(id, ctrlv1.TransferState_TRANSFER_STATE_EXPORTING, 2*total), ctx: ctx, base: total}
	written, err := archive.Assemble(ctx, cw, m, staged)
	if err == nil {
		err = out.Sync()
	}
	if err == nil {
		err = os.Rename(s.partialPath(id), s.archivePath(id))
	}
	if err == nil {
		err = fsutil.SyncDir(s.cfg.Dir)
	}
	if err != nil {
		_ = os.Remove(s.partialPath(id))
		return nil, err
	}
	return written, nil
}

// countingWriter moves a Transfer's progress as its archive is written.
type countingWriter struct {
	w    io.Writer
	m    *meter
	ctx  context.Context
	base uint64 // the progress before the first byte
	n    uint64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += uint64(n)
	if err == nil {
		err = c.m.at(c.ctx, min(c.base+c.n, c.m.total))
	}
	return n, err
}

// sweepStaged removes the staged parts of Transfers no longer EXPORTING
// (an export a crash ended between its outcome and its cleanup).
func (s *Service) sweepStaged(ctx context.Context) error {
	dirs, err := filepath.Glob(filepath.Join(s.cfg.Dir, "*"+stagedSuffix))
	if err != nil {
		return err
	}
	for _, d := range dirs {
		id := strings.TrimSuffix(filepath.Base(d), stagedSuffix)
		tr, err := s.read(ctx, id)
		if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
			return err
		}
		if tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_EXPORTING {
			if err := os.RemoveAll(d); err != nil {
				return err
			}
		}
	}
	return nil
}
