package pool_test

// Spec sentences of MoveVolume and MoveWritableLayer the other move tests
// do not assert (docs/spec-coverage/pools.md).

import (
	"cmp"
	"context"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/testenv"
)

// createBound creates a Workspace bound to volumeID and returns its id.
func (e *env) createBound(commandID, volumeID string) string {
	e.t.Helper()
	res, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: cmd(commandID),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 100, MemoryBytes: 128 * mib, WritableLayerCapacityBytes: 64 * mib},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: volumeID},
		},
	}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.GetWorkspace().GetWorkspaceId()
}

// failedWithoutExecution waits until the Workspace's create failed on its
// node (the catalog boots nothing): FAILED, its execution released, its
// writable layer placed beside its Volume.
func (e *env) failedWithoutExecution(id string) {
	e.t.Helper()
	testenv.WaitFor(e.t, "workspace "+id+" to fail at boot", func() bool {
		return e.workspace(id).GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED
	})
}

// moveEnded waits until the move's command ended (the source copy
// removed): until then the Volume has a command in progress.
func (e *env) moveEnded(source string) {
	e.t.Helper()
	testenv.WaitFor(e.t, "the copy in "+source+" removed", func() bool { return e.pool(source).GetCleanupCount() == 0 })
}

func (e *env) moveLayer(commandID, workspaceID, pool string) (*operatorv1.StoragePoolObject, error) {
	res, err := e.c.Nodes.MoveWritableLayer(ctx, connect.NewRequest(&operatorv1.MoveWritableLayerRequest{Command: cmd(commandID), WorkspaceId: workspaceID, StoragePool: pool}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetObject(), nil
}

// A Workspace that FAILED with its execution released has none: its
// Volume moves, keeping its binding. A move after which no node reaches
// the Workspace's Volume and writable layer together is refused, for the
// Volume as for the layer, and changes nothing.
//
// node-a reaches pool-a and pool-c, node-b pool-c and pool-d, node-e
// pool-a and pool-e (a directory two nodes declare is a shared pool).
func TestSpecMovesKeepAWorkspacesVolumeAndLayerOnOneNode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		dirA, dirC := t.TempDir(), t.TempDir()
		e.startNode("node-a", node.Pool{Name: "pool-a", Dir: dirA}, node.Pool{Name: "pool-c", Dir: dirC})
		e.startNode("node-b", node.Pool{Name: "pool-c", Dir: dirC}, node.Pool{Name: "pool-d", Dir: t.TempDir()})
		e.startNode("node-e", node.Pool{Name: "pool-a", Dir: dirA}, node.Pool{Name: "pool-e", Dir: t.TempDir()})
		e.capacities("pool-a", "pool-c", "pool-d", "pool-e")
		e.c.UnbootableCatalog(t)
		vol := e.availableVolume("v1", "pool-a")
		ws := e.createBound("create-1", vol)
		e.failedWithoutExecution(ws)
		e.c.KeepLayer(t, ws, dirA, "")
		if layer, err := e.layerOf(ws); err != nil || layer.GetStoragePool() != "pool-a" {
			t.Fatalf("the layer kept by a failed start: %v %v, want it placed in pool-a beside its Volume", layer, err)
		}

		o, err := e.moveVolume("move-1", vol, "pool-c")
		if err != nil {
			t.Fatalf("moving the Volume of a Workspace FAILED with its execution released: %v", err)
		}
		if o.GetStoragePool() != "pool-c" || o.GetWorkspaceId() != ws {
			t.Errorf("moved object %v, want it in pool-c, still bound to %s", o, ws)
		}
		if v := e.volume(vol); v.GetBoundWorkspaceId() != ws || e.workspace(ws).GetSpec().GetVolume().GetVolumeId() != vol {
			t.Errorf("binding after the move: Volume bound to %q, want %s", v.GetBoundWorkspaceId(), ws)
		}
		e.moveEnded("pool-a")

		// node-b reaches pool-c and pool-d, but no node reaches pool-d and
		// the layer's pool-a.
		before := e.pool("pool-d")
		if _, err := e.moveVolume("move-2", vol, "pool-d"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("a move parting the Volume from its layer: %v, want failed_precondition", err)
		}
		// node-e reaches pool-a and pool-e, but no node pool-e and the
		// Volume's pool-c.
		if _, err := e.moveLayer("move-3", ws, "pool-e"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("a move parting the layer from its Volume: %v, want failed_precondition", err)
		}
		if v := e.volume(vol); v.GetSpec().GetStoragePool() != "pool-c" {
			t.Errorf("the Volume after a refused move lives in %q, want pool-c", v.GetSpec().GetStoragePool())
		}
		if layer, err := e.layerOf(ws); err != nil || layer.GetStoragePool() != "pool-a" || layer.GetMovingTo() != "" {
			t.Errorf("the layer after a refused move: %v %v, want it in pool-a, not moving", layer, err)
		}
		for name, p := range map[string]*operatorv1.StoragePool{"pool-d": before, "pool-e": e.pool("pool-e")} {
			if got := e.pool(name).GetReservedBytes(); got != p.GetReservedBytes() || got != 0 {
				t.Errorf("%s reserves %d after a refused move, want 0", name, got)
			}
		}
	})
}

