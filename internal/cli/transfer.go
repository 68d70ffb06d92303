package cli

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

func transferClient() (ctrlv1connect.TransferServiceClient, error) {
	return onWorkspace(ctrlv1connect.NewTransferServiceClient)
}

// transferUploadClient carries ImportTransfer over HTTP/2: a replay is
// answered before the archive is sent (see uploadHTTP).
func transferUploadClient() (ctrlv1connect.TransferServiceClient, error) {
	c, err := loadClients()
	if err != nil {
		return nil, err
	}
	_, url, opt, err := c.workspace()
	if err != nil {
		return nil, err
	}
	return ctrlv1connect.NewTransferServiceClient(uploadHTTP, url, opt), nil
}

// SOURCE is the exported Workspace or Volume; "-" for an import, whose
// source is unknown here.
var transferHeader = []string{"TRANSFER", "STATE", "SOURCE", "SIZE", "PROGRESS", "EXPIRES"}

func transferRow(t *ctrlv1.Transfer) []string {
	size, progress, expires := "-", "-", "-"
	if n := t.GetManifest().GetSizeBytes(); n > 0 {
		size = showSize(n)
	}
	if total := t.GetTotalBytes(); total > 0 {
		progress = fmt.Sprintf("%d%%", t.GetDoneBytes()*100/total)
	}
	if e := t.GetExpiresAt(); e != nil {
		expires = e.AsTime().UTC().Format(time.RFC3339)
	}
	state := trimEnum(t.GetState().String(), "TRANSFER_STATE_")
	if f := t.GetFailure(); f != nil {
		state += ": " + f.GetMessage()
	}
	source := cmp.Or(t.GetManifest().GetSourceWorkspaceId(), t.GetManifest().GetSourceVolumeId(), "-")
	return []string{t.GetTransferId(), state, source, size, progress, expires}
}

// showTransfer prints a response that carries one Transfer.
func showTransfer[T any, PT interface {
	*T
	proto.Message
	GetTransfer() *ctrlv1.Transfer
}](cmd *cobra.Command, out *outputFlag, res *connect.Response[T], err error) error {
	if err != nil {
		return err
	}
	var msg PT = res.Msg
	return out.print(cmd.OutOrStdout(), msg, transferHeader, [][]string{transferRow(msg.GetTransfer())})
}

func newTransferCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{Use: "transfer", Short: "List, download, upload (import) and delete Transfers: archives of Workspaces and Volumes"}
	list := &cobra.Command{
		Use: "list", Short: "List Transfers (not DELETED or EXPIRED ones)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			selector, _ := cmd.Flags().GetString("selector")
			client, err := transferClient()
			if err != nil {
				return err
			}
			all, err := everyPage((*ctrlv1.ListTransfersResponse).GetTransfers, func(token string) (*connect.Response[ctrlv1.ListTransfersResponse], error) {
				return client.ListTransfers(cmd.Context(), connect.NewRequest(&ctrlv1.ListTransfersRequest{LabelSelector: selector, PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &ctrlv1.ListTransfersResponse{Transfers: all}, transferHeader, rowsOf(all, transferRow))
		},
	}
	list.Flags().StringP("selector", "l", "", "label selector")
	get := &cobra.Command{
		Use: "get TRANSFER_ID", Short: "Show one Transfer", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := transferClient()
			if err != nil {
				return err
			}
			res, err := client.GetTransfer(cmd.Context(), connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: args[0]}))
			return showTransfer(cmd, out, res, err)
		},
	}
	c.AddCommand(list, get, newTransferImportCommand(out), newTransferDownloadCommand(), newTransferDeleteCommand(out))
	return c
}

