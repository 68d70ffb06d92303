package cli

import (
	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

func newWorkspaceRestoreCommand(out *outputFlag) *cobra.Command {
	var f specFlags
	var commandID string
	var noWait bool
	c := &cobra.Command{
		Use:   "restore TRANSFER_ID",
		Short: "Create a Workspace from a Transfer (an export or an import), bound to the Volume it carries",
		Long: `restore admits a new Workspace from a COMPLETE, IMPORTED or RESTORED
Transfer and follows it to AVAILABLE as create does, showing each stage on
stderr; --no-wait returns once admitted (CREATING, the Transfer RESTORING).
The archive's spec (template, resources, capabilities, network policy, the
Volume's mount path) is the base: a flag given replaces its field, a flag
not given leaves the archive's. --memory, --cpu and --disk replace one
part of the archived resources each, keeping the others; an archive with
no resources (a Volume's) starts from create's (512Mi, 1000 millis). The
Workspace is bound to a new Volume made from the archive's; an archived
writable layer continues over the template it was made over.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resources, err := restoreResources(cmd, &f, args[0])
			if err != nil {
				return err
			}
			spec, err := f.spec(resources)
			if err != nil {
				return err
			}
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			res, err := client.RestoreWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{
				Command: newCommandMetadata(commandID), TransferId: args[0], Spec: spec,
			}))
			return followWorkspace(cmd, out, client, res, err, noWait)
		},
	}
	f.register(c, true)
	c.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe); default: a new one")
	c.Flags().BoolVar(&noWait, "no-wait", false, "return once the restore is admitted instead of following it to its end")
	return c
}

// restoreResources is the resources a restore asks for: nil (the
// archive's) unless --memory, --cpu or --disk is given, or the archive
// carries none; then the archived resources, or create's defaults, with
// the flags given in place. ctrl replaces the resources whole, so the
// parts no flag gives are read from the Transfer's manifest.
func restoreResources(cmd *cobra.Command, f *specFlags, transferID string) (*ctrlv1.ResourceRequest, error) {
	given := cmd.Flags().Changed
	client, err := transferClient()
	if err != nil {
		return nil, err
	}
	got, err := client.GetTransfer(cmd.Context(), connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: transferID}))
	if err != nil {
		return nil, err
	}
	base := got.Msg.GetTransfer().GetManifest().GetResources()
	switch {
	case base == nil:
		base = defaultResources
	case !given("memory") && !given("cpu") && !given("disk"):
		return nil, nil
	}
	return f.resources(base, given), nil
}
