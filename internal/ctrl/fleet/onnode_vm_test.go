package fleet_test

import (
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/testenv"
)

// CreateWorkspaceOnNode and StartWorkspaceOnNode on real microVMs: the
// Workspace runs on the node named, though placement would pick another
// first; ListWorkspacePlacements shows where, with which Instance; the
// node reports its VM's memory; a stop releases the Allocation; a pinned
// start then runs it on the other node reaching the same pool.
func TestWorkspaceOnNodeRunsWhereItIsPinned(t *testing.T) {
	e := newVMEnv(t)
	c := e.c
	a := e.startNode("node-a", "")
	e.startNode("node-b", a.PoolDir) // the same pool "default"

	created, err := c.Nodes.CreateWorkspaceOnNode(ctx, connect.NewRequest(&operatorv1.CreateWorkspaceOnNodeRequest{NodeId: "node-b", Request: &ctrlv1.CreateWorkspaceRequest{
		Command: cmd("create-1"),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 500, MemoryBytes: 256 << 20, WritableLayerCapacityBytes: 256 << 20},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE},
		},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetResponse().GetWorkspace().GetWorkspaceId()
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if k := e.command("create-1"); k.GetKind() != ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_CREATE || k.GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED {
		t.Errorf("GetWorkspaceCommand of the pinned create: %v", k)
	}
	row := placementOf(t, c, id)
	if row.GetNodeId() != "node-b" || row.GetWorkspaceState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || row.GetAllocation().GetCpuMillis() != 500 {
		t.Errorf("placement of the pinned create: %v", row)
	}
	if reg := c.Registration(t, "node-b"); reg.GetAllocated().GetMemoryBytes() != 256<<20 {
		t.Errorf("node-b's allocated: %v", reg.GetAllocated())
	}
	waitLong(t, "node-b to report its VM's memory", func() bool {
		return c.Registration(t, "node-b").GetHostUsage().GetVmMemoryBytes() > 0
	})
	if got := c.Registration(t, "node-a").GetHostUsage().GetVmMemoryBytes(); got != 0 {
		t.Errorf("node-a runs no VM but reports %d bytes of VM memory", got)
	}

	if _, err := c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmd("stop-1"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	if row := placementOf(t, c, id); row != nil {
		t.Errorf("a STOPPED Workspace still placed: %v", row)
	}
	if reg := c.Registration(t, "node-b"); reg.GetAllocated().GetMemoryBytes() != 0 {
		t.Errorf("node-b's allocated after the stop: %v", reg.GetAllocated())
	}

	if _, err := c.Nodes.StartWorkspaceOnNode(ctx, connect.NewRequest(&operatorv1.StartWorkspaceOnNodeRequest{NodeId: "node-a", Request: &ctrlv1.StartWorkspaceRequest{
		Command: cmd("start-1"), WorkspaceId: id,
	}})); err != nil {
		t.Fatal(err)
	}
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if row := placementOf(t, c, id); row.GetNodeId() != "node-a" {
		t.Errorf("placement of the pinned start: %v", row)
	}
	if _, err := c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: cmd("delete-1"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED)
	if reg := c.Registration(t, "node-a"); reg.GetAllocated().GetCpuMillis() != 0 {
		t.Errorf("node-a's allocated after the delete: %v", reg.GetAllocated())
	}
}

// placementOf is the Workspace's placement row, nil when it has none.
func placementOf(t *testing.T, c *testenv.Cluster, id string) *operatorv1.WorkspacePlacement {
	t.Helper()
	res, err := c.Nodes.ListWorkspacePlacements(ctx, connect.NewRequest(&operatorv1.ListWorkspacePlacementsRequest{
		Filter: &operatorv1.ListWorkspacePlacementsRequest_WorkspaceId{WorkspaceId: id},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if rows := res.Msg.GetWorkspacePlacements(); len(rows) == 1 {
		return rows[0]
	}
	return nil
}