func newTransferImportCommand(out *outputFlag) *cobra.Command {
	var commandID string
	var labels map[string]string
	imp := &cobra.Command{
		Use: "import FILE", Short: "Upload an archive as a new Transfer (IMPORTED once ctrl verified it)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			digest, size, err := fileDigest(args[0])
			if err != nil {
				return err
			}
			client, err := transferUploadClient()
			if err != nil {
				return err
			}
			stream := client.ImportTransfer(cmd.Context())
			if err := stream.Send(&ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Header{Header: &ctrlv1.ImportTransferHeader{
				Command: newCommandMetadata(commandID), SizeBytes: size, Digest: digest, Labels: labels,
			}}}); err == nil {
				if err := sendFile(args[0], size, progressPrinter(cmd.ErrOrStderr(), "import"), func(chunk []byte) error {
					return stream.Send(&ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Data{Data: chunk}})
				}); err != nil {
					return err
				}
			}
			res, err := stream.CloseAndReceive()
			return showTransfer(cmd, out, res, err)
		},
	}
	imp.Flags().StringToStringVar(&labels, "label", nil, "label KEY=VALUE (repeatable)")
	imp.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id answers the same Transfer)")
	return imp
}

func newTransferDownloadCommand() *cobra.Command {
	var file string
	down := &cobra.Command{
		Use:   "download TRANSFER_ID --file FILE",
		Short: "Download a COMPLETE or IMPORTED Transfer's archive; a partial FILE is continued where it stopped",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := transferClient()
			if err != nil {
				return err
			}
			got, err := client.GetTransfer(cmd.Context(), connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: args[0]}))
			if err != nil {
				return err
			}
			return download(cmd, client, got.Msg.GetTransfer(), file)
		},
	}
	down.Flags().StringVarP(&file, "file", "f", "", "where to write the archive (required; continued if it holds a partial download)")
	_ = down.MarkFlagRequired("file")
	return down
}

// download writes t's archive to path, from the end of what path holds,
// and checks the whole file against the Transfer's digest.
func download(cmd *cobra.Command, client ctrlv1connect.TransferServiceClient, t *ctrlv1.Transfer, path string) error {
	size := t.GetManifest().GetSizeBytes()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	offset := uint64(fi.Size())
	if offset > size {
		return fmt.Errorf("%s holds %d bytes, more than the %d-byte archive of %s: it is another file", path, offset, size, t.GetTransferId())
	}
	p := progressPrinter(cmd.ErrOrStderr(), "download")
	if offset < size {
		stream, err := client.DownloadTransfer(cmd.Context(), connect.NewRequest(&ctrlv1.DownloadTransferRequest{TransferId: t.GetTransferId(), Offset: offset}))
		if err != nil {
			return err
		}
		for stream.Receive() {
			m := stream.Msg()
			if m.GetOffset() != offset {
				return fmt.Errorf("the download skipped from %d to %d", offset, m.GetOffset())
			}
			if _, err := f.WriteAt(m.GetData(), int64(offset)); err != nil {
				return err
			}
			offset += uint64(len(m.GetData()))
			p("receive", int64(offset), int64(size))
		}
		if err := stream.Err(); err != nil {
			return fmt.Errorf("download stopped at %d of %d bytes (run it again to continue): %w", offset, size, err)
		}
	}
	return checkDownload(f, path, t.GetManifest().GetDigest(), cmd.ErrOrStderr())
}

func checkDownload(f *os.File, path, want string, w io.Writer) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s does not match the Transfer's digest %s (got %s): remove it and download again", path, want, got)
	}
	if err := f.Sync(); err != nil && !errors.Is(err, fs.ErrInvalid) {
		return err
	}
	fmt.Fprintf(w, "downloaded %s (%s)\n", path, want)
	return nil
}

func newTransferDeleteCommand(out *outputFlag) *cobra.Command {
	var commandID string
	del := &cobra.Command{
		Use: "delete TRANSFER_ID", Short: "Delete a Transfer and its archive", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := transferClient()
			if err != nil {
				return err
			}
			res, err := client.DeleteTransfer(cmd.Context(), connect.NewRequest(&ctrlv1.DeleteTransferRequest{Command: newCommandMetadata(commandID), TransferId: args[0]}))
			return showTransfer(cmd, out, res, err)
		},
	}
	del.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	return del
}
