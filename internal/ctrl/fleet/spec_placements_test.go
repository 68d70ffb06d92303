package fleet_test

// Spec sentences of CreateWorkspaceOnNode, StartWorkspaceOnNode and
// ListWorkspacePlacements the other fleet tests do not assert
// (docs/spec-coverage/pools.md). The catalog boots nothing: a create or
// start is placed on a node, which names itself in the boot's failure.

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/testenv"
)

// placementTimeout is how long a create or start waits for a node to take
// it before it fails at PLACING.
func placementTimeout(d time.Duration) testenv.Option {
	return testenv.WithFleet(fleet.Config{
		ObservationInterval: 200 * time.Millisecond, ClockProbeInterval: 100 * time.Millisecond, ClockTolerance: 10 * time.Second,
		PlacementTimeout: d,
	})
}

// failedWorkspace waits until Workspace id is FAILED and returns it.
func failedWorkspace(t *testing.T, c *testenv.Cluster, id string) *ctrlv1.Workspace {
	t.Helper()
	var w *ctrlv1.Workspace
	testenv.WaitFor(t, "workspace "+id+" FAILED", func() bool {
		res, err := c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
		if err != nil {
			t.Fatal(err)
		}
		w = res.Msg.GetWorkspace()
		return w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED
	})
	return w
}

// bootedOn says whether the Workspace's last create or start failed
// booting on node (it was placed there).
func bootedOn(w *ctrlv1.Workspace, node string) bool {
	f := w.GetFailure()
	return f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING && strings.HasPrefix(f.GetMessage(), "node "+node+":")
}

// clusterWithFastOnNodeB starts ctrl with node-a on pool "default" and
// node-b on pool "fast" (in fastDir), its default, which node-a does not
// reach.
func clusterWithFastOnNodeB(t *testing.T, db testenv.Option) (c *testenv.Cluster, fastDir string) {
	t.Helper()
	c = testenv.New(t, db, placementTimeout(2*time.Second))
	c.StartNode(t, "node-a", "", "")
	fastDir = t.TempDir()
	c.StartNodeWithPools(t, "node-b", "", node.Pool{Name: "fast", Dir: fastDir, Default: true})
	c.EnsureCapacity(t, "fast", 1<<40)
	c.UnbootableCatalog(t)
	return c, fastDir
}

// createOnNodeB creates a Workspace of 100 mCPU and 128 MiB with volume,
// pinned to node-b.
func createOnNodeB(t *testing.T, c *testenv.Cluster, commandID string, volume *ctrlv1.WorkspaceVolumeBinding) *ctrlv1.Workspace {
	t.Helper()
	res, err := c.Nodes.CreateWorkspaceOnNode(ctx, connect.NewRequest(&operatorv1.CreateWorkspaceOnNodeRequest{NodeId: "node-b", Request: &ctrlv1.CreateWorkspaceRequest{
		Command: cmd(commandID), Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: 100, MemoryBytes: 128 << 20}, Volume: volume},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetResponse().GetWorkspace()
}

func startOnNode(c *testenv.Cluster, commandID, id, node string) error {
	_, err := c.Nodes.StartWorkspaceOnNode(ctx, connect.NewRequest(&operatorv1.StartWorkspaceOnNodeRequest{
		NodeId: node, Request: &ctrlv1.StartWorkspaceRequest{Command: cmd(commandID), WorkspaceId: id},
	}))
	return err
}

// Only the create's placement is fixed: the Workspace keeps no record of
// its node, and a later StartWorkspace is placed as usual (the first node
// by node_id with room, here node-a, not the pinned node-b).
func TestSpecAPinnedCreatesLaterStartsArePlacedAsUsual(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c := testenv.New(t, db, fastFleet())
		a := c.StartNode(t, "node-a", "", "")
		c.StartNode(t, "node-b", "", a.PoolDir) // the same pool "default"
		c.UnbootableCatalog(t)
		created, err := createOnNode(c, "create-1", "node-b", 100)
		if err != nil {
			t.Fatal(err)
		}
		id := created.GetResponse().GetWorkspace().GetWorkspaceId()
		if w := failedWorkspace(t, c, id); !bootedOn(w, "node-b") {
			t.Fatalf("the pinned create: %v, want it placed on node-b", w.GetFailure())
		}
		if _, err := c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd("start-1"), WorkspaceId: id})); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "the start to end", func() bool {
			return commandOf(t, c, "start-1").GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED
		})
		if w := failedWorkspace(t, c, id); !bootedOn(w, "node-a") {
			t.Errorf("the later start: %v, want it placed as usual, on node-a", w.GetFailure())
		}
	})
}

