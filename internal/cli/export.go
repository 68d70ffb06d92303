package cli

import (
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

// exportFlags are the flags of `workspace export` and `volume export`.
type exportFlags struct {
	commandID string
	noWait    bool
	download  string
}

func (f *exportFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.commandID, "command-id", "", "command_id to send (retrying with the same id answers the same Transfer); default: a new one")
	c.Flags().BoolVar(&f.noWait, "no-wait", false, "return once the export is admitted (EXPORTING) instead of following it to COMPLETE")
	c.Flags().StringVar(&f.download, "download", "", "once COMPLETE, download the archive to `FILE` (as transfer download does; run that to continue a partial FILE)")
	c.MarkFlagsMutuallyExclusive("no-wait", "download")
}

const exportLong = `export answers at once with a Transfer EXPORTING; ctrl then copies what it
exports into an archive. Unless --no-wait, the command follows the Transfer,
showing its bytes on stderr, until it is COMPLETE (then it prints it, and
with --download FILE downloads its archive) or FAILED (an error naming the
stage, reason and message).`

func newWorkspaceExportCommand(out *outputFlag) *cobra.Command {
	var f exportFlags
	var layer, withTemplate bool
	c := &cobra.Command{
		Use:   "export WORKSPACE_ID",
		Short: "Export a Workspace (its Volume; --layer, --with-template) as a Transfer",
		Long:  exportLong + " The Volume is always captured when there is one.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			res, err := client.ExportWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.ExportWorkspaceRequest{
				Command: newCommandMetadata(f.commandID), WorkspaceId: args[0],
				IncludeWritableLayer: layer, IncludeTemplateImage: withTemplate,
			}))
			return followExport(cmd, out, &f, "workspace "+args[0], res, err)
		},
	}
	c.Flags().BoolVar(&layer, "layer", false, "also capture the writable layer (the BEST_EFFORT tier)")
	c.Flags().BoolVar(&withTemplate, "with-template", false, "also carry the Template revision's root image, for a deployment that lacks it")
	f.register(c)
	return c
}

func newVolumeExportCommand(out *outputFlag) *cobra.Command {
	var f exportFlags
	c := &cobra.Command{
		Use:   "export VOLUME_ID",
		Short: "Export a Volume as a Transfer",
		Long:  exportLong,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := volumeClient()
			if err != nil {
				return err
			}
			res, err := client.ExportVolume(cmd.Context(), connect.NewRequest(&ctrlv1.ExportVolumeRequest{
				Command: newCommandMetadata(f.commandID), VolumeId: args[0],
			}))
			return followExport(cmd, out, &f, "volume "+args[0], res, err)
		},
	}
	f.register(c)
	return c
}

// followExport follows an admitted export to its end (unless --no-wait),
// downloads its archive when asked, and prints the Transfer.
func followExport[T any, PT interface {
	*T
	proto.Message
	GetTransfer() *ctrlv1.Transfer
}](cmd *cobra.Command, out *outputFlag, f *exportFlags, source string, res *connect.Response[T], err error) error {
	if err != nil || f.noWait {
		return showTransfer[T, PT](cmd, out, res, err)
	}
	var msg PT = res.Msg
	client, err := transferClient()
	if err != nil {
		return err
	}
	got, err := waitExport(cmd, client, source, msg.GetTransfer().GetTransferId())
	if err != nil {
		return err
	}
	if t := got.Msg.GetTransfer(); f.download != "" {
		if err := download(cmd, client, t, f.download); err != nil {
			return fmt.Errorf("transfer %s is COMPLETE; its download failed (continue it with `kibotos transfer download %[1]s --file %s`): %w", t.GetTransferId(), f.download, err)
		}
	}
	return showTransfer(cmd, out, got, nil)
}

// waitExport reads Transfer id until it is COMPLETE, showing its bytes; a
// FAILED export (or any end but COMPLETE) is an error.
func waitExport(cmd *cobra.Command, client ctrlv1connect.TransferServiceClient, source, id string) (*connect.Response[ctrlv1.GetTransferResponse], error) {
	p := newProgress(cmd.ErrOrStderr())
	what := "exporting " + source
	for {
		got, err := client.GetTransfer(cmd.Context(), connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: id}))
		if err != nil {
			p.end()
			return nil, err
		}
		t := got.Msg.GetTransfer()
		done, err := exportEnded(t)
		if err != nil {
			p.end()
			return nil, err
		}
		if done {
			p.line("exported %s to %s in %s", source, id, p.elapsed())
			return got, nil
		}
		if t.GetTotalBytes() > 0 {
			p.bytes(what, int64(t.GetDoneBytes()), int64(t.GetTotalBytes()))
		} else {
			p.stage(what)
		}
		select {
		case <-cmd.Context().Done():
			p.end()
			return nil, cmd.Context().Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// exportEnded reports whether t's export is over: COMPLETE, or an error
// for FAILED (its stage, reason and message) and any other end.
func exportEnded(t *ctrlv1.Transfer) (bool, error) {
	switch t.GetState() {
	case ctrlv1.TransferState_TRANSFER_STATE_EXPORTING:
		return false, nil
	case ctrlv1.TransferState_TRANSFER_STATE_COMPLETE:
		return true, nil
	case ctrlv1.TransferState_TRANSFER_STATE_FAILED:
		f := t.GetFailure()
		return true, fmt.Errorf("transfer %s failed at %s (%s): %s", t.GetTransferId(), trimEnum(f.GetStage().String(), "FAILURE_STAGE_"), trimEnum(f.GetReason().String(), "FAILURE_REASON_"), f.GetMessage())
	}
	return true, fmt.Errorf("transfer %s is %s, not exporting", t.GetTransferId(), trimEnum(t.GetState().String(), "TRANSFER_STATE_"))
}
