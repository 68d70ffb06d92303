package cli

import (
	"fmt"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
)

// Moves are operator commands (NodeRegistrationService), so they live
// under `kibotos pool` beside the pool's other operator commands rather
// than under the workspace-scoped volume and workspace nouns.

const moveLong = `The call waits until the move settled, at most one minute. A move still
copying then answers unavailable; run the same command again with the same
--command-id to wait again. The copy left in the source pool is removed
after the move and counted in the pool's CLEANUPS until then.`

func newPoolMoveVolumeCommand(out *outputFlag) *cobra.Command {
	var commandID, to string
	c := &cobra.Command{
		Use:   "move-volume VOLUME_ID --to POOL",
		Short: "Move a Volume to another storage pool (its Workspace must have no execution)",
		Long: `move-volume copies a Volume's blocks in use to POOL on a node reaching both
pools, and records the Volume there. Its ID, content, capacity and binding
stay the same. ` + moveLong,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			p := newProgress(cmd.ErrOrStderr())
			p.stage(fmt.Sprintf("moving volume %s to storage pool %s", args[0], to))
			res, err := client.MoveVolume(cmd.Context(), connect.NewRequest(&operatorv1.MoveVolumeRequest{
				Command: newCommandMetadata(commandID), VolumeId: args[0], StoragePool: to,
			}))
			p.end()
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, objectHeader, [][]string{objectRow(res.Msg.GetObject())})
		},
	}
	moveFlags(c, &commandID, &to)
	return c
}

func newPoolMoveLayerCommand(out *outputFlag) *cobra.Command {
	var commandID, to string
	c := &cobra.Command{
		Use:   "move-layer WORKSPACE_ID --to POOL",
		Short: "Move a Workspace's writable layer to another storage pool (the Workspace must have no execution)",
		Long: `move-layer copies a Workspace's writable layer to POOL on a node reaching both
pools; the Workspace continues from it on its next start. ` + moveLong,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			p := newProgress(cmd.ErrOrStderr())
			p.stage(fmt.Sprintf("moving the writable layer of %s to storage pool %s", args[0], to))
			res, err := client.MoveWritableLayer(cmd.Context(), connect.NewRequest(&operatorv1.MoveWritableLayerRequest{
				Command: newCommandMetadata(commandID), WorkspaceId: args[0], StoragePool: to,
			}))
			p.end()
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, objectHeader, [][]string{objectRow(res.Msg.GetObject())})
		},
	}
	moveFlags(c, &commandID, &to)
	return c
}

func moveFlags(c *cobra.Command, commandID, to *string) {
	c.Flags().StringVar(to, "to", "", "the storage pool to move to")
	_ = c.MarkFlagRequired("to")
	c.Flags().StringVar(commandID, "command-id", "", "command_id to send (the same id waits again for the same move)")
}
