package pool_test

// Spec sentences of StoragePool, GetStoragePool and DeclareStoragePoolLost
// the other pool tests do not assert (docs/spec-coverage/pools.md).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/testenv"
)

// GetStoragePool answers exactly what ListStoragePools gives for the pool
// (read once the nodes stopped reporting, so that both calls see one
// state). A pool is a default pool when one node that reaches it names it
// its default, though another does not; each node lists the pools it
// declares with both identities.
func TestSpecGetStoragePoolGivesWhatTheListGives(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		shared := t.TempDir()
		a := e.startNode("node-a", node.Pool{Name: "shared", Dir: shared})
		b := e.startNode("node-b", node.Pool{Name: "local-b", Dir: t.TempDir()}, node.Pool{Name: "shared", Dir: shared})
		e.capacities("shared")
		if _, err := e.createVolume("v1", "shared", 32*mib); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"node-a", "node-b"} {
			for _, at := range e.c.Registration(t, id).GetStoragePools() {
				if at.GetNodeId() != id || at.GetStoragePool() == "" {
					t.Errorf("node %s lists attachment %v: want both identities", id, at)
				}
			}
		}
		a.Stop(t)
		b.Stop(t)
		e.c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		e.c.WaitStatus(t, "node-b", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)

		list, err := e.c.Nodes.ListStoragePools(ctx, connect.NewRequest(&operatorv1.ListStoragePoolsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Msg.GetPools()) != 2 {
			t.Fatalf("pools %v, want local-b and shared", list.Msg.GetPools())
		}
		for _, listed := range list.Msg.GetPools() {
			if got := e.pool(listed.GetStoragePool()); !proto.Equal(got, listed) {
				t.Errorf("GetStoragePool(%s) = %v\nListStoragePools gave %v", listed.GetStoragePool(), got, listed)
			}
		}
		p := e.pool("shared")
		if !p.GetDefaultPool() || p.GetVolumeCount() != 1 || p.GetReservedBytes() != 32*mib {
			t.Errorf("shared = %v: want a default pool (node-a's default, not node-b's), one Volume of 32 MiB", p)
		}
		for _, at := range p.GetAttachments() {
			if at.GetDefaultPool() != (at.GetNodeId() == "node-a") {
				t.Errorf("attachment %v: only node-a names shared its default", at)
			}
		}
	})
}

// DeclareStoragePoolLost looks at each member's current incarnation: a
// node isolated and then back with a new incarnation is in the way again.
// Once the pool is lost, its LOST Volume does not move (only an AVAILABLE
// Volume does), and the Workspace bound to it starts again once bound to
// another Volume.
func TestSpecDeclaringLostNeedsEveryCurrentIncarnationIsolated(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		pools := []node.Pool{{Name: "doomed", Dir: t.TempDir()}, {Name: "other", Dir: t.TempDir()}}
		n := e.startNode("node-a", pools...)
		e.capacities("doomed", "other")
		e.c.UnbootableCatalog(t)
		lost, kept := e.availableVolume("v1", "doomed"), e.availableVolume("v2", "other")
		ws := e.createBound("create-1", lost)
		e.failedWithoutExecution(ws)

		e.isolate(n)
		n = e.c.StartNodeWithPools(t, "node-a", n.StateDir, pools...)
		if reg := e.c.Registration(t, "node-a"); reg.GetIsolated() {
			t.Fatalf("node-a back with incarnation %d still reads isolated", reg.GetIncarnation())
		}
		_, err := e.declareLost("lose-1", "doomed")
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "node-a") {
			t.Errorf("declaring lost with node-a back, not isolated: %v, want failed_precondition naming node-a", err)
		}
		if p := e.pool("doomed"); p.GetLostAt() != nil {
			t.Fatalf("a refused declaration changed the pool: %v", p)
		}
		n.Stop(t)
		reg := e.c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		if _, err := e.c.Nodes.IsolateNode(ctx, connect.NewRequest(&operatorv1.IsolateNodeRequest{
			Command: cmd("isolate-again"), NodeId: "node-a", Incarnation: reg.GetIncarnation(),
		})); err != nil {
			t.Fatal(err)
		}
		if res, err := e.declareLost("lose-1", "doomed"); err != nil || res.GetLostVolumes() != 1 {
			t.Fatalf("declaring lost with the current incarnation isolated: %v %v, want one lost Volume", res, err)
		}

		if _, err := e.moveVolume("move-lost", lost, "other"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("moving a LOST Volume: %v, want failed_precondition", err)
		}
		start := func(commandID string) error {
			_, err := e.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd(commandID), WorkspaceId: ws}))
			return err
		}
		if err := start("start-1"); apierr.DetailOf(err).GetReason() != ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST {
			t.Errorf("starting a Workspace bound to a lost Volume: %v, want VOLUME_LOST", err)
		}
		if _, err := e.c.Workspaces.UpdateWorkspaceVolumeBinding(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceVolumeBindingRequest{
			Command: cmd("rebind-1"), WorkspaceId: ws, ExpectedBindingRevision: e.workspace(ws).GetSpec().GetBindingRevision(),
			Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: kept},
		})); err != nil {
			t.Fatalf("binding the Workspace to another Volume: %v", err)
		}
		if err := start("start-2"); err != nil {
			t.Errorf("starting the Workspace once bound to another Volume: %v", err)
		}
	})
}

