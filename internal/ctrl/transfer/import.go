package transfer

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/labels"
	"github.com/kibotos/kibotos/internal/node/fsutil"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// Recv is the next message of an ImportTransfer stream, io.EOF after the
// last.
type Recv func() (*ctrlv1.ImportTransferRequest, error)

// ImportTransfer admits the upload its header opens, as a Transfer
// IMPORTING, then receives the archive into the artifact store while the
// archive reader verifies it. IMPORTED once the archive, its size and its
// digest all check out; otherwise FAILED at FAILURE_STAGE_IMPORTING_TRANSFER
// with nothing of its bytes kept, and the call answers the error. A replay
// of the same command answers the Transfer as it is now, without reading
// the stream again.
func (s *Service) ImportTransfer(ctx context.Context, recv Recv) (*ctrlv1.ImportTransferResponse, error) {
	first, err := recv()
	if errors.Is(err, io.EOF) {
		return nil, apierr.Invalid("header", "is required: the stream ended before its first message")
	}
	if err != nil {
		return nil, err
	}
	h := first.GetHeader()
	if h == nil {
		return nil, apierr.Invalid("header", "is required: the first message must be the header, not data")
	}
	if err := s.checkHeader(h); err != nil {
		return nil, err
	}
	res, fresh, err := admit(ctx, s, "header.command.command_id", h.GetCommand(), kindImportTransfer, h,
		func(tx *store.Tx, now time.Time) (string, *ctrlv1.ImportTransferResponse, error) {
			tr := s.newImport(h, now)
			if err := tx.PutTransfer(&store.TransferRecord{Transfer: tr}); err != nil {
				return "", nil, err
			}
			return tr.GetTransferId(), &ctrlv1.ImportTransferResponse{Transfer: tr}, nil
		}, false)
	if err != nil {
		return nil, err
	}
	id := res.GetTransfer().GetTransferId()
	if !fresh {
		tr, err := s.read(ctx, id)
		return &ctrlv1.ImportTransferResponse{Transfer: tr}, err
	}
	tr, err := s.receive(ctx, id, h, recv)
	if err != nil {
		return nil, err
	}
	return &ctrlv1.ImportTransferResponse{Transfer: tr}, nil
}

func (s *Service) checkHeader(h *ctrlv1.ImportTransferHeader) error {
	if h.GetSizeBytes() == 0 {
		return apierr.Invalid("header.size_bytes", "is required: the archive's length in bytes")
	}
	if h.GetSizeBytes() > s.cfg.MaxArchiveBytes {
		return apierr.Invalid("header.size_bytes", "is %d; at most %d bytes are accepted", h.GetSizeBytes(), s.cfg.MaxArchiveBytes)
	}
	if !validDigest(h.GetDigest()) {
		return apierr.Invalid("header.digest", "must be sha256:<64 lower-case hex digits>, the sha256 of the whole archive")
	}
	return labels.ValidateLabels("header.labels", h.GetLabels())
}

func validDigest(d string) bool {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	for _, c := range hexPart {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// newImport is the Transfer an admitted import starts as.
func (s *Service) newImport(h *ctrlv1.ImportTransferHeader, now time.Time) *ctrlv1.Transfer {
	ts := timestamppb.New(now)
	tr := &ctrlv1.Transfer{
		TransferId: newID(), State: ctrlv1.TransferState_TRANSFER_STATE_IMPORTING,
		CreatedAt: ts, UpdatedAt: ts, TotalBytes: h.GetSizeBytes(), Labels: h.GetLabels(),
	}
	if s.cfg.Retention > 0 {
		tr.ExpiresAt = timestamppb.New(now.Add(s.cfg.Retention))
	}
	return tr
}

// importFailure is why an upload failed: its Connect error and how the
// Transfer records it.
type importFailure struct {
	code      connect.Code
	reason    ctrlv1.FailureReason
	retryable bool
	field     string
	msg       string
}

func (f *importFailure) Error() string { return f.msg }

func refused(field, format string, args ...any) *importFailure {
	return &importFailure{code: connect.CodeInvalidArgument, reason: ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST,
		field: field, msg: fmt.Sprintf(format, args...)}
}

// receive takes the archive of Transfer id into its partial file and, once
// verified, into place.
func (s *Service) receive(ctx context.Context, id string, h *ctrlv1.ImportTransferHeader, recv Recv) (*ctrlv1.Transfer, error) {
	s.mu.Lock()
	s.active[id] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.active, id)
		s.mu.Unlock()
	}()
	tr, err := s.take(ctx, id, h, recv)
	if err == nil {
		return tr, nil
	}
	_ = os.Remove(s.partialPath(id))
	f := asFailure(ctx, err)
	failed, ferr := s.fail(context.WithoutCancel(ctx), id, f)
	if ferr != nil {
		return nil, errors.Join(f, ferr)
	}
	return nil, apierr.New(f.code, &ctrlv1.ErrorDetail{
		Stage: ctrlv1.FailureStage_FAILURE_STAGE_IMPORTING_TRANSFER, Reason: f.reason, Retryable: f.retryable,
		Field: f.field, CommandId: h.GetCommand().GetCommandId(),
	}, "import of transfer %s failed (%s): %s", id, stateName(failed.GetState()), f.msg)
}