// A pinned create admitted before ctrl restarts is still placed on its
// node only: the new ctrl does not take node-a, which fits, and the
// create fails as a pinned placement on node-b does.
func TestSpecAPinnedCreateStaysPinnedAcrossACtrlRestart(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		state := t.TempDir()
		sameState := func(c *ctrl.Config) { c.StateDir = state }
		first := testenv.New(t, db, placementTimeout(10*time.Second), sameState)
		a := first.StartNode(t, "node-a", "", "")
		first.StartNode(t, "node-b", "", a.PoolDir).Stop(t)
		first.WaitStatus(t, "node-b", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		first.UnbootableCatalog(t)
		created, err := createOnNode(first, "create-1", "node-b", 100)
		if err != nil {
			t.Fatal(err)
		}
		id := created.GetResponse().GetWorkspace().GetWorkspaceId()
		testenv.WaitFor(t, "the pinned create to wait for node-b", func() bool {
			return strings.Contains(commandOf(t, first, "create-1").GetWaitingFor(), "node-b")
		})

		if k := commandOf(t, first, "create-1"); k.GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED {
			t.Fatalf("the pinned create ended before the restart: %v", k)
		}
		a.Stop(t)
		first.Ctrl.Close()
		second := testenv.New(t, db, placementTimeout(10*time.Second), sameState)
		second.StartNode(t, "node-a", a.StateDir, a.PoolDir)
		w := failedWorkspace(t, second, id)
		if f := w.GetFailure(); f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING || !strings.Contains(f.GetMessage(), "node-b") || strings.Contains(f.GetMessage(), "node-a") {
			t.Errorf("the pinned create after the restart: %v, want it failed at PLACING for node-b alone", f)
		}
	})
}

// StartWorkspaceOnNode on a node that does not reach the pool of the
// Workspace's writable layer, or of its Volume, fails to start as
// unavailable, naming the pool.
func TestSpecStartOnANodeNotReachingItsPoolsFailsAsUnavailable(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c, fast := clusterWithFastOnNodeB(t, db)

		// No Volume: its layer goes to node-b's default pool, fast (where a
		// start that finds it keeps it; the create's own start removed it).
		withLayer := createOnNodeB(t, c, "create-layer", &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}).GetWorkspaceId()
		failedWorkspace(t, c, withLayer)
		c.KeepLayer(t, withLayer, fast, "node-b")
		vol, err := c.Volumes.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{
			Command: cmd("volume-1"), Spec: &ctrlv1.VolumeSpec{StoragePool: "fast", CapacityBytes: 32 << 20},
		}))
		if err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "the Volume AVAILABLE", func() bool {
			res, err := c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: vol.Msg.GetVolume().GetVolumeId()}))
			return err == nil && res.Msg.GetVolume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
		})
		bound, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
			Command: cmd("create-volume"),
			Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: 100, MemoryBytes: 128 << 20},
				Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: vol.Msg.GetVolume().GetVolumeId()}},
		}))
		if err != nil {
			t.Fatal(err)
		}
		withVolume := bound.Msg.GetWorkspace().GetWorkspaceId()

		for _, id := range []string{withLayer, withVolume} {
			if w := failedWorkspace(t, c, id); !bootedOn(w, "node-b") {
				t.Fatalf("workspace %s's create: %v, want it placed on node-b", id, w.GetFailure())
			}
			if err := startOnNode(c, "start-"+id, id, "node-a"); err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, "the pinned start to fail", func() bool {
				return commandOf(t, c, "start-"+id).GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED
			})
			f := failedWorkspace(t, c, id).GetFailure()
			if f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING || f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE ||
				!strings.Contains(f.GetMessage(), `does not reach storage pool "fast"`) {
				t.Errorf("workspace %s started on node-a: %v, want unavailable at PLACING, naming pool fast", id, f)
			}
		}
	})
}