// A Volume or Workspace with a command in progress answers unavailable
// and nothing moves; once the command is over the move is admitted. A
// layer no start placed yet does not move (failed_precondition).
func TestSpecMovesWaitForCommandsInProgress(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		pools := []node.Pool{{Name: "pool-a", Dir: t.TempDir()}, {Name: "pool-b", Dir: t.TempDir()}}
		n := e.startNode("node-a", pools...)
		e.capacities("pool-a", "pool-b")
		e.c.UnbootableCatalog(t)
		vol := e.availableVolume("v1", "pool-a")
		// With the node down, a Volume's creation and a Workspace's create
		// wait for it, in progress.
		n.Stop(t)
		e.c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		ws := e.createBound("create-1", vol)
		creating, err := e.createVolume("v2", "pool-a", 32*mib)
		if err != nil {
			t.Fatal(err)
		}
		for what, id := range map[string]string{"the Volume of a Workspace whose create is in progress": vol, "a Volume whose creation is in progress": creating.GetVolumeId()} {
			_, err := e.moveVolume("move-"+id, id, "pool-b")
			if connect.CodeOf(err) != connect.CodeUnavailable || apierr.DetailOf(err).GetCommandId() != "" {
				t.Errorf("moving %s: %v, want unavailable (not the move's own wait)", what, err)
			}
			if o := objectIn(err); o.GetVolumeId() != id || o.GetStoragePool() != "pool-a" || o.GetMovingTo() != "" {
				t.Errorf("the object in the error: %v, want Volume %s in pool-a, not moving", o, id)
			}
		}
		if _, err := e.moveLayer("move-layer", ws, "pool-b"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("moving a writable layer no start placed: %v, want failed_precondition", err)
		}
		if p := e.pool("pool-b"); p.GetReservedBytes() != 0 {
			t.Errorf("pool-b reserves %d after refused moves, want 0", p.GetReservedBytes())
		}

		// The node is back: the creation ends, the create fails at boot,
		// and both Volumes move.
		e.c.StartNodeWithPools(t, "node-a", n.StateDir, pools...)
		e.waitVolume(creating.GetVolumeId(), ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE)
		e.failedWithoutExecution(ws)
		for _, id := range []string{vol, creating.GetVolumeId()} {
			if o, err := e.moveVolume("move-"+id, id, "pool-b"); err != nil || o.GetStoragePool() != "pool-b" {
				t.Errorf("moving %s once its command is over: %v %v", id, o, err)
			}
		}
	})
}

// allocated is how many bytes a file takes on disk.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

