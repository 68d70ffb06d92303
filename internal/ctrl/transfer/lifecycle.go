package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store"
)

// downloadable says whether a Transfer's archive is complete and kept: it
// downloads and restores.
func downloadable(st ctrlv1.TransferState) bool {
	switch st {
	case ctrlv1.TransferState_TRANSFER_STATE_COMPLETE, ctrlv1.TransferState_TRANSFER_STATE_IMPORTED, ctrlv1.TransferState_TRANSFER_STATE_RESTORED:
		return true
	}
	return false
}

// DownloadTransfer streams a COMPLETE, IMPORTED or RESTORED Transfer's archive from
// req.offset to its end, each chunk with its offset, so that a download cut
// short resumes where it stopped.
func (s *Service) DownloadTransfer(ctx context.Context, req *ctrlv1.DownloadTransferRequest, send func(*ctrlv1.DownloadTransferResponse) error) error {
	tr, err := s.read(ctx, req.GetTransferId())
	if err != nil {
		return err
	}
	if !downloadable(tr.GetState()) {
		return apierr.Precondition(nil, "transfer %s is %s: only a COMPLETE, IMPORTED or RESTORED Transfer can be downloaded",
			tr.GetTransferId(), stateName(tr.GetState()))
	}
	size := tr.GetManifest().GetSizeBytes()
	if req.GetOffset() > size {
		return apierr.Invalid("offset", "is %d, past the end of the %d-byte archive", req.GetOffset(), size)
	}
	// An open file reads on even if a delete removes it meanwhile.
	f, err := os.Open(s.archivePath(tr.GetTransferId()))
	if err != nil {
		return fmt.Errorf("open the archive of transfer %s: %w", tr.GetTransferId(), err)
	}
	defer f.Close()
	buf := make([]byte, downloadChunk)
	for off := req.GetOffset(); off < size; {
		n, err := f.ReadAt(buf[:min(uint64(len(buf)), size-off)], int64(off))
		if err != nil && !(errors.Is(err, io.EOF) && n > 0) {
			return fmt.Errorf("read the archive of transfer %s at %d: %w", tr.GetTransferId(), off, err)
		}
		if err := send(&ctrlv1.DownloadTransferResponse{Offset: off, Data: buf[:n]}); err != nil {
			return err
		}
		off += uint64(n)
	}
	return nil
}

// busy says whether a Transfer is in the middle of an export, upload or
// restore, which a delete or an expiration waits for.
func busy(st ctrlv1.TransferState) bool {
	switch st {
	case ctrlv1.TransferState_TRANSFER_STATE_EXPORTING, ctrlv1.TransferState_TRANSFER_STATE_IMPORTING, ctrlv1.TransferState_TRANSFER_STATE_RESTORING:
		return true
	}
	return false
}

func gone(st ctrlv1.TransferState) bool {
	return st == ctrlv1.TransferState_TRANSFER_STATE_DELETED || st == ctrlv1.TransferState_TRANSFER_STATE_EXPIRED
}

// DeleteTransfer deletes a Transfer: DELETING at admission, then its
// archive is removed and it is DELETED. Deleting a DELETED or EXPIRED one
// answers it as it is; one being exported, uploaded or restored is refused
// until that ends. A replay answers the Transfer as it is now.
func (s *Service) DeleteTransfer(ctx context.Context, req *ctrlv1.DeleteTransferRequest) (*ctrlv1.DeleteTransferResponse, error) {
	if req.GetTransferId() == "" {
		return nil, apierr.Invalid("transfer_id", "is required")
	}
	res, _, err := admit(ctx, s, "command.command_id", req.GetCommand(), kindDeleteTransfer, req,
		func(tx *store.Tx, now time.Time) (string, *ctrlv1.DeleteTransferResponse, error) {
			r, err := getTransfer(tx, req.GetTransferId(), true)
			if err != nil {
				return "", nil, err
			}
			tr := r.Transfer
			if busy(tr.GetState()) {
				return "", nil, apierr.Precondition(&ctrlv1.ErrorDetail{Stage: ctrlv1.FailureStage_FAILURE_STAGE_DELETING_TRANSFER, Retryable: true},
					"transfer %s is %s: delete it once that ends", tr.GetTransferId(), stateName(tr.GetState()))
			}
			if !gone(tr.GetState()) {
				tr.State, tr.UpdatedAt = ctrlv1.TransferState_TRANSFER_STATE_DELETING, timestamppb.New(now)
				if err := tx.PutTransfer(r); err != nil {
					return "", nil, err
				}
			}
			return tr.GetTransferId(), &ctrlv1.DeleteTransferResponse{Transfer: tr}, nil
		}, false)
	if err != nil {
		return nil, err
	}
	tr, err := s.finishDelete(ctx, res.GetTransfer().GetTransferId())
	if err != nil {
		return nil, err
	}
	return &ctrlv1.DeleteTransferResponse{Transfer: tr}, nil
}

// finishDelete sweeps a DELETING Transfer's archive and makes it DELETED;
// any other Transfer is answered as it is.
func (s *Service) finishDelete(ctx context.Context, id string) (*ctrlv1.Transfer, error) {
	tr, err := s.read(ctx, id)
	if err != nil || tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_DELETING {
		return tr, err
	}
	if err := s.removeArchive(id); err != nil {
		return nil, err
	}
	return s.end(ctx, id, ctrlv1.TransferState_TRANSFER_STATE_DELETING, ctrlv1.TransferState_TRANSFER_STATE_DELETED)
}

