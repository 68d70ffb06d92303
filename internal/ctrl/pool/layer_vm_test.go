package pool_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// vmWait bounds what waits for a VM to boot under TCG on a loaded machine.
const vmWait = 4 * time.Minute

func (e *env) waitWorkspace(id string, want ctrlv1.WorkspaceState) *ctrlv1.Workspace {
	e.t.Helper()
	var w *ctrlv1.Workspace
	deadline := time.Now().Add(vmWait)
	for {
		w = e.workspace(id)
		if w.GetState() == want {
			return w
		}
		if w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED || time.Now().After(deadline) {
			e.t.Fatalf("workspace %s is %v (failure %v), want %v", id, w.GetState(), w.GetFailure(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) createWorkspace(commandID string, layer uint64) string {
	e.t.Helper()
	res, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: cmd(commandID),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 * mib, WritableLayerCapacityBytes: layer},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE},
		},
	}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.GetWorkspace().GetWorkspaceId()
}

func (e *env) layerOf(workspaceID string) (*operatorv1.StoragePoolObject, error) {
	res, err := e.c.Nodes.GetStoragePoolObject(ctx, connect.NewRequest(&operatorv1.GetStoragePoolObjectRequest{
		Object: &operatorv1.GetStoragePoolObjectRequest_WorkspaceId{WorkspaceId: workspaceID},
	}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetObject(), nil
}

func bestEffort(w *ctrlv1.Workspace) *ctrlv1.RetentionTier {
	for _, tier := range w.GetRetentionTiers() {
		if tier.GetKind() == ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_BEST_EFFORT {
			return tier
		}
	}
	return nil
}

// Writable layers on real microVMs: placement reserves a layer's capacity
// in its pool and refuses one that does not fit; the layer is an object of
// its pool, held by the node running it; once the pool is declared lost
// the Workspace starts elsewhere with a new layer and reports RESET with
// LAYER_UNAVAILABLE.
func TestWritableLayersLiveInAPoolAndStartAnewWhenItIsLost(t *testing.T) {
	e := newEnv(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	e.c.BootableCatalog(t)
	a := e.startNode("node-a", node.Pool{Name: "shared", Dir: t.TempDir()})
	t.Cleanup(a.PowerOff) // after the agent stopped: cleanups run last first
	if _, err := e.setCapacity("cap-1", "shared", 1, 256*mib); err != nil {
		t.Fatal(err)
	}

	big := e.createWorkspace("create-big", 512*mib)
	failed := e.waitWorkspace(big, ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED)
	if f := failed.GetFailure(); f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING || f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED {
		t.Errorf("a layer beyond its pool's capacity: %v, want RESOURCE_EXHAUSTED at PLACING", f)
	}
	if _, err := e.layerOf(big); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("the layer of a Workspace never placed: %v, want not_found", err)
	}

	id := e.createWorkspace("create-1", 256*mib)
	e.waitWorkspace(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	p := e.pool("shared")
	if p.GetRetainedLayerCount() != 1 || p.GetReservedBytes() != 256*mib || p.GetAttachments()[0].GetHeldObjectCount() != 1 {
		t.Errorf("pool with a running layer: %v, want 1 layer, 256 MiB reserved, held by node-a", p)
	}
	objs := e.objects("shared")
	layer, err := e.layerOf(id)
	if err != nil || len(objs) != 1 || !proto.Equal(objs[0], layer) ||
		layer.GetKind() != operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_WRITABLE_LAYER || layer.GetHolderNodeId() != "node-a" || layer.GetCapacityBytes() != 256*mib {
		t.Errorf("objects %v, layer %v %v: want the layer of %s, 256 MiB, held by node-a", objs, layer, err, id)
	}
	if _, err := e.c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmd("stop-1"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	e.waitWorkspace(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	if layer, err := e.layerOf(id); err != nil || layer.GetHolderNodeId() != "" {
		t.Errorf("layer of a stopped Workspace: %v %v, want it held by no node", layer, err)
	}

	e.isolate(a)
	a.PowerOff()
	res, err := e.declareLost("lost-1", "shared")
	if err != nil {
		t.Fatal(err)
	}
	if res.GetLostRetainedLayers() != 1 || res.GetLostVolumes() != 0 || res.GetPool().GetRetainedLayerCount() != 0 {
		t.Errorf("declaration: %v, want one lost layer and none left", res)
	}
	if _, err := e.layerOf(id); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("the layer lost with its pool: %v, want not_found", err)
	}

	// Another host with a pool of its own starts it with a new layer.
	b := e.startNode("node-b", node.Pool{Name: "other", Dir: t.TempDir()})
	t.Cleanup(b.PowerOff)
	e.c.EnsureCapacity(t, "other", gib)
	if _, err := e.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd("start-1"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	w := e.waitWorkspace(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if tier := bestEffort(w); tier.GetContinuity() != ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_RESET ||
		tier.GetResetReason() != ctrlv1.RetentionResetReason_RETENTION_RESET_REASON_LAYER_UNAVAILABLE {
		t.Errorf("BEST_EFFORT tier after the pool was lost: %v, want RESET with LAYER_UNAVAILABLE", tier)
	}
	if layer, err := e.layerOf(id); err != nil || layer.GetStoragePool() != "other" || layer.GetHolderNodeId() != "node-b" {
		t.Errorf("the new layer: %v %v, want it in pool other, held by node-b", layer, err)
	}
}
