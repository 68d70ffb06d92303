package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

const mib = 1 << 20

func workspaceClient() (ctrlv1connect.WorkspaceServiceClient, error) {
	return onWorkspace(ctrlv1connect.NewWorkspaceServiceClient)
}

var workspaceHeader = []string{"WORKSPACE", "STATE", "GENERATION", "TEMPLATE", "MEMORY", "DISK", "VOLUME", "EXPIRES"}

func workspaceRow(w *ctrlv1.Workspace) []string {
	spec := w.GetSpec()
	return []string{
		w.GetWorkspaceId(),
		trimEnum(w.GetState().String(), "WORKSPACE_STATE_"),
		strconv.FormatUint(w.GetGeneration(), 10),
		spec.GetTemplate().GetTemplate() + "@" + spec.GetTemplate().GetRevision(),
		showSize(spec.GetResources().GetMemoryBytes()),
		sizeCell(layerCapacity(w)),
		or(spec.GetVolume().GetVolumeId(), "-"),
		expires(w.GetExpiration().GetPolicy()),
	}
}

// layerCapacity is the DISK cell: the capacity asked for, else (zero
// leaves it to the storage profile) the one the layer got, which the
// BEST_EFFORT retention tier reports once the layer exists.
func layerCapacity(w *ctrlv1.Workspace) uint64 {
	if n := w.GetSpec().GetResources().GetWritableLayerCapacityBytes(); n > 0 {
		return n
	}
	for _, tier := range w.GetRetentionTiers() {
		if tier.GetKind() == ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_BEST_EFFORT {
			return tier.GetCapacityBytes()
		}
	}
	return 0
}

