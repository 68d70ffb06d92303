package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/anypb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// uploadChunk is how many bytes of a part one UploadTransferPart message
// carries: well under ctrl's message limit.
const uploadChunk = 1 << 20

// exportBlockFile streams a block file's part body to ctrl (an export) and
// answers what ctrl received, once ctrl's length and digest match the
// node's own.
func (a *agent) exportBlockFile(ctx context.Context, opID string, op *nodev1.ExportBlockFile) *nodev1.CommandResult {
	ref, res := a.blockFileRef(op.GetRef())
	if res != nil {
		return res
	}
	var out *nodev1.BlockFileExported
	err := a.blocks.Read(ref, func(f *os.File) error {
		body, err := archive.NewBody(archive.Input{Name: op.GetPart(), Kind: archive.KindBlock, File: f})
		if err != nil {
			return err
		}
		out, err = a.uploadPart(ctx, opID, op, body)
		return err
	})
	if err != nil {
		return exportFailure(err)
	}
	result, err := anypb.New(out)
	if err != nil {
		return failure("", connect.CodeInternal, err.Error())
	}
	return &nodev1.CommandResult{Result: result}
}

// uploadPart streams body to ctrl under operation opID.
func (a *agent) uploadPart(ctx context.Context, opID string, op *nodev1.ExportBlockFile, body *archive.Body) (*nodev1.BlockFileExported, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := a.bulk.UploadTransferPart(ctx)
	a.authHeader(stream.RequestHeader())
	header := &nodev1.UploadTransferPartHeader{OperationId: opID, TransferId: op.GetTransferId(), Part: op.GetPart(), SizeBytes: body.Part.Size}
	w := &partWriter{send: stream.Send}
	err := stream.Send(&nodev1.UploadTransferPartRequest{Message: &nodev1.UploadTransferPartRequest_Header{Header: header}})
	var digest string
	if err == nil {
		digest, err = body.Stream(ctx, w)
	}
	if err == nil {
		err = w.flush()
	}
	resp, cerr := stream.CloseAndReceive()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if cerr != nil {
		return nil, cerr
	}
	got := resp.Msg
	if got.GetSizeBytes() != body.Part.Size || got.GetDigest() != digest {
		return nil, connect.NewError(connect.CodeDataLoss, fmt.Errorf("ctrl received %d bytes with digest %s; the node sent %d with %s",
			got.GetSizeBytes(), got.GetDigest(), body.Part.Size, digest))
	}
	return &nodev1.BlockFileExported{SizeBytes: body.Part.Size, LogicalSizeBytes: body.Part.LogicalSize, Extents: body.Part.Extents, Digest: digest}, nil
}

// exportFailure is the result of a failed export: a block file error as
// the other block file operations answer it, a Connect error with its
// code (ctrl refused or went away: unavailable, retried when ctrl sends
// the operation again).
func exportFailure(err error) *nodev1.CommandResult {
	var ce *connect.Error
	if errors.As(err, &ce) {
		code := ce.Code()
		if code == connect.CodeUnknown || code == connect.CodeCanceled || code == connect.CodeDeadlineExceeded {
			code = connect.CodeUnavailable
		}
		return failure("", code, "upload to ctrl: "+ce.Message())
	}
	return failure("", errorCode(err), err.Error())
}

// partWriter cuts a body into UploadTransferPart messages.
type partWriter struct {
	send func(*nodev1.UploadTransferPartRequest) error
	buf  []byte
}

func (w *partWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(uploadChunk-len(w.buf), len(p))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == uploadChunk {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *partWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.send(&nodev1.UploadTransferPartRequest{Message: &nodev1.UploadTransferPartRequest_Data{Data: w.buf}})
	w.buf = w.buf[:0]
	return err
}