// createOn creates a Workspace without a Volume pinned to node, with a
// writable layer of layer bytes, and waits until its create failed: at
// PLACING when no node took it, or at boot on the node it was placed on
// (the catalog boots nothing).
func (e *env) createOn(commandID, node string, layer uint64) *ctrlv1.Workspace {
	e.t.Helper()
	res, err := e.c.Nodes.CreateWorkspaceOnNode(ctx, connect.NewRequest(&operatorv1.CreateWorkspaceOnNodeRequest{NodeId: node, Request: &ctrlv1.CreateWorkspaceRequest{
		Command: cmd(commandID),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 100, MemoryBytes: 128 * mib, WritableLayerCapacityBytes: layer},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE},
		},
	}}))
	if err != nil {
		e.t.Fatal(err)
	}
	id := res.Msg.GetResponse().GetWorkspace().GetWorkspaceId()
	e.failedWithoutExecution(id)
	return e.workspace(id)
}

// placedOn says whether w's create was placed on node: it failed booting
// there, not at PLACING.
func placedOn(w *ctrlv1.Workspace, node string) bool {
	f := w.GetFailure()
	return f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING && strings.HasPrefix(f.GetMessage(), "node "+node+":")
}

// A pool's capacity takes effect for the next placement of a writable
// layer on every node that reaches the pool, without a restart: none
// without a capacity, one on each node once set, none beyond it once
// lowered. A deleted Workspace's layer is not_found.
func TestSpecACapacityTakesEffectForLayersOnEveryNodeReachingThePool(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		shared := t.TempDir()
		e.startNode("node-a", node.Pool{Name: "shared", Dir: shared})
		e.startNode("node-b", node.Pool{Name: "shared", Dir: shared})
		e.c.UnbootableCatalog(t)

		if w := e.createOn("create-0", "node-b", 64*mib); w.GetFailure().GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING ||
			w.GetFailure().GetReason() != ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED {
			t.Errorf("a layer in a pool without capacity: %v, want RESOURCE_EXHAUSTED at PLACING", w.GetFailure())
		}
		if _, err := e.setCapacity("cap-1", "shared", 1, 128*mib); err != nil {
			t.Fatal(err)
		}
		onA, onB := e.createOn("create-a", "node-a", 64*mib), e.createOn("create-b", "node-b", 64*mib)
		if !placedOn(onA, "node-a") || !placedOn(onB, "node-b") {
			t.Errorf("layers once the capacity is set: %v on node-a, %v on node-b; want each placed", onA.GetFailure(), onB.GetFailure())
		}
		// Each create's first start removed the layer it made; a start that
		// finds the layer there keeps it, reserving its capacity.
		e.c.KeepLayer(t, onA.GetWorkspaceId(), shared, "node-a")
		e.c.KeepLayer(t, onB.GetWorkspaceId(), shared, "node-b")
		if p := e.pool("shared"); p.GetRetainedLayerCount() != 2 || p.GetReservedBytes() != 128*mib {
			t.Errorf("shared = %v, want 2 layers reserving 128 MiB", p)
		}

		if _, err := e.setCapacity("cap-2", "shared", 2, 192*mib); err != nil {
			t.Fatal(err)
		}
		if w := e.createOn("create-c", "node-b", 64*mib); !placedOn(w, "node-b") {
			t.Errorf("a layer within the raised capacity: %v, want it placed on node-b", w.GetFailure())
		}
		if _, err := e.setCapacity("cap-3", "shared", 3, 64*mib); err != nil {
			t.Fatal(err)
		}
		if w := e.createOn("create-d", "node-a", 64*mib); w.GetFailure().GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING {
			t.Errorf("a layer in a pool lowered below its reservation: %v, want it refused at PLACING", w.GetFailure())
		}

		if _, err := e.c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: cmd("delete-a"), WorkspaceId: onA.GetWorkspaceId()})); err != nil {
			t.Fatal(err)
		}
		if _, err := e.layerOf(onA.GetWorkspaceId()); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("the layer of a deleted Workspace: %v, want not_found", err)
		}
	})
}