// expires is an expiration policy in a table cell: ACTION at TIME.
func expires(p *ctrlv1.WorkspaceExpirationPolicy) string {
	if p == nil {
		return "-"
	}
	return strings.ToLower(trimEnum(p.GetAction().String(), "WORKSPACE_EXPIRATION_ACTION_")) + " at " + p.GetDeadline().AsTime().UTC().Format(time.RFC3339)
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
			all, err := everyPage((*ctrlv1.ListWorkspacesResponse).GetWorkspaces, func(token string) (*connect.Response[ctrlv1.ListWorkspacesResponse], error) {
				return client.ListWorkspaces(cmd.Context(), connect.NewRequest(&ctrlv1.ListWorkspacesRequest{LabelSelector: selector, PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &ctrlv1.ListWorkspacesResponse{Workspaces: all}, workspaceHeader, rowsOf(all, workspaceRow))
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

	var cf createFlags
	var onNode string // --node: CreateWorkspaceOnNode, StartWorkspaceOnNode
	create := &cobra.Command{
		Use: "create", Short: "Create a Workspace", Args: cobra.NoArgs,
		Long: `create admits a Workspace and follows its creation to AVAILABLE, showing each
stage on stderr (placing, delivering the template with its bytes, booting,
waiting for the guest agent) with the time so far; --no-wait returns once
admitted. Sizes take units (512Mi, 1G, 4GiB); a bare number is MiB.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := cf.spec()
			if err != nil {
				return err
			}
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			req := &ctrlv1.CreateWorkspaceRequest{Command: newCommandMetadata(commandID), Spec: spec}
			if onNode != "" {
				res, err := createOnNode(cmd.Context(), onNode, req)
				return followWorkspace(cmd, out, client, res, err, noWait)
			}
			res, err := client.CreateWorkspace(cmd.Context(), connect.NewRequest(req))
			return followWorkspace(cmd, out, client, res, err, noWait)
		},
	}
	cf.register(create)
	long(create)

	var force bool
	start := &cobra.Command{
		Use: "start WORKSPACE_ID", Short: "Start a stopped Workspace", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			req := &ctrlv1.StartWorkspaceRequest{Command: newCommandMetadata(commandID), WorkspaceId: args[0]}
			if onNode != "" {
				res, err := startOnNode(cmd.Context(), onNode, req)
				return followWorkspace(cmd, out, client, res, err, noWait)
			}
			res, err := client.StartWorkspace(cmd.Context(), connect.NewRequest(req))
			return followWorkspace(cmd, out, client, res, err, noWait)
		},
	}
	long(start)
	for _, c := range []*cobra.Command{create, start} {
		c.Flags().StringVar(&onNode, "node", "", "place it on this node only, or fail as a placement that finds no node does (operator: needs the operator endpoint and KIBOTOS_OPERATOR_TOKEN); later starts are placed as usual")
	}
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

	c.AddCommand(list, get, create, start, stop, del, newWorkspaceUpdateCommand(out), newWorkspaceNetworkCommand(out), newExecCommand(out), newCopyCommand(out), newFilesCommand(out), newProcessCommand(out), newSessionCommand(out), newWorkspaceExportCommand(out), newWorkspaceRestoreCommand(out), newWorkspaceMetricsCommand(out),
		newWorkspaceWaitCommand(out), newWorkspaceCommandCommand(out))
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

// followWorkspace follows a lifecycle command to its end, showing its
// stages on stderr as they change, then prints the Workspace as it is
// then. A command that fails is an error.
func followWorkspace[T any, PT interface {
	*T
	proto.Message
	GetWorkspace() *ctrlv1.Workspace
	GetCommand() *ctrlv1.WorkspaceCommand
}](cmd *cobra.Command, out *outputFlag, client ctrlv1connect.WorkspaceServiceClient, res *connect.Response[T], err error, noWait bool) error {
	if err != nil {
		return err
	}
	var msg PT = res.Msg
	id := msg.GetWorkspace().GetWorkspaceId()
	if noWait {
		c := msg.GetCommand()
		fmt.Fprintf(cmd.ErrOrStderr(), "admitted: the %s of %s is command %s; kibotos workspace wait %s %s follows it\n",
			strings.ToLower(trimEnum(c.GetKind().String(), "WORKSPACE_COMMAND_KIND_")), id, c.GetCommandId(), id, c.GetCommandId())
		return showWorkspace[T, PT](cmd, out, res, nil)
	}
	p := newProgress(cmd.ErrOrStderr())
	var delivery deliveryWatch
	for {
		// WaitWorkspace answers as soon as the command ends, and otherwise
		// after followStep with the command and the Workspace as they are,
		// for the progress display: no polling delay at the end.
		waited, err := client.WaitWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.WaitWorkspaceRequest{
			WorkspaceId: id, CommandId: msg.GetCommand().GetCommandId(), Timeout: durationpb.New(followStep),
		}))
		if err != nil && cmd.Context().Err() != nil {
			// Ctrl-C ends the following, not the command: ctrl admitted it.
			p.end()
			c := msg.GetCommand()
			return fmt.Errorf("stopped following; the %s of %s (command %s) goes on in ctrl: kibotos workspace wait %s %s follows it again",
				strings.ToLower(trimEnum(c.GetKind().String(), "WORKSPACE_COMMAND_KIND_")), id, c.GetCommandId(), id, c.GetCommandId())
		}
		if err != nil {
			return err
		}
		wc, w := waited.Msg.GetCommand(), waited.Msg.GetWorkspace()
		switch wc.GetState() {
		case ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED:
			p.line("%s %s: done in %s", strings.ToLower(trimEnum(wc.GetKind().String(), "WORKSPACE_COMMAND_KIND_")), id, p.elapsed())
			return showWorkspace(cmd, out, connect.NewResponse(&ctrlv1.GetWorkspaceResponse{Workspace: w}), nil)
		case ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED:
			p.end()
			f := wc.GetFailure()
			return fmt.Errorf("%s failed at %s (%s): %s", id, trimEnum(f.GetStage().String(), "FAILURE_STAGE_"), trimEnum(f.GetReason().String(), "FAILURE_REASON_"), f.GetMessage())
		}
		showStage(p, wc, w, &delivery)
	}
}

// followStep is how long one WaitWorkspace of a follow waits before it
// answers with the command's progress (the display's refresh).
const followStep = 500 * time.Millisecond

// showStage shows where a running command is. For a create, restore or
// start: placing (waiting for a node to take it), delivering the template
// (its bytes), for a restore making the Volume and writable layer from the
// archive, then booting until the guest agent answers; ctrl reports no
// boundary between the boot and the agent's handshake (the node answers
// the start once its agent does), so they are one stage here. Other
// commands show what ctrl says of them.
func showStage(p *progress, c *ctrlv1.WorkspaceCommand, w *ctrlv1.Workspace, delivery *deliveryWatch) {
	d := w.GetDelivery()
	launching := c.GetKind() == ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_CREATE || c.GetKind() == ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_START || c.GetKind() == ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_RESTORE
	switch {
	case delivery.going(d):
		p.bytes("delivering the template ("+strings.ToLower(trimEnum(d.GetReason().String(), "TEMPLATE_DELIVERY_REASON_"))+")", int64(d.GetDeliveredBytes()), int64(d.GetTotalBytes()))
	case launching && c.GetWaitingFor() != "":
		p.stage("placing: waiting for " + c.GetWaitingFor())
	case c.GetWaitingFor() != "":
		p.stage("waiting for " + c.GetWaitingFor())
	case launching && c.GetProgress() == "":
		p.stage("placing")
	case launching && strings.HasPrefix(c.GetProgress(), "import-"):
		p.stage("restoring the archive's parts (" + c.GetProgress() + ")")
	case launching && strings.HasPrefix(c.GetProgress(), "start"):
		p.stage("booting and waiting for the guest agent (" + c.GetProgress() + ")")
	case c.GetProgress() != "":
		p.stage(c.GetProgress())
	}
}

// deliveryQuiet is how long a delivery's observation may stay unchanged
// before the delivery counts as over: a node reports it about once a
// second while bytes are missing and sends no last report once they are
// all there.
const deliveryQuiet = 2 * time.Second

// deliveryWatch tells a delivery still going from one whose reports
// stopped, by when (on this machine's clock) its observation last changed.
type deliveryWatch struct {
	observed time.Time // the observation's observed_at, ctrl's clock
	changed  time.Time // when it was first seen, this clock
}

func (dw *deliveryWatch) going(d *ctrlv1.TemplateDeliveryObservation) bool {
	if d.GetTotalBytes() == 0 || d.GetDeliveredBytes() >= d.GetTotalBytes() {
		return false
	}
	if at := d.GetObservedAt().AsTime(); !at.Equal(dw.observed) {
		dw.observed, dw.changed = at, time.Now()
	}
	return time.Since(dw.changed) < deliveryQuiet
}