// end moves Transfer id from state from to state to, dropping its private
// manifest; a Transfer no longer in from is answered as it is.
func (s *Service) end(ctx context.Context, id string, from, to ctrlv1.TransferState) (*ctrlv1.Transfer, error) {
	var out *ctrlv1.Transfer
	_, err := s.update(ctx, id, func(r *store.TransferRecord, now time.Time) error {
		out = r.Transfer
		if r.Transfer.GetState() != from {
			return errUnchanged
		}
		r.Transfer.State, r.Transfer.UpdatedAt = to, timestamppb.New(now)
		r.ArchiveManifest = nil
		return nil
	})
	if errors.Is(err, errUnchanged) {
		err = nil
	}
	return out, err
}

func (s *Service) removeArchive(id string) error {
	for _, p := range []string{s.archivePath(id), s.partialPath(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove the archive of transfer %s: %w", id, err)
		}
	}
	return nil
}

// Run sweeps until ctx ends, every interval.
func (s *Service) Run(ctx context.Context, interval time.Duration, log *slog.Logger) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	log = log.With("sweep", "transfers")
	for {
		if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			log.Warn("sweep failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// sweepBatch bounds the Transfers one pass of each kind handles.
const sweepBatch = 100

// Sweep does what is due: Transfers past their deadline are EXPIRED (their
// archive removed), unless busy, in which case they expire once that ends;
// deletes a crash interrupted are finished; uploads that sent nothing for
// StallTimeout and that this process is not receiving are FAILED.
func (s *Service) Sweep(ctx context.Context) error {
	now := s.cfg.Now()
	var due, deleting, importing []*ctrlv1.Transfer
	if err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		if due, err = tx.ExpiredTransfers(now.UnixNano(), sweepBatch); err != nil {
			return err
		}
		if deleting, err = tx.TransfersInState(ctrlv1.TransferState_TRANSFER_STATE_DELETING, sweepBatch); err != nil {
			return err
		}
		importing, err = tx.TransfersInState(ctrlv1.TransferState_TRANSFER_STATE_IMPORTING, sweepBatch)
		return err
	}); err != nil {
		return err
	}
	var errs []error
	for _, tr := range due {
		errs = append(errs, s.expire(ctx, tr))
	}
	for _, tr := range deleting {
		_, err := s.finishDelete(ctx, tr.GetTransferId())
		errs = append(errs, err)
	}
	for _, tr := range importing {
		errs = append(errs, s.failStalled(ctx, tr, now))
	}
	errs = append(errs, s.sweepStaged(ctx))
	return errors.Join(errs...)
}

// expire makes a Transfer past its deadline EXPIRED, then removes its
// archive (a crash in between leaves a file no Transfer names, which
// nothing serves; see docs/TRANSFER-FORMAT.md).
func (s *Service) expire(ctx context.Context, tr *ctrlv1.Transfer) error {
	st := tr.GetState()
	if busy(st) || st == ctrlv1.TransferState_TRANSFER_STATE_DELETING {
		return nil
	}
	out, err := s.end(ctx, tr.GetTransferId(), st, ctrlv1.TransferState_TRANSFER_STATE_EXPIRED)
	if err != nil {
		return err
	}
	if out.GetState() != ctrlv1.TransferState_TRANSFER_STATE_EXPIRED {
		return nil // it changed meanwhile; the next pass looks again
	}
	return s.removeArchive(tr.GetTransferId())
}

// failStalled fails an upload that stopped sending.
// orphanGrace is how long an IMPORTING Transfer with no partial file is
// given before the sweep takes it for one whose ctrl restarted: the time
// between an import's admission and its first write.
const orphanGrace = 10 * time.Second

// receiving says whether an upload's partial file exists.
func (s *Service) receiving(id string) bool {
	_, err := os.Stat(s.partialPath(id))
	return err == nil
}

func (s *Service) failStalled(ctx context.Context, tr *ctrlv1.Transfer, now time.Time) error {
	s.mu.Lock()
	active := s.active[tr.GetTransferId()]
	s.mu.Unlock()
	idle := now.Sub(tr.GetUpdatedAt().AsTime())
	f := &importFailure{reason: ctrlv1.FailureReason_FAILURE_REASON_TIMED_OUT, retryable: true,
		msg: fmt.Sprintf("the upload sent nothing for %s (its client or the ctrl receiving it went away)", s.cfg.StallTimeout)}
	switch {
	case active:
		return nil
	case idle < s.cfg.StallTimeout && (idle < orphanGrace || s.receiving(tr.GetTransferId())):
		return nil
	case idle < s.cfg.StallTimeout:
		// No partial file: the ctrl that received it restarted (its
		// partial files go at start), so nothing will ever finish it.
		f.reason, f.msg = ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, "the ctrl receiving the upload restarted before it was complete; nothing of it is kept: upload it again"
	}
	_, err := s.fail(ctx, tr.GetTransferId(), f)
	if err != nil {
		return err
	}
	return s.removeArchive(tr.GetTransferId())
}