// ListWorkspacePlacements answers from ctrl's records: with the node's
// session gone, its placements are still listed, by node, Workspace and
// Instance.
func TestSpecListWorkspacePlacementsReadsRecordsOnly(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c := testenv.New(t, db, fastFleet())
		n := c.StartNode(t, "node-a", "", "")
		ws := workspaceWaiting(t, c, "create-1")
		placer{t, c}.wantPlaced(ws, fleet.Placement{CPUMillis: 100, MemoryBytes: 128 << 20}, "node-a")
		row := placementOf(t, c, ws)
		n.Stop(t)
		c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		for name, filter := range map[string]*operatorv1.ListWorkspacePlacementsRequest{
			"node":      {Filter: &operatorv1.ListWorkspacePlacementsRequest_NodeId{NodeId: "node-a"}},
			"workspace": {Filter: &operatorv1.ListWorkspacePlacementsRequest_WorkspaceId{WorkspaceId: ws}},
			"instance":  {Filter: &operatorv1.ListWorkspacePlacementsRequest_InstanceId{InstanceId: row.GetInstanceId()}},
		} {
			res, err := c.Nodes.ListWorkspacePlacements(ctx, connect.NewRequest(filter))
			if err != nil || len(res.Msg.GetWorkspacePlacements()) != 1 || res.Msg.GetWorkspacePlacements()[0].GetNodeId() != "node-a" {
				t.Errorf("placements by %s with node-a unreachable: %v %v, want %s on node-a", name, res, err, ws)
			}
		}
		// Its Allocation released, the Instance is current nowhere: an empty
		// page, as for an Instance that never existed.
		placer{t, c}.release(ws)
		res, err := c.Nodes.ListWorkspacePlacements(ctx, connect.NewRequest(&operatorv1.ListWorkspacePlacementsRequest{
			Filter: &operatorv1.ListWorkspacePlacementsRequest_InstanceId{InstanceId: row.GetInstanceId()},
		}))
		if err != nil || len(res.Msg.GetWorkspacePlacements()) != 0 {
			t.Errorf("placements of an Instance no longer current: %v %v, want an empty page", res, err)
		}
	})
}

// A pinned create on a drained node fails as an ordinary placement that
// finds no node fails (UNAVAILABLE at PLACING, naming the drain), though
// node-a would take it.
func TestSpecAPinnedCreateOnADrainedNodeFails(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c := testenv.New(t, db, placementTimeout(2*time.Second))
		a := c.StartNode(t, "node-a", "", "")
		c.StartNode(t, "node-b", "", a.PoolDir)
		c.UnbootableCatalog(t)
		if _, err := c.Nodes.DrainNode(ctx, connect.NewRequest(&operatorv1.DrainNodeRequest{Command: cmd("drain-b"), NodeId: "node-b"})); err != nil {
			t.Fatal(err)
		}
		created, err := createOnNode(c, "create-1", "node-b", 100)
		if err != nil {
			t.Fatal(err)
		}
		f := failedWorkspace(t, c, created.GetResponse().GetWorkspace().GetWorkspaceId()).GetFailure()
		if f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING || f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE ||
			!strings.Contains(f.GetMessage(), "draining") || strings.Contains(f.GetMessage(), "node-a") {
			t.Errorf("a create pinned to a drained node: %v, want unavailable at PLACING for node-b alone", f)
		}
	})
}

// "default_pool is this node's own default: an object whose request names
// no pool is created in it." A create pinned to node-b whose NEW Volume
// names no pool gets it in node-b's default pool, fast, not in node-a's
// (the first node's) default, which node-b does not reach: node-b creates
// the Volume and boots the Workspace.
func TestSpecAPinnedCreatesNewVolumeGoesToThePinnedNodesDefaultPool(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c, _ := clusterWithFastOnNodeB(t, db)

		ws := createOnNodeB(t, c, "create-1", &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW, NewVolume: &ctrlv1.VolumeSpec{CapacityBytes: 32 << 20}})
		if w := failedWorkspace(t, c, ws.GetWorkspaceId()); !bootedOn(w, "node-b") {
			t.Fatalf("the pinned create: %v, want it placed on node-b", w.GetFailure())
		}
		res, err := c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: ws.GetSpec().GetVolume().GetVolumeId()}))
		if err != nil {
			t.Fatal(err)
		}
		if v := res.Msg.GetVolume(); v.GetSpec().GetStoragePool() != "fast" || v.GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
			t.Errorf("the pinned create's NEW Volume: %v, want it AVAILABLE in node-b's default pool fast", v)
		}
	})
}
