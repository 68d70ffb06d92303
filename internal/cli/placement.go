package cli

import (
	"context"
	"errors"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
)

var placementHeader = []string{"WORKSPACE", "STATE", "NODE", "INSTANCE", "CPU", "MEMORY", "SINCE"}

func placementRow(p *operatorv1.WorkspacePlacement) []string {
	a := p.GetAllocation()
	return []string{
		p.GetWorkspaceId(), trimEnum(p.GetWorkspaceState().String(), "WORKSPACE_STATE_"), p.GetNodeId(), p.GetInstanceId(),
		strconv.FormatUint(uint64(a.GetCpuMillis()), 10) + "m", showSize(a.GetMemoryBytes()),
		p.GetAllocatedAt().AsTime().UTC().Format(time.RFC3339),
	}
}

// newNodePlacementsCommand is `kibotos node placements NODE_ID`, or
// `--workspace ID` / `--instance ID`: ListWorkspacePlacements, the
// Workspaces that keep a draining node from DRAINED, or the node one
// Workspace runs on.
func newNodePlacementsCommand(out *outputFlag) *cobra.Command {
	var workspaceID, instanceID string
	c := &cobra.Command{
		Use:   "placements [NODE_ID]",
		Short: "List the Workspaces executing on a node, or show where one Workspace (--workspace) or Instance (--instance) executes",
		Long: `placements NODE_ID lists the Workspaces whose current execution holds an
Allocation on the node: what a drain waits for before the node reads
DRAINED. --workspace WORKSPACE_ID or --instance INSTANCE_ID, in place of
NODE_ID, shows the node one Workspace executes on. A Workspace that is
stopped or not placed yet has no row. ctrl answers from its records; no
node is asked.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &operatorv1.ListWorkspacePlacementsRequest{PageSize: listPage}
			switch named := len(args) + btoi(workspaceID != "") + btoi(instanceID != ""); {
			case named != 1:
				return errors.New("name one of NODE_ID, --workspace or --instance")
			case len(args) == 1:
				req.Filter = &operatorv1.ListWorkspacePlacementsRequest_NodeId{NodeId: args[0]}
			case workspaceID != "":
				req.Filter = &operatorv1.ListWorkspacePlacementsRequest_WorkspaceId{WorkspaceId: workspaceID}
			default:
				req.Filter = &operatorv1.ListWorkspacePlacementsRequest_InstanceId{InstanceId: instanceID}
			}
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			all, err := everyPage((*operatorv1.ListWorkspacePlacementsResponse).GetWorkspacePlacements, func(token string) (*connect.Response[operatorv1.ListWorkspacePlacementsResponse], error) {
				req.PageToken = token
				return client.ListWorkspacePlacements(cmd.Context(), connect.NewRequest(req))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &operatorv1.ListWorkspacePlacementsResponse{WorkspacePlacements: all}, placementHeader, rowsOf(all, placementRow))
		},
	}
	c.Flags().StringVar(&workspaceID, "workspace", "", "show where this Workspace executes")
	c.Flags().StringVar(&instanceID, "instance", "", "show which Workspace this Instance is, and where it executes")
	return c
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// createOnNode is CreateWorkspaceOnNode: req, placed on node only. The
// answer is CreateWorkspace's, which the Workspace API follows as any.
func createOnNode(ctx context.Context, node string, req *ctrlv1.CreateWorkspaceRequest) (*connect.Response[ctrlv1.CreateWorkspaceResponse], error) {
	client, err := nodeRegistrationClient()
	if err != nil {
		return nil, err
	}
	res, err := client.CreateWorkspaceOnNode(ctx, connect.NewRequest(&operatorv1.CreateWorkspaceOnNodeRequest{NodeId: node, Request: req}))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res.Msg.GetResponse()), nil
}

// startOnNode is StartWorkspaceOnNode, as createOnNode is for a create.
func startOnNode(ctx context.Context, node string, req *ctrlv1.StartWorkspaceRequest) (*connect.Response[ctrlv1.StartWorkspaceResponse], error) {
	client, err := nodeRegistrationClient()
	if err != nil {
		return nil, err
	}
	res, err := client.StartWorkspaceOnNode(ctx, connect.NewRequest(&operatorv1.StartWorkspaceOnNodeRequest{NodeId: node, Request: req}))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res.Msg.GetResponse()), nil
}