// The copy takes the blocks the Volume's filesystem uses, not its
// capacity.
func TestSpecAMoveCopiesTheBlocksInUse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		_, dirA, dirB := e.nodeReachingTwoPools()
		id := e.availableVolumeOf("v1", "pool-a", 256*mib)
		for i := range 4 * mib / 4096 {
			writeAt(t, volumeFile(dirA, id), []byte("used"), int64(100*mib+i*4096))
		}
		inUse := allocated(t, volumeFile(dirA, id))
		if _, err := e.moveVolume("move-1", id, "pool-b"); err != nil {
			t.Fatal(err)
		}
		if got := allocated(t, volumeFile(dirB, id)); got > inUse || got >= 128*mib {
			t.Errorf("the copy takes %d bytes on disk; the source took %d of its %d", got, inUse, 256*mib)
		}
	})
}

// While a Volume moves (its node down, the copy waiting) it is listed in
// its source pool only, with the pool it moves to; binding it and
// releasing it answer unavailable, and its Workspace does not start. A
// writable layer moving meanwhile reserves its capacity in both pools, its
// call answers unavailable with the object in the details, and its
// Workspace does not start either.
func TestSpecWhileObjectsMoveTheyStayInTheirSourcePool(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		n, dirA, _ := e.nodeReachingTwoPools()
		e.c.UnbootableCatalog(t)
		bound, free := e.availableVolume("v1", "pool-a"), e.availableVolume("v2", "pool-a")
		ws := e.createBound("create-1", bound)
		e.failedWithoutExecution(ws)
		e.c.KeepLayer(t, ws, dirA, "")
		lone := e.createWorkspace("create-lone", 64*mib) // no Volume: its layer goes to pool-a, the default
		e.failedWithoutExecution(lone)
		e.c.KeepLayer(t, lone, dirA, "")
		n.Stop(t)
		e.c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)

		// Each move gets a deadline of its own: it waits for the move to
		// settle until a second short of it, so calls sharing one deadline
		// would leave the later ones none on a loaded machine.
		short := func() context.Context {
			c, cancel := context.WithTimeout(ctx, 3*time.Second)
			t.Cleanup(cancel)
			return c
		}
		for _, id := range []string{bound, free} {
			_, err := e.c.Nodes.MoveVolume(short(), connect.NewRequest(&operatorv1.MoveVolumeRequest{Command: cmd("move-" + id), VolumeId: id, StoragePool: "pool-b"}))
			if connect.CodeOf(err) != connect.CodeUnavailable || objectIn(err).GetMovingTo() != "pool-b" {
				t.Fatalf("moving %s with its node down: %v, want unavailable while it moves", id, err)
			}
		}
		if objs := e.objects("pool-b"); len(objs) != 0 {
			t.Errorf("pool-b lists %v while the Volumes move into it, want nothing", objs)
		}
		// Ordered by kind, then by volume_id or workspace_id.
		if objs := e.objects("pool-a"); len(objs) != 4 || !slices.IsSortedFunc(objs, byKindThenID) ||
			objs[1].GetKind() != operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_VOLUME ||
			objs[2].GetKind() != operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_WRITABLE_LAYER {
			t.Errorf("pool-a lists %v while they move, want both Volumes then both layers, each by id", objs)
		}
		layers, err := e.listObjects(&operatorv1.ListStoragePoolObjectsRequest{StoragePool: "pool-a", Kind: operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_WRITABLE_LAYER})
		if err != nil || len(layers.GetObjects()) != 2 || layers.GetObjects()[0].GetKind() != operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_WRITABLE_LAYER {
			t.Errorf("pool-a's writable layers: %v %v, want the two layers only", layers, err)
		}
		for _, o := range e.objects("pool-a") {
			if o.GetKind() == operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_VOLUME && o.GetMovingTo() != "pool-b" {
				t.Errorf("%v: want it moving to pool-b", o)
			}
			if o.GetVolumeId() == free && o.GetWorkspaceId() != "" {
				t.Errorf("a Volume bound to none names workspace %q", o.GetWorkspaceId())
			}
		}

		// Bound: by a new Workspace. Released: by its Workspace.
		_, err = e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
			Command: cmd("create-2"),
			Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: 100, MemoryBytes: 128 * mib},
				Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: free}},
		}))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("binding a moving Volume: %v, want unavailable", err)
		}
		_, err = e.c.Workspaces.UpdateWorkspaceVolumeBinding(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceVolumeBindingRequest{
			Command: cmd("unbind-1"), WorkspaceId: ws, ExpectedBindingRevision: e.workspace(ws).GetSpec().GetBindingRevision(),
			Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE},
		}))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("releasing a moving Volume: %v, want unavailable", err)
		}
		if got := e.volume(bound).GetBoundWorkspaceId(); got != ws {
			t.Errorf("the moving Volume is bound to %q, want %s still", got, ws)
		}
		_, err = e.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd("start-1"), WorkspaceId: ws}))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("starting a Workspace whose Volume moves: %v, want unavailable", err)
		}

		// A layer moves; meanwhile its Workspace does not start.
		layer, err := e.layerOf(lone)
		if err != nil {
			t.Fatal(err)
		}
		reservedB := e.pool("pool-b").GetReservedBytes()
		_, err = e.c.Nodes.MoveWritableLayer(short(), connect.NewRequest(&operatorv1.MoveWritableLayerRequest{Command: cmd("move-layer"), WorkspaceId: lone, StoragePool: "pool-b"}))
		if o := objectIn(err); connect.CodeOf(err) != connect.CodeUnavailable || o.GetKind() != operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_WRITABLE_LAYER ||
			o.GetStoragePool() != "pool-a" || o.GetMovingTo() != "pool-b" || o.GetMoveCommandId() != "move-layer" {
			t.Errorf("moving the layer with its node down: %v (object %v), want unavailable with the layer moving to pool-b", err, o)
		}
		if got := e.pool("pool-b").GetReservedBytes(); got != reservedB+layer.GetCapacityBytes() {
			t.Errorf("pool-b reserves %d with the layer moving in, want %d", got, reservedB+layer.GetCapacityBytes())
		}
		if got := e.pool("pool-a").GetReservedBytes(); got != 2*32*mib+2*64*mib {
			t.Errorf("pool-a reserves %d while its objects move out, want them all (%d)", got, 2*32*mib+2*64*mib)
		}
		_, err = e.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd("start-2"), WorkspaceId: lone}))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("starting a Workspace whose layer moves: %v, want unavailable", err)
		}
	})
}

