package fleet_test

import (
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/testenv"
)

// createOnNodeA creates a Workspace pinned to node-a with volume, and
// waits until it runs.
func (e *vmEnv) createOnNodeA(commandID string, volume *ctrlv1.WorkspaceVolumeBinding) *ctrlv1.Workspace {
	e.t.Helper()
	res, err := e.c.Nodes.CreateWorkspaceOnNode(ctx, connect.NewRequest(&operatorv1.CreateWorkspaceOnNodeRequest{NodeId: "node-a", Request: &ctrlv1.CreateWorkspaceRequest{
		Command: cmd(commandID),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 500, MemoryBytes: 256 << 20, WritableLayerCapacityBytes: 256 << 20},
			Volume:    volume,
		},
	}}))
	if err != nil {
		e.t.Fatal(err)
	}
	return e.waitState(res.Msg.GetResponse().GetWorkspace().GetWorkspaceId(), ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
}

func (e *vmEnv) start(commandID, id string) {
	e.t.Helper()
	if _, err := e.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd(commandID), WorkspaceId: id})); err != nil {
		e.t.Fatal(err)
	}
}

// heldIn is node's held_object_count in each of its pools.
func heldIn(reg *operatorv1.NodeRegistration) map[string]uint64 {
	held := map[string]uint64{}
	for _, a := range reg.GetStoragePools() {
		held[a.GetStoragePool()] = a.GetHeldObjectCount()
	}
	return held
}

// Isolating a node releases what it held in every pool, one shared with
// another node and one it alone reaches, and fails every Workspace that
// ran on it whichever pools their objects are in. Then the Workspace whose
// objects are in the shared pool starts on the other node at once; the
// one whose layer only node-a reaches waits until node-a is back.
func TestIsolationReleasesObjectsInSharedAndUnsharedPools(t *testing.T) {
	e := newVMEnv(t)
	c := e.c
	shared := t.TempDir()
	pools := []node.Pool{{Name: "local-a", Dir: t.TempDir(), Default: true}, {Name: "shared", Dir: shared}}
	a := c.StartNodeWithPools(t, "node-a", "", pools...)
	t.Cleanup(a.PowerOff)
	b := c.StartNodeWithPools(t, "node-b", "", node.Pool{Name: "shared", Dir: shared, Default: true})
	t.Cleanup(b.PowerOff)
	c.EnsureCapacity(t, "local-a", testenv.DefaultPoolCapacity)
	c.EnsureCapacity(t, "shared", testenv.DefaultPoolCapacity)

	// inShared has its Volume and (with it) its layer in the shared pool;
	// onlyA has no Volume and its layer in node-a's own default pool.
	inShared := e.createOnNodeA("create-shared", &ctrlv1.WorkspaceVolumeBinding{
		Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW, MountPath: "/data",
		NewVolume: &ctrlv1.VolumeSpec{StoragePool: "shared", CapacityBytes: 64 << 20},
	})
	onlyA := e.createOnNodeA("create-local", &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE})
	if held := heldIn(c.Registration(t, "node-a")); held["shared"] != 2 || held["local-a"] != 1 {
		t.Fatalf("held_object_count before the isolation: %v, want shared 2 (a Volume and a layer), local-a 1 (a layer)", held)
	}

	a.Stop(t)
	a.PowerOff()
	reg := c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	res, err := e.isolate("iso-a", "node-a", reg.GetIncarnation())
	if err != nil {
		t.Fatal(err)
	}
	if res.GetReleasedVolumes() != 1 || res.GetReleasedRetainedLayers() != 2 || res.GetFailedWorkspaces() != 2 {
		t.Errorf("isolation released %d Volumes and %d layers, failed %d Workspaces; want 1, 2 and 2",
			res.GetReleasedVolumes(), res.GetReleasedRetainedLayers(), res.GetFailedWorkspaces())
	}
	if held := heldIn(res.GetRegistration()); held["shared"] != 0 || held["local-a"] != 0 {
		t.Errorf("held_object_count after the isolation: %v, want none in either pool", held)
	}
	for _, id := range []string{inShared.GetWorkspaceId(), onlyA.GetWorkspaceId()} {
		w := e.workspace(id)
		if f := w.GetFailure(); w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED || f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE || !f.GetRetryable() {
			t.Errorf("%s after the isolation: %v, failure %v; want FAILED, unavailable and retryable", id, w.GetState(), f)
		}
	}
	if got := e.volume(inShared.GetSpec().GetVolume().GetVolumeId()).GetState(); got != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
		t.Errorf("the Volume in the shared pool after the isolation: %v, want AVAILABLE", got)
	}

	// node-b reaches the shared pool: the Workspace there starts on it.
	e.start("start-shared", inShared.GetWorkspaceId())
	e.waitState(inShared.GetWorkspaceId(), ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if row := placementOf(t, c, inShared.GetWorkspaceId()); row.GetNodeId() != "node-b" {
		t.Errorf("the Workspace in the shared pool runs at %v, want node-b", row)
	}
	// Only node-a reaches local-a: the other waits for it to be back.
	e.start("start-local", onlyA.GetWorkspaceId())
	e.waitForANode("start-local", "the start to wait for a node reaching local-a")
	c.StartNodeWithPools(t, "node-a", a.StateDir, pools...)
	e.waitState(onlyA.GetWorkspaceId(), ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if row := placementOf(t, c, onlyA.GetWorkspaceId()); row.GetNodeId() != "node-a" {
		t.Errorf("the Workspace in local-a runs at %v, want node-a, back", row)
	}
}