// asFailure classifies an upload's error.
func asFailure(ctx context.Context, err error) *importFailure {
	var f *importFailure
	switch {
	case errors.As(err, &f):
		return f
	case ctx.Err() != nil:
		return &importFailure{code: connect.CodeCanceled, reason: ctrlv1.FailureReason_FAILURE_REASON_CANCELLED, retryable: true,
			msg: "the upload was cancelled before the archive was complete"}
	case isArchiveError(err):
		f := refused("data", "the archive is refused: %v", err)
		// A stream cut short may be sent again whole; a corrupt one not.
		f.retryable = errors.Is(err, archive.ErrTruncated)
		return f
	default:
		return &importFailure{code: connect.CodeInternal, reason: ctrlv1.FailureReason_FAILURE_REASON_INTERNAL, retryable: true,
			msg: err.Error()}
	}
}

func isArchiveError(err error) bool {
	for _, e := range []error{archive.ErrNotArchive, archive.ErrVersion, archive.ErrTruncated, archive.ErrManifest, archive.ErrLimit,
		archive.ErrFraming, archive.ErrPartMissing, archive.ErrPartExtra, archive.ErrPartSize, archive.ErrExtent,
		archive.ErrDigest, archive.ErrTrailingData} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// take receives and verifies the archive, then moves it into place and
// records the Transfer IMPORTED.
func (s *Service) take(ctx context.Context, id string, h *ctrlv1.ImportTransferHeader, recv Recv) (*ctrlv1.Transfer, error) {
	file, err := os.OpenFile(s.partialPath(id), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	up := &upload{s: s, ctx: ctx, id: id, recv: recv, file: file, sum: sha256.New(), limit: h.GetSizeBytes()}
	m, err := archive.Verify(up, archive.Limits{})
	if err != nil {
		if up.err != nil {
			return nil, up.err // what the stream did, not how the reader saw it
		}
		if errors.Is(err, archive.ErrTruncated) && up.n < up.limit {
			f := refused("data", "the upload ended after %d of the %d bytes header.size_bytes declares: %v", up.n, up.limit, err)
			f.retryable = true // the stream was cut short; the archive may be sent again whole
			return nil, f
		}
		return nil, err
	}
	if up.n != h.GetSizeBytes() {
		return nil, refused("header.size_bytes", "declares %d bytes; the archive has %d", h.GetSizeBytes(), up.n)
	}
	digest := digestOf(up.sum)
	if digest != h.GetDigest() {
		return nil, refused("header.digest", "declares %s; the archive's sha256 is %s", h.GetDigest(), digest)
	}
	manifest, private, err := project(m, up.n, digest)
	if err != nil {
		return nil, err
	}
	if err := file.Sync(); err != nil {
		return nil, err
	}
	if err := os.Rename(s.partialPath(id), s.archivePath(id)); err != nil {
		return nil, err
	}
	if err := fsutil.SyncDir(s.cfg.Dir); err != nil {
		return nil, err
	}
	return s.update(context.WithoutCancel(ctx), id, func(r *store.TransferRecord, now time.Time) error {
		if err := stillImporting(r.Transfer); err != nil {
			_ = os.Remove(s.archivePath(id))
			return err
		}
		tr := r.Transfer
		tr.State, tr.Manifest, tr.DoneBytes, tr.UpdatedAt = ctrlv1.TransferState_TRANSFER_STATE_IMPORTED, manifest, up.n, timestamppb.New(now)
		r.ArchiveManifest = private
		return nil
	})
}

// stillImporting refuses to go on with an upload the sweep failed.
func stillImporting(tr *ctrlv1.Transfer) error {
	if tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_IMPORTING {
		return &importFailure{code: connect.CodeAborted, reason: ctrlv1.FailureReason_FAILURE_REASON_TIMED_OUT, retryable: true,
			msg: fmt.Sprintf("the Transfer is %s: its upload was given up", stateName(tr.GetState()))}
	}
	return nil
}

// fail records an upload's failure, unless something else ended the
// Transfer first; it returns the Transfer as stored.
func (s *Service) fail(ctx context.Context, id string, f *importFailure) (*ctrlv1.Transfer, error) {
	var out *ctrlv1.Transfer
	_, err := s.update(ctx, id, func(r *store.TransferRecord, now time.Time) error {
		out = r.Transfer
		if r.Transfer.GetState() != ctrlv1.TransferState_TRANSFER_STATE_IMPORTING {
			return errUnchanged
		}
		tr := r.Transfer
		tr.State, tr.UpdatedAt = ctrlv1.TransferState_TRANSFER_STATE_FAILED, timestamppb.New(now)
		tr.Failure = &ctrlv1.TransferFailure{
			Stage: ctrlv1.FailureStage_FAILURE_STAGE_IMPORTING_TRANSFER, Reason: f.reason, Retryable: f.retryable,
			Message: f.msg, FailedAt: timestamppb.New(now),
		}
		return nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return out, err
}

// errUnchanged makes update write nothing.
var errUnchanged = errors.New("unchanged")

func digestOf(h hash.Hash) string { return fmt.Sprintf("sha256:%x", h.Sum(nil)) }

// upload is the archive as the stream brings it: each chunk is written to
// the partial file and hashed before the reader sees it, and the progress
// is stored as it goes.
type upload struct {
	s     *Service
	ctx   context.Context
	id    string
	recv  Recv
	file  *os.File
	sum   hash.Hash
	limit uint64

	n       uint64
	pending []byte
	saved   uint64
	savedAt time.Time
	// err is the stream's own failure, kept so it is answered as itself
	// and not as the truncation the reader sees.
	err error
}

// progressEvery is how often done_bytes is stored: every 1/256 of the
// archive (at least 1 MiB), and at least every progressPeriod while bytes
// arrive so that a slow upload does not look stalled.
const progressPeriod = 30 * time.Second

func (u *upload) Read(p []byte) (int, error) {
	if len(u.pending) == 0 {
		if err := u.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, u.pending)
	u.pending = u.pending[n:]
	return n, nil
}

// next takes the next chunk.
func (u *upload) next() error {
	for len(u.pending) == 0 {
		msg, err := u.recv()
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		if err != nil {
			return u.failed(err)
		}
		if msg.GetHeader() != nil {
			return u.failed(refused("header", "only the first message may be the header"))
		}
		data := msg.GetData()
		if len(data) > MaxChunkBytes {
			return u.failed(refused("data", "a chunk of %d bytes; at most %d are accepted", len(data), MaxChunkBytes))
		}
		if uint64(len(data)) > u.limit-u.n {
			return u.failed(refused("header.size_bytes", "declares %d bytes; the upload sends more", u.limit))
		}
		if _, err := u.file.Write(data); err != nil {
			return u.failed(err)
		}
		u.sum.Write(data)
		u.n += uint64(len(data))
		u.pending = data
		if err := u.progress(); err != nil {
			return u.failed(err)
		}
	}
	return nil
}

func (u *upload) failed(err error) error {
	u.err = err
	return err
}

// progress stores done_bytes when enough arrived since it last did.
func (u *upload) progress() error {
	now := u.s.cfg.Now()
	step := max(u.limit/256, 1<<20)
	if u.n-u.saved < step && now.Sub(u.savedAt) < progressPeriod {
		return nil
	}
	u.saved, u.savedAt = u.n, now
	_, err := u.s.update(u.ctx, u.id, func(r *store.TransferRecord, now time.Time) error {
		if err := stillImporting(r.Transfer); err != nil {
			return err
		}
		r.Transfer.DoneBytes, r.Transfer.UpdatedAt = u.n, timestamppb.New(now)
		return nil
	})
	return err
}