// Commands that waited on a pool go on once it is declared lost: a
// creation or a growth of one of its Volumes fails with VOLUME_LOST, and
// the Volume reads LOST.
func TestSpecVolumeCommandsWaitingOnALostPoolFailAsVolumeLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		n := e.startNode("node-a", node.Pool{Name: "doomed", Dir: t.TempDir()})
		e.capacities("doomed")
		grown := e.availableVolume("v1", "doomed")
		n.Stop(t)
		e.c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		create := &ctrlv1.CreateVolumeRequest{Command: cmd("v2"), Spec: &ctrlv1.VolumeSpec{StoragePool: "doomed", CapacityBytes: 32 * mib}}
		created, err := e.c.Volumes.CreateVolume(ctx, connect.NewRequest(create))
		if err != nil {
			t.Fatal(err)
		}
		grow := &ctrlv1.ResizeVolumeRequest{Command: cmd("grow-1"), VolumeId: grown, CapacityBytes: 64 * mib}
		if _, err := e.c.Volumes.ResizeVolume(ctx, connect.NewRequest(grow)); err != nil {
			t.Fatal(err)
		}

		e.isolate(n)
		if res, err := e.declareLost("lose-1", "doomed"); err != nil || res.GetLostVolumes() != 2 {
			t.Fatalf("declaring the pool lost: %v %v, want both Volumes lost", res, err)
		}
		for _, id := range []string{grown, created.Msg.GetVolume().GetVolumeId()} {
			if got := e.volume(id).GetState(); got != ctrlv1.VolumeState_VOLUME_STATE_LOST {
				t.Errorf("volume %s: %v, want LOST", id, got)
			}
		}
		// The Volume API answers a replay with the Volume; the commands'
		// outcome is in ctrl's command records.
		for _, id := range []string{"v2", "grow-1"} {
			testenv.WaitFor(t, "command "+id+" to end", func() bool { return e.command(id).Final() })
			if c := e.command(id); c.GetState() != storev1.CommandState_COMMAND_STATE_FAILED || c.GetFailure().GetReason() != ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST {
				t.Errorf("command %s waiting on the lost pool: %v %v, want FAILED with VOLUME_LOST", id, c.GetState(), c.GetFailure())
			}
		}
	})
}

// command reads a command's record from ctrl's store.
func (e *env) command(id string) *store.CommandRow {
	e.t.Helper()
	var c *store.CommandRow
	if err := e.c.Ctrl.Store().Tx(ctx, func(tx *store.Tx) (err error) { c, err = tx.GetCommand(id, false); return }); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// lost_retained_layers counts the layers of Workspaces not deleted that
// were in the pool; those layers are forgotten (not_found) until a start
// places a new one.
func TestSpecALostPoolsLayersAreCountedAndForgotten(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		doomed := t.TempDir()
		n := e.startNode("node-a", node.Pool{Name: "doomed", Dir: doomed})
		e.capacities("doomed")
		e.c.UnbootableCatalog(t)
		kept := e.createOn("create-kept", "node-a", 64*mib)
		e.c.KeepLayer(t, kept.GetWorkspaceId(), doomed, "")
		gone := e.createOn("create-gone", "node-a", 64*mib)
		if _, err := e.c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: cmd("delete-gone"), WorkspaceId: gone.GetWorkspaceId()})); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "the deleted Workspace's layer removed", func() bool {
			return e.workspace(gone.GetWorkspaceId()).GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED
		})
		e.isolate(n)
		res, err := e.declareLost("lose-1", "doomed")
		if err != nil {
			t.Fatal(err)
		}
		if res.GetLostRetainedLayers() != 1 || res.GetPool().GetRetainedLayerCount() != 0 {
			t.Errorf("declaration: %v, want the one layer of a Workspace not deleted counted, none left", res)
		}
		if _, err := e.layerOf(kept.GetWorkspaceId()); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("the layer lost with its pool: %v, want not_found", err)
		}
	})
}

