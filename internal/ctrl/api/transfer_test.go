package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/api"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// An archive goes up as a client stream and comes back as a server
// stream, over real Connect (gRPC over HTTP/2, as the CLI uses it).
func TestTransferServiceStreamsOverConnect(t *testing.T) {
	ctx := context.Background()
	f, err := os.Create(filepath.Join(t.TempDir(), "volume"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("kibotos!"), 256<<10), 8<<20); err != nil {
		t.Fatal(err)
	}
	var a bytes.Buffer
	if _, err := archive.Write(ctx, &a, archive.Manifest{Source: archive.Source{Kind: archive.SourceVolume, Spec: []byte(`{"spec":{"capacityBytes":"67108864"}}`)}},
		[]archive.Input{{Name: "volume", Kind: archive.KindBlock, File: f}}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(a.Bytes())

	srv := newServer(t, api.NewWorkspaceHandler(newBackend(t)))
	client := ctrlv1connect.NewTransferServiceClient(srv.Client(), srv.URL, connect.WithGRPC())
	up := client.ImportTransfer(ctx)
	if err := up.Send(&ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Header{Header: &ctrlv1.ImportTransferHeader{
		Command: &ctrlv1.CommandMetadata{CommandId: "imp"}, SizeBytes: uint64(a.Len()), Digest: "sha256:" + hex.EncodeToString(sum[:]),
	}}}); err != nil {
		t.Fatal(err)
	}
	for b := a.Bytes(); len(b) > 0; {
		n := min(len(b), 1<<20)
		if err := up.Send(&ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Data{Data: b[:n]}}); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	res, err := up.CloseAndReceive()
	if err != nil {
		t.Fatal(err)
	}
	tr := res.Msg.GetTransfer()
	if tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_IMPORTED || tr.GetManifest().GetVolumeCapacityBytes() != 64<<20 {
		t.Fatalf("imported %v", tr)
	}

	down, err := client.DownloadTransfer(ctx, connect.NewRequest(&ctrlv1.DownloadTransferRequest{TransferId: tr.GetTransferId(), Offset: 100}))
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for down.Receive() {
		got = append(got, down.Msg().GetData()...)
	}
	if err := down.Err(); err != nil || !bytes.Equal(got, a.Bytes()[100:]) {
		t.Fatalf("download from 100: %d bytes, %v; want %d", len(got), err, a.Len()-100)
	}
	if _, err := client.DeleteTransfer(ctx, connect.NewRequest(&ctrlv1.DeleteTransferRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "del"}, TransferId: tr.GetTransferId()})); err != nil {
		t.Fatal(err)
	}
	list, err := client.ListTransfers(ctx, connect.NewRequest(&ctrlv1.ListTransfersRequest{}))
	if err != nil || len(list.Msg.GetTransfers()) != 0 {
		t.Fatalf("ListTransfers after the delete: %v, %v", list, err)
	}
}
