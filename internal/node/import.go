package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"connectrpc.com/connect"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// importBlockFile makes a block file from a Transfer's part (a restore):
// fetched from ctrl, verified, and renamed into place only then.
func (a *agent) importBlockFile(ctx context.Context, opID string, op *nodev1.ImportBlockFile) *nodev1.CommandResult {
	ref, res := a.blockFileRef(op.GetRef())
	if res != nil {
		return res
	}
	st, err := a.blocks.Import(ctx, ref, func(f *os.File) error { return a.fetchPart(ctx, opID, op.GetPart(), f) })
	var ce *connect.Error
	switch {
	case err == nil:
	case errors.As(err, &ce):
		return exportFailure(err)
	case isArchiveError(err):
		return failure("", connect.CodeDataLoss, fmt.Sprintf("part %s of transfer %s does not verify: %v", op.GetPart(), op.GetTransferId(), err))
	}
	return blockFileResult(st, err)
}

// fetchPart writes the body of the part operation opID asks for into f,
// verifying it.
func (a *agent) fetchPart(ctx context.Context, opID, name string, f *os.File) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := connect.NewRequest(&nodev1.FetchTransferPartRequest{OperationId: opID})
	a.authHeader(req.Header())
	stream, err := a.bulk.FetchTransferPart(ctx, req)
	if err != nil {
		return err
	}
	defer stream.Close()
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return err
		}
		return connect.NewError(connect.CodeUnavailable, errors.New("ctrl ended the part's stream before describing it"))
	}
	d := stream.Msg().GetPart()
	if d.GetName() != name || d.GetKind() != string(archive.KindBlock) {
		return fmt.Errorf("%w: ctrl serves part %q of kind %q, the operation asks for block part %q", archive.ErrManifest, d.GetName(), d.GetKind(), name)
	}
	part := archive.Part{Name: d.GetName(), Kind: archive.KindBlock, Size: d.GetSizeBytes(), LogicalSize: d.GetLogicalSizeBytes(),
		Extents: d.GetExtents(), Digest: d.GetDigest()}
	body := &partReader{next: stream.Receive, msg: stream.Msg, err: stream.Err, pending: stream.Msg().GetData()}
	if err := archive.ReadBody(body, part, f, archive.Limits{}); err != nil {
		if body.streamErr != nil {
			return body.streamErr // what the stream did, not how the reader saw it
		}
		return err
	}
	return nil
}

// partReader reads a FetchTransferPart stream's data as one byte stream.
type partReader struct {
	next      func() bool
	msg       func() *nodev1.FetchTransferPartResponse
	err       func() error
	pending   []byte
	streamErr error
}

func (r *partReader) Read(p []byte) (int, error) {
	for len(r.pending) == 0 {
		if !r.next() {
			if r.streamErr = r.err(); r.streamErr != nil {
				return 0, r.streamErr
			}
			return 0, io.EOF
		}
		r.pending = r.msg().GetData()
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// isArchiveError says whether err is a refusal of the archive format.
func isArchiveError(err error) bool {
	for _, e := range []error{archive.ErrManifest, archive.ErrLimit, archive.ErrTruncated, archive.ErrPartSize, archive.ErrExtent, archive.ErrDigest} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
