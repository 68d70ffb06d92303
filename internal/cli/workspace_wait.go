package cli

import (
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

var commandHeader = []string{"COMMAND", "KIND", "STATE", "DETAIL"}

// commandRow is one Workspace command: what it is doing or waiting for
// while it runs, its failure once FAILED.
func commandRow(c *ctrlv1.WorkspaceCommand) []string {
	detail := c.GetProgress()
	if c.GetWaitingFor() != "" {
		detail = "waiting for " + c.GetWaitingFor()
	}
	if f := c.GetFailure(); f != nil {
		detail = trimEnum(f.GetStage().String(), "FAILURE_STAGE_") + " (" + trimEnum(f.GetReason().String(), "FAILURE_REASON_") + "): " + f.GetMessage()
	}
	return []string{c.GetCommandId(), strings.ToLower(trimEnum(c.GetKind().String(), "WORKSPACE_COMMAND_KIND_")),
		trimEnum(c.GetState().String(), "WORKSPACE_COMMAND_STATE_"), detail}
}

// newWorkspaceCommandCommand is `kibotos workspace command`: one command
// of a Workspace as it is now (GetWorkspaceCommand).
func newWorkspaceCommandCommand(out *outputFlag) *cobra.Command {
	return &cobra.Command{
		Use: "command WORKSPACE_ID COMMAND_ID", Short: "Show one of a Workspace's commands (create, start, stop, ...) as it is now", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			res, err := client.GetWorkspaceCommand(cmd.Context(), connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{WorkspaceId: args[0], CommandId: args[1]}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, commandHeader, [][]string{commandRow(res.Msg.GetCommand())})
		},
	}
}

// newWorkspaceWaitCommand is `kibotos workspace wait`: it follows a command
// admitted earlier (with --no-wait, or by a follow that was interrupted)
// to its end as the lifecycle commands do, then prints the Workspace.
func newWorkspaceWaitCommand(out *outputFlag) *cobra.Command {
	return &cobra.Command{
		Use:   "wait WORKSPACE_ID COMMAND_ID",
		Short: "Follow a command admitted earlier (--no-wait, an interrupted follow) to its end; a failed one exits 1",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			// The first wait reads the Workspace and the command (an unknown
			// one is not_found); followWorkspace goes on from its answer.
			res, err := client.WaitWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.WaitWorkspaceRequest{
				WorkspaceId: args[0], CommandId: args[1], Timeout: durationpb.New(followStep),
			}))
			return followWorkspace(cmd, out, client, res, err, false)
		},
	}
}