// A move that failed leaves what it wrote in the target as the target's
// cleanup: pool-b counts it in cleanup_count, reserving nothing, until a
// node removed it. (A non-empty directory where the copy's temporary file
// goes makes both the copy and the removal fail; the removal is retried.)
func TestSpecAFailedMovesTargetCopyCountsUntilRemoved(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		_, _, dirB := e.nodeReachingTwoPools()
		id := e.availableVolume("v1", "pool-a")
		target := volumeFile(dirB, id)
		obstacle := obstruct(t, target)
		if _, err := e.moveVolume("move-1", id, "pool-b"); err == nil {
			t.Fatal("a copy into an obstructed target succeeded")
		}
		if got := e.volume(id).GetSpec().GetStoragePool(); got != "pool-a" {
			t.Errorf("the Volume after the failed move lives in %q, want pool-a", got)
		}
		if p := e.pool("pool-b"); p.GetCleanupCount() != 1 || p.GetReservedBytes() != 0 || p.GetVolumeCount() != 0 {
			t.Errorf("pool-b after the failed move: %v, want its copy counted in cleanup_count, nothing reserved", p)
		}
		if err := os.RemoveAll(obstacle); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "pool-b's copy removed", func() bool { return e.pool("pool-b").GetCleanupCount() == 0 })
		if o, err := e.moveVolume("move-2", id, "pool-b"); err != nil || o.GetStoragePool() != "pool-b" {
			t.Errorf("the move once pool-b keeps no copy: %v %v", o, err)
		}
	})
}

// byKindThenID orders objects as ListStoragePoolObjects does.
func byKindThenID(a, b *operatorv1.StoragePoolObject) int {
	if c := cmp.Compare(a.GetKind(), b.GetKind()); c != 0 {
		return c
	}
	return cmp.Compare(objectID(a), objectID(b))
}

func objectID(o *operatorv1.StoragePoolObject) string {
	if o.GetKind() == operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_VOLUME {
		return o.GetVolumeId()
	}
	return o.GetWorkspaceId()
}