// A growth beyond the pool's capacity is refused as resource_exhausted
// with FAILURE_REASON_RESOURCE_EXHAUSTED, and the Volume keeps its size.
func TestSpecAGrowthBeyondThePoolsCapacityIsResourceExhausted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.startNode("node-a", node.Pool{Name: "pool-a", Dir: t.TempDir()})
		if _, err := e.setCapacity("cap-1", "pool-a", 1, 64*mib); err != nil {
			t.Fatal(err)
		}
		id := e.availableVolume("v1", "pool-a")
		_, err := e.c.Volumes.ResizeVolume(ctx, connect.NewRequest(&ctrlv1.ResizeVolumeRequest{Command: cmd("grow-1"), VolumeId: id, CapacityBytes: 128 * mib}))
		if d := apierr.DetailOf(err); connect.CodeOf(err) != connect.CodeResourceExhausted || d.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED {
			t.Errorf("growing beyond the pool's capacity: %v (%v), want resource_exhausted with RESOURCE_EXHAUSTED", err, d)
		}
		if v := e.volume(id); v.GetSpec().GetCapacityBytes() != 32*mib || e.pool("pool-a").GetReservedBytes() != 32*mib {
			t.Errorf("after a refused growth: %v, pool reserves %d; want 32 MiB both", v, e.pool("pool-a").GetReservedBytes())
		}
	})
}

// A first start that fails before it comes to the writable layer (here
// the template image cannot be fetched) leaves no layer either: the node
// says it never touched it, and no start made it before, so ctrl does not
// keep it placed.
func TestSpecAFirstStartFailingBeforeTheLayerLeavesNone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.nodeReachingTwoPools()
		image := e.c.UnbootableCatalog(t)
		path, err := e.c.Ctrl.Catalog().ArtifactPath(image)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(path); err != nil { // the node's fetch now fails
			t.Fatal(err)
		}
		ws := e.createWorkspace("create-1", 64*mib)
		e.failedWithoutExecution(ws)
		if msg := e.workspace(ws).GetFailure().GetMessage(); !strings.Contains(msg, image) {
			t.Fatalf("the start failed with %q, want the fetch of %s", msg, image)
		}
		if o, err := e.layerOf(ws); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("the layer of a first start that failed before it: %v %v, want not_found", o, err)
		}
		if p := e.pool("pool-a"); p.GetReservedBytes() != 0 || p.GetRetainedLayerCount() != 0 {
			t.Errorf("pool-a after the failed first start: %v; want nothing reserved", p)
		}
	})
}

// A first start that fails at boot leaves no writable layer: the node
// removes the one it made, so ctrl does not keep it placed (not listed in
// the pool, nothing reserved, no retained layer, nothing to move) and the
// next start places one anew. A layer that existed before a start that
// fails is kept by the node and stays placed: it is listed, reserves its
// capacity, and moves.
func TestSpecAFailedStartKeepsOnlyTheLayersThatRemain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		_, dirA, dirB := e.nodeReachingTwoPools()
		e.c.UnbootableCatalog(t)
		ws := e.createWorkspace("create-1", 64*mib)
		e.failedWithoutExecution(ws)
		if o, err := e.layerOf(ws); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("the layer of a first start that failed at boot: %v %v, want not_found", o, err)
		}
		if p := e.pool("pool-a"); p.GetReservedBytes() != 0 || p.GetRetainedLayerCount() != 0 || len(e.objects("pool-a")) != 0 {
			t.Errorf("pool-a after the failed first start: %v, objects %v; want nothing reserved or listed", p, e.objects("pool-a"))
		}
		if _, err := e.moveLayer("move-1", ws, "pool-b"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("moving the layer a failed first start removed: %v, want failed_precondition (no layer placed)", err)
		}

		// The next start places the layer anew, in the node's default
		// pool; finding its block file there already, it keeps it.
		e.c.KeepLayer(t, ws, dirA, "")
		layer, err := e.layerOf(ws)
		if err != nil || layer.GetStoragePool() != "pool-a" || layer.GetCapacityBytes() != 64*mib {
			t.Fatalf("a layer that existed before the failed start: %v %v, want it placed in pool-a with 64 MiB", layer, err)
		}
		if p := e.pool("pool-a"); p.GetReservedBytes() != 64*mib || p.GetRetainedLayerCount() != 1 {
			t.Errorf("pool-a with the kept layer: %v, want it reserving 64 MiB for one layer", p)
		}
		if o, err := e.moveLayer("move-2", ws, "pool-b"); err != nil || o.GetStoragePool() != "pool-b" {
			t.Errorf("moving the kept layer: %v %v, want it in pool-b", o, err)
		}
		if _, err := os.Stat(filepath.Join(dirB, "layers", ws+".img")); err != nil {
			t.Errorf("the moved layer's block file in pool-b: %v", err)
		}
	})
}
