package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

const mib = 1 << 20

func workspaceClient() (ctrlv1connect.WorkspaceServiceClient, error) {
	return onWorkspace(ctrlv1connect.NewWorkspaceServiceClient)
}

var workspaceHeader = []string{"WORKSPACE", "STATE", "GENERATION", "TEMPLATE", "MEMORY_MIB"}

func workspaceRow(w *ctrlv1.Workspace) []string {
	spec := w.GetSpec()
	return []string{
		w.GetWorkspaceId(),
		trimEnum(w.GetState().String(), "WORKSPACE_STATE_"),
		strconv.FormatUint(w.GetGeneration(), 10),
		spec.GetTemplate().GetTemplate() + "@" + spec.GetTemplate().GetRevision(),
		strconv.FormatUint(spec.GetResources().GetMemoryBytes()/mib, 10),
	}
}

func newWorkspaceCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{Use: "workspace", Aliases: []string{"ws"}, Short: "Create, inspect, start, stop and delete Workspaces"}
	var commandID string
	var noWait bool
	mutation := func(cmd *cobra.Command) {
		cmd.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe); default: a new one")
	}
	// long marks a lifecycle command the CLI follows to its end, showing
	// its progress, unless --no-wait.
	long := func(cmd *cobra.Command) {
		mutation(cmd)
		cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the command is admitted instead of following it to its end")
	}

	list := &cobra.Command{
		Use: "list", Short: "List Workspaces", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			selector, _ := cmd.Flags().GetString("selector")
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			res, err := client.ListWorkspaces(cmd.Context(), connect.NewRequest(&ctrlv1.ListWorkspacesRequest{LabelSelector: selector}))
			if err != nil {
				return err
			}
			var rows [][]string
			for _, w := range res.Msg.GetWorkspaces() {
				rows = append(rows, workspaceRow(w))
			}
			return out.print(cmd.OutOrStdout(), res.Msg, workspaceHeader, rows)
		},
	}
	list.Flags().StringP("selector", "l", "", "label selector (k=v, k!=v, k, !k, k in (a,b))")

	get := &cobra.Command{
		Use: "get WORKSPACE_ID", Short: "Show one Workspace", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			res, err := client.GetWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: args[0]}))
			return showWorkspace(cmd, out, res, err)
		},
	}

	var template string
	var memoryMiB, cpuMillis uint64
	var noVolume bool
	create := &cobra.Command{
		Use: "create", Short: "Create a Workspace", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			spec := &ctrlv1.WorkspaceCreateSpec{
				Template:  &ctrlv1.TemplateSelector{Template: template},
				Resources: &ctrlv1.ResourceRequest{CpuMillis: uint32(cpuMillis), MemoryBytes: memoryMiB * mib},
			}
			if noVolume {
				spec.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
			}
			res, err := client.CreateWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
				Command: newCommandMetadata(commandID), Spec: spec,
			}))
			return followWorkspace(cmd, out, client, res, err, noWait)
		},
	}
	create.Flags().StringVar(&template, "template", "", "template name (default: the deployment's default template)")
	create.Flags().Uint64Var(&memoryMiB, "memory", 512, "guest memory in MiB (at least 128)")
	create.Flags().Uint64Var(&cpuMillis, "cpu", 1000, "CPU in thousandths of a vCPU")
	create.Flags().BoolVar(&noVolume, "no-volume", false, "create no Volume (nothing is promised to persist)")
	long(create)

	var force bool
	start := &cobra.Command{
		Use: "start WORKSPACE_ID", Short: "Start a stopped Workspace", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			res, err := client.StartWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: newCommandMetadata(commandID), WorkspaceId: args[0]}))
			return followWorkspace(cmd, out, client, res, err, noWait)
		},
	}
	long(start)
	stop := &cobra.Command{
		Use: "stop WORKSPACE_ID", Short: "Stop a Workspace (--force: without waiting for the guest)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			mode := ctrlv1.StopMode_STOP_MODE_NORMAL
			if force {
				mode = ctrlv1.StopMode_STOP_MODE_FORCE
			}
			res, err := client.StopWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: newCommandMetadata(commandID), WorkspaceId: args[0], Mode: mode}))
			return followWorkspace(cmd, out, client, res, err, noWait)
		},
	}
	stop.Flags().BoolVar(&force, "force", false, "end the execution at once; the stop reports UNCONFIRMED durability")
	long(stop)
	del := &cobra.Command{
		Use: "delete WORKSPACE_ID", Short: "Delete a Workspace", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			res, err := client.DeleteWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: newCommandMetadata(commandID), WorkspaceId: args[0]}))
			return followWorkspace(cmd, out, client, res, err, noWait)
		},
	}
	long(del)

	c.AddCommand(list, get, create, start, stop, del, newExecCommand(out), newCopyCommand())
	return c
}

