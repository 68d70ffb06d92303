package api

import (
	"context"
	"io"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/transfer"
)

// transferHandler serves TransferService.
type transferHandler struct{ t *transfer.Service }

func (h transferHandler) GetTransfer(ctx context.Context, req *connect.Request[ctrlv1.GetTransferRequest]) (*connect.Response[ctrlv1.GetTransferResponse], error) {
	return respond(h.t.GetTransfer(ctx, req.Msg))
}

func (h transferHandler) ListTransfers(ctx context.Context, req *connect.Request[ctrlv1.ListTransfersRequest]) (*connect.Response[ctrlv1.ListTransfersResponse], error) {
	return respond(h.t.ListTransfers(ctx, req.Msg))
}

func (h transferHandler) DownloadTransfer(ctx context.Context, req *connect.Request[ctrlv1.DownloadTransferRequest], stream *connect.ServerStream[ctrlv1.DownloadTransferResponse]) error {
	return h.t.DownloadTransfer(ctx, req.Msg, stream.Send)
}

func (h transferHandler) ImportTransfer(ctx context.Context, stream *connect.ClientStream[ctrlv1.ImportTransferRequest]) (*connect.Response[ctrlv1.ImportTransferResponse], error) {
	return respond(h.t.ImportTransfer(ctx, func() (*ctrlv1.ImportTransferRequest, error) { return received(stream) }))
}

// received is a client stream's next message, io.EOF after the last.
func received[T any](stream *connect.ClientStream[T]) (*T, error) {
	if stream.Receive() {
		return stream.Msg(), nil
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return nil, io.EOF
}

func (h transferHandler) DeleteTransfer(ctx context.Context, req *connect.Request[ctrlv1.DeleteTransferRequest]) (*connect.Response[ctrlv1.DeleteTransferResponse], error) {
	return respond(h.t.DeleteTransfer(ctx, req.Msg))
}