// showWorkspace prints a response that carries one Workspace.
func showWorkspace[T any, PT interface {
	*T
	proto.Message
	GetWorkspace() *ctrlv1.Workspace
}](cmd *cobra.Command, out *outputFlag, res *connect.Response[T], err error) error {
	if err != nil {
		return err
	}
	var msg PT = res.Msg
	return out.print(cmd.OutOrStdout(), msg, workspaceHeader, [][]string{workspaceRow(msg.GetWorkspace())})
}

func trimEnum(s, prefix string) string { return strings.TrimPrefix(s, prefix) }

// followWorkspace follows a lifecycle command to its end, printing its
// progress to stderr as it changes, then prints the Workspace as it is
// then. A command that fails is an error.
func followWorkspace[T any, PT interface {
	*T
	proto.Message
	GetWorkspace() *ctrlv1.Workspace
	GetCommand() *ctrlv1.WorkspaceCommand
}](cmd *cobra.Command, out *outputFlag, client ctrlv1connect.WorkspaceServiceClient, res *connect.Response[T], err error, noWait bool) error {
	if err != nil || noWait {
		return showWorkspace[T, PT](cmd, out, res, err)
	}
	var msg PT = res.Msg
	id := msg.GetWorkspace().GetWorkspaceId()
	last := ""
	for {
		c, err := client.GetWorkspaceCommand(cmd.Context(), connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{WorkspaceId: id, CommandId: msg.GetCommand().GetCommandId()}))
		if err != nil {
			return err
		}
		wc := c.Msg.GetCommand()
		line := progressLine(wc)
		if wc.GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED {
			if w, err := client.GetWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id})); err == nil {
				if d := deliveryLine(w.Msg.GetWorkspace().GetDelivery()); d != "" {
					line = d
				}
			}
		}
		if line != last && line != "" {
			fmt.Fprintln(cmd.ErrOrStderr(), line)
			last = line
		}
		switch wc.GetState() {
		case ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED:
			got, err := client.GetWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
			return showWorkspace(cmd, out, got, err)
		case ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED:
			f := wc.GetFailure()
			return fmt.Errorf("%s failed at %s (%s): %s", id, trimEnum(f.GetStage().String(), "FAILURE_STAGE_"), trimEnum(f.GetReason().String(), "FAILURE_REASON_"), f.GetMessage())
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deliveryLine shows the template artifacts arriving on the node.
func deliveryLine(d *ctrlv1.TemplateDeliveryObservation) string {
	if d == nil || d.GetTotalBytes() == 0 {
		return ""
	}
	const mib = 1 << 20
	return fmt.Sprintf("delivering the template to the node: %.1f of %.1f MiB (%s)",
		float64(d.GetDeliveredBytes())/mib, float64(d.GetTotalBytes())/mib, trimEnum(d.GetReason().String(), "TEMPLATE_DELIVERY_REASON_"))
}

func progressLine(c *ctrlv1.WorkspaceCommand) string {
	switch {
	case c.GetWaitingFor() != "":
		return "waiting: " + c.GetWaitingFor()
	case c.GetProgress() != "":
		return c.GetProgress()
	}
	return ""
}
