package pool_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/pool"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

func (e *env) moveVolume(commandID, volumeID, pool string) (*operatorv1.StoragePoolObject, error) {
	res, err := e.c.Nodes.MoveVolume(ctx, connect.NewRequest(&operatorv1.MoveVolumeRequest{Command: cmd(commandID), VolumeId: volumeID, StoragePool: pool}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetObject(), nil
}

func volumeFile(dir, id string) string { return filepath.Join(dir, "volumes", id+".img") }

// obstruct puts a non-empty directory where a node writes the temporary
// file of the block file at path: no copy to path and no removal of path
// gets past it. It returns the obstacle, for the test to remove.
func obstruct(t *testing.T, path string) string {
	t.Helper()
	obstacle := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.MkdirAll(filepath.Join(obstacle, "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	return obstacle
}

// writeAt writes data into a Volume's block file, as a guest would.
func writeAt(t *testing.T, path string, data []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *env) capacities(pools ...string) {
	e.t.Helper()
	for _, p := range pools {
		if _, err := e.setCapacity("cap-"+p, p, 1, gib); err != nil {
			e.t.Fatal(err)
		}
	}
}

// A node reaching two pools moves a Volume's content from one to the
// other: the Volume lives in the target, the source copy is counted in
// cleanup_count until the node removed it, and the same command_id answers
// the settled move again.
func TestMoveVolumeBetweenTwoPoolsOfOneNode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		_, dirA, dirB := e.nodeReachingTwoPools()
		id := e.availableVolumeOf("v1", "pool-a", 64*mib)
		writeAt(t, volumeFile(dirA, id), bytes.Repeat([]byte("kibotos "), 1<<17), 40*mib)
		want := readFile(t, volumeFile(dirA, id))

		o, err := e.moveVolume("move-1", id, "pool-b")
		if err != nil {
			t.Fatal(err)
		}
		if o.GetStoragePool() != "pool-b" || o.GetMovingTo() != "" || o.GetVolumeId() != id || o.GetCapacityBytes() != 64*mib {
			t.Fatalf("moved object %v", o)
		}
		if got := e.volume(id); got.GetSpec().GetStoragePool() != "pool-b" || got.GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
			t.Fatalf("volume after the move %v", got)
		}
		if !bytes.Equal(readFile(t, volumeFile(dirB, id)), want) {
			t.Fatal("the Volume's content in pool-b differs from what it held in pool-a")
		}
		if b := e.pool("pool-b"); b.GetReservedBytes() != 64*mib || b.GetVolumeCount() != 1 {
			t.Errorf("pool-b after the move %v", b)
		}
		// The source copy goes; until then pool-a counts it as a cleanup.
		testenv.WaitFor(t, "the source copy removed", func() bool {
			_, err := os.Stat(volumeFile(dirA, id))
			return errors.Is(err, os.ErrNotExist) && e.pool("pool-a").GetCleanupCount() == 0
		})
		if a := e.pool("pool-a"); a.GetReservedBytes() != 0 || a.GetVolumeCount() != 0 {
			t.Errorf("pool-a after the move %v", a)
		}

		again, err := e.moveVolume("move-1", id, "pool-b")
		if err != nil || !proto.Equal(again, o) {
			t.Fatalf("replay answered %v, %v; want %v", again, err, o)
		}
		// A Volume already in the target pool is answered at once.
		if o, err := e.moveVolume("move-2", id, "pool-b"); err != nil || o.GetStoragePool() != "pool-b" {
			t.Fatalf("move to its own pool: %v, %v", o, err)
		}
		// And it moves back.
		if o, err := e.moveVolume("move-3", id, "pool-a"); err != nil || o.GetStoragePool() != "pool-a" {
			t.Fatalf("move back: %v, %v", o, err)
		}
		if !bytes.Equal(readFile(t, volumeFile(dirA, id)), want) {
			t.Fatal("the Volume's content differs after moving back")
		}
	})
}

// A directory declared by two nodes stands in for shared storage: a Volume
// moves from one node's local pool to the shared one (copied by that
// node), then on to the other node's local pool (copied by the other).
func TestMoveVolumeThroughSharedPool(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		localA, shared, localB := t.TempDir(), t.TempDir(), t.TempDir()
		e.startNode("node-a", node.Pool{Name: "local-a", Dir: localA}, node.Pool{Name: "shared", Dir: shared})
		e.startNode("node-b", node.Pool{Name: "local-b", Dir: localB}, node.Pool{Name: "shared", Dir: shared})
		e.capacities("local-a", "shared", "local-b")
		id := e.availableVolume("v1", "local-a")
		writeAt(t, volumeFile(localA, id), []byte("shared storage"), 20*mib)
		want := readFile(t, volumeFile(localA, id))

		// No node reaches local-a and local-b together.
		_, err := e.moveVolume("direct", id, "local-b")
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("move between pools no node reaches together: %v, want failed_precondition", err)
		}
		for i, hop := range [][2]string{{"local-a", "shared"}, {"shared", "local-b"}} {
			o, err := e.moveVolume("hop-"+hop[1], id, hop[1])
			if err != nil || o.GetStoragePool() != hop[1] {
				t.Fatalf("hop %d to %s: %v, %v", i, hop[1], o, err)
			}
			// The move's command ends once the source's copy is removed;
			// until then the Volume answers unavailable.
			testenv.WaitFor(t, "the copy in "+hop[0]+" removed", func() bool { return e.pool(hop[0]).GetCleanupCount() == 0 })
		}
		if !bytes.Equal(readFile(t, volumeFile(localB, id)), want) {
			t.Fatal("the Volume's content in local-b differs")
		}
		for _, dir := range []string{localA, shared} {
			if _, err := os.Stat(volumeFile(dir, id)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a copy left in %s: %v", dir, err)
			}
		}
	})
}

// Bad input and every refusal answer their code and change nothing: the
// Volume stays in its pool and no pool reserves more.
func TestMoveVolumeRefusals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		dirA := t.TempDir()
		e.startNode("node-a", node.Pool{Name: "pool-a", Dir: dirA}, node.Pool{Name: "pool-b", Dir: t.TempDir()},
			node.Pool{Name: "small", Dir: t.TempDir()}, node.Pool{Name: "nocap", Dir: t.TempDir()})
		e.startNode("node-b", node.Pool{Name: "elsewhere", Dir: t.TempDir()})
		e.isolate(e.startNode("node-c", node.Pool{Name: "gone", Dir: t.TempDir()}))
		e.capacities("pool-a", "pool-b", "elsewhere", "gone")
		if _, err := e.setCapacity("cap-small", "small", 1, 16*mib); err != nil {
			t.Fatal(err)
		}
		id := e.availableVolume("v1", "pool-a")
		if _, err := e.declareLost("lose", "gone"); err != nil {
			t.Fatal(err)
		}
		before := map[string]*operatorv1.StoragePool{}
		for _, p := range []string{"pool-a", "pool-b", "small", "nocap", "elsewhere"} {
			before[p] = e.pool(p)
		}
		for _, tc := range []struct {
			name  string
			req   *operatorv1.MoveVolumeRequest
			code  connect.Code
			field string
		}{
			{"no command", &operatorv1.MoveVolumeRequest{VolumeId: id, StoragePool: "pool-b"}, connect.CodeInvalidArgument, "command.command_id"},
			{"no volume", &operatorv1.MoveVolumeRequest{Command: cmd("c1"), StoragePool: "pool-b"}, connect.CodeInvalidArgument, "volume_id"},
			{"no pool", &operatorv1.MoveVolumeRequest{Command: cmd("c2"), VolumeId: id}, connect.CodeInvalidArgument, "storage_pool"},
			{"bad pool", &operatorv1.MoveVolumeRequest{Command: cmd("c3"), VolumeId: id, StoragePool: "Pool B"}, connect.CodeInvalidArgument, "storage_pool"},
			{"unknown volume", &operatorv1.MoveVolumeRequest{Command: cmd("c4"), VolumeId: "vol-nope", StoragePool: "pool-b"}, connect.CodeNotFound, ""},
			{"unknown pool", &operatorv1.MoveVolumeRequest{Command: cmd("c5"), VolumeId: id, StoragePool: "nowhere"}, connect.CodeNotFound, ""},
			{"no room", &operatorv1.MoveVolumeRequest{Command: cmd("c6"), VolumeId: id, StoragePool: "small"}, connect.CodeResourceExhausted, ""},
			{"no capacity", &operatorv1.MoveVolumeRequest{Command: cmd("c7"), VolumeId: id, StoragePool: "nocap"}, connect.CodeResourceExhausted, ""},
			{"not reached together", &operatorv1.MoveVolumeRequest{Command: cmd("c8"), VolumeId: id, StoragePool: "elsewhere"}, connect.CodeFailedPrecondition, ""},
			{"lost pool", &operatorv1.MoveVolumeRequest{Command: cmd("c9"), VolumeId: id, StoragePool: "gone"}, connect.CodeFailedPrecondition, ""},
		} {
			_, err := e.c.Nodes.MoveVolume(ctx, connect.NewRequest(tc.req))
			if connect.CodeOf(err) != tc.code || apierr.FieldOf(err) != tc.field {
				t.Errorf("%s: %v (field %q), want %v (field %q)", tc.name, err, apierr.FieldOf(err), tc.code, tc.field)
			}
		}
		if got := e.volume(id); got.GetSpec().GetStoragePool() != "pool-a" || got.GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
			t.Errorf("volume after refusals %v", got)
		}
		for name, p := range before {
			if after := e.pool(name); after.GetReservedBytes() != p.GetReservedBytes() || after.GetCleanupCount() != p.GetCleanupCount() {
				t.Errorf("pool %s: %v after refusals, was %v", name, after, p)
			}
		}
		if _, err := os.Stat(volumeFile(dirA, id)); err != nil {
			t.Errorf("the Volume's file after refusals: %v", err)
		}
		for _, tc := range []struct {
			req   *operatorv1.MoveWritableLayerRequest
			code  connect.Code
			field string
		}{
			{&operatorv1.MoveWritableLayerRequest{Command: cmd("l1"), StoragePool: "pool-b"}, connect.CodeInvalidArgument, "workspace_id"},
			{&operatorv1.MoveWritableLayerRequest{Command: cmd("l2"), WorkspaceId: "ws-nope"}, connect.CodeInvalidArgument, "storage_pool"},
			{&operatorv1.MoveWritableLayerRequest{WorkspaceId: "ws-nope", StoragePool: "pool-b"}, connect.CodeInvalidArgument, "command.command_id"},
			{&operatorv1.MoveWritableLayerRequest{Command: cmd("l3"), WorkspaceId: "ws-nope", StoragePool: "pool-b"}, connect.CodeNotFound, ""},
		} {
			_, err := e.c.Nodes.MoveWritableLayer(ctx, connect.NewRequest(tc.req))
			if connect.CodeOf(err) != tc.code || apierr.FieldOf(err) != tc.field {
				t.Errorf("MoveWritableLayer %v: %v (field %q), want %v (field %q)", tc.req, err, apierr.FieldOf(err), tc.code, tc.field)
			}
		}
		// A refused command_id was not admitted: it serves a valid move.
		if o, err := e.moveVolume("c6", id, "pool-b"); err != nil || o.GetStoragePool() != "pool-b" {
			t.Fatalf("a refused command_id reused: %v, %v", o, err)
		}
	})
}

// objectIn is the StoragePoolObject an error carries in its details.
func objectIn(err error) *operatorv1.StoragePoolObject {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return nil
	}
	for _, d := range cerr.Details() {
		if v, err := d.Value(); err == nil {
			if o, ok := v.(*operatorv1.StoragePoolObject); ok {
				return o
			}
		}
	}
	return nil
}

// A move no node can copy yet (its node is down) reserves the Volume's
// capacity in both pools, answers unavailable with the object in the error
// details once the request's deadline nears, keeps the Volume from being
// resized or deleted, and settles when the same command_id is called again
// after the node is back.
func TestMoveVolumeWaitsAndTheSameCommandWaitsAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		dirA, dirB := t.TempDir(), t.TempDir()
		pools := []node.Pool{{Name: "pool-a", Dir: dirA}, {Name: "pool-b", Dir: dirB}}
		n := e.startNode("node-a", pools...)
		e.capacities("pool-a", "pool-b")
		id := e.availableVolume("v1", "pool-a")
		n.Stop(t)
		e.c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)

		short, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		start := time.Now()
		_, err := e.c.Nodes.MoveVolume(short, connect.NewRequest(&operatorv1.MoveVolumeRequest{Command: cmd("move-1"), VolumeId: id, StoragePool: "pool-b"}))
		// Past the deadline the client would read deadline_exceeded.
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("move without a node: %v after %v, want unavailable before the deadline", err, time.Since(start))
		}
		o := objectIn(err)
		if o.GetStoragePool() != "pool-a" || o.GetMovingTo() != "pool-b" || o.GetMoveCommandId() != "move-1" {
			t.Fatalf("object in the error %v", o)
		}
		// Listed in its source pool with the pool it moves to.
		got, err := e.c.Nodes.GetStoragePoolObject(ctx, connect.NewRequest(&operatorv1.GetStoragePoolObjectRequest{
			Object: &operatorv1.GetStoragePoolObjectRequest_VolumeId{VolumeId: id}}))
		if err != nil || !proto.Equal(got.Msg.GetObject(), o) {
			t.Errorf("GetStoragePoolObject while moving: %v, %v; want %v", got, err, o)
		}
		listed, err := e.listObjects(&operatorv1.ListStoragePoolObjectsRequest{StoragePool: "pool-a"})
		if err != nil || len(listed.GetObjects()) != 1 || !proto.Equal(listed.GetObjects()[0], o) {
			t.Errorf("pool-a's objects while moving: %v, %v; want %v", listed, err, o)
		}
		for _, p := range []string{"pool-a", "pool-b"} {
			if got := e.pool(p).GetReservedBytes(); got != 32*mib {
				t.Errorf("%s reserves %d while the Volume moves, want %d", p, got, 32*mib)
			}
		}
		_, err = e.c.Volumes.ResizeVolume(ctx, connect.NewRequest(&ctrlv1.ResizeVolumeRequest{Command: cmd("grow"), VolumeId: id, CapacityBytes: 64 * mib}))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("resize while moving: %v, want unavailable", err)
		}
		_, err = e.c.Volumes.DeleteVolume(ctx, connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: cmd("del"), VolumeId: id}))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("delete while moving: %v, want unavailable", err)
		}

		e.c.StartNodeWithPools(t, "node-a", n.StateDir, pools...)
		o, err = e.moveVolume("move-1", id, "pool-b")
		if err != nil || o.GetStoragePool() != "pool-b" || o.GetMovingTo() != "" {
			t.Fatalf("the same command_id again: %v, %v", o, err)
		}
		testenv.WaitFor(t, "pool-a's copy removed", func() bool { return e.pool("pool-a").GetCleanupCount() == 0 })
		if a, b := e.pool("pool-a").GetReservedBytes(), e.pool("pool-b").GetReservedBytes(); a != 0 || b != 32*mib {
			t.Errorf("after the move pool-a reserves %d, pool-b %d", a, b)
		}
	})
}

// A move call with no deadline waits for its move at most the move wait
// (one minute by default, as the reference says; shortened here), then
// answers unavailable with the object as it stands.
func TestAMoveCallWaitsAtMostTheMoveWait(t *testing.T) {
	if pool.MoveWait != time.Minute {
		t.Errorf("the default move wait is %v, want one minute", pool.MoveWait)
	}
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b, testenv.WithMoveWait(2*time.Second))
			pools := []node.Pool{{Name: "pool-a", Dir: t.TempDir()}, {Name: "pool-b", Dir: t.TempDir()}}
			n := e.startNode("node-a", pools...)
			e.capacities("pool-a", "pool-b")
			id := e.availableVolume("v1", "pool-a")
			n.Stop(t)
			e.c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)

			// No deadline: only the move wait ends the call.
			start := time.Now()
			_, err := e.c.Nodes.MoveVolume(context.Background(), connect.NewRequest(&operatorv1.MoveVolumeRequest{Command: cmd("move-1"), VolumeId: id, StoragePool: "pool-b"}))
			if connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("a move that cannot settle: %v, want unavailable", err)
			}
			if waited := time.Since(start); waited < 2*time.Second {
				t.Errorf("the call answered after %v, before the move wait ended", waited)
			}
			if o := objectIn(err); o.GetStoragePool() != "pool-a" || o.GetMovingTo() != "pool-b" {
				t.Errorf("object in the error %v, want in pool-a moving to pool-b", o)
			}
		})
	}
}

// A copy that fails (the source's block file went missing behind ctrl's
// back) leaves the Volume in its pool: the call answers the failure, the
// target reserves and keeps nothing, and the Volume can be moved again.
func TestMoveVolumeThatFailsLeavesItInItsPool(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		_, dirA, _ := e.nodeReachingTwoPools()
		id := e.availableVolume("v1", "pool-a")
		path := volumeFile(dirA, id)
		if err := os.Rename(path, path+".aside"); err != nil {
			t.Fatal(err)
		}
		_, err := e.moveVolume("move-1", id, "pool-b")
		if connect.CodeOf(err) != connect.CodeNotFound || apierr.DetailOf(err).GetCommandId() != "move-1" {
			t.Fatalf("move of a Volume whose file is gone: %v, want not_found naming the command", err)
		}
		if got := e.volume(id); got.GetSpec().GetStoragePool() != "pool-a" {
			t.Fatalf("volume after a failed move %v", got)
		}
		if b := e.pool("pool-b"); b.GetReservedBytes() != 0 || b.GetCleanupCount() != 0 || b.GetVolumeCount() != 0 {
			t.Errorf("pool-b after a failed move %v", b)
		}
		// The same command_id answers the same failure.
		if _, again := e.moveVolume("move-1", id, "pool-b"); connect.CodeOf(again) != connect.CodeNotFound {
			t.Errorf("the failed move's command again: %v", again)
		}
		if err := os.Rename(path+".aside", path); err != nil {
			t.Fatal(err)
		}
		if o, err := e.moveVolume("move-2", id, "pool-b"); err != nil || o.GetStoragePool() != "pool-b" {
			t.Fatalf("a new move once the file is back: %v, %v", o, err)
		}
	})
}

// A move waiting for its node fails when its target pool is declared
// lost: the Volume stays in its pool and the move no longer holds it.
func TestMoveVolumeFailsWhenItsTargetIsDeclaredLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		n, _, _ := e.nodeReachingTwoPools()
		id := e.availableVolume("v1", "pool-a")
		e.isolate(n)
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := e.c.Nodes.MoveVolume(short, connect.NewRequest(&operatorv1.MoveVolumeRequest{Command: cmd("move-1"), VolumeId: id, StoragePool: "pool-b"}))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("move with no node: %v, want unavailable", err)
		}
		if _, err := e.declareLost("lose-b", "pool-b"); err != nil {
			t.Fatal(err)
		}
		_, err = e.moveVolume("move-1", id, "pool-b")
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || apierr.DetailOf(err).GetReason() != ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST {
			t.Fatalf("the move once its target is lost: %v, want failed_precondition VOLUME_LOST", err)
		}
		if got := e.volume(id); got.GetSpec().GetStoragePool() != "pool-a" {
			t.Errorf("volume after the failed move %v", got)
		}
		if _, err := e.c.Volumes.ResizeVolume(ctx, connect.NewRequest(&ctrlv1.ResizeVolumeRequest{Command: cmd("grow"), VolumeId: id, CapacityBytes: 64 * mib})); connect.CodeOf(err) == connect.CodeUnavailable {
			t.Errorf("the failed move still holds the Volume: %v", err)
		}
	})
}

// The removal of the source copy a move left is retried until it succeeds:
// while the node cannot remove it (here a non-empty directory stands where
// the block file's temporary file goes, which no removal gets past), the
// move has settled, the Volume takes other commands, pool-a counts the
// copy in cleanup_count and refuses the Volume back; once the obstacle is
// gone a retry removes the copy, and the Volume moves back.
func TestMoveRetriesTheRemovalOfTheSourceCopyUntilItSucceeds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		_, dirA, _ := e.nodeReachingTwoPools()
		id := e.availableVolume("v1", "pool-a")
		source := volumeFile(dirA, id)
		obstacle := obstruct(t, source)

		if o, err := e.moveVolume("move-1", id, "pool-b"); err != nil || o.GetStoragePool() != "pool-b" {
			t.Fatalf("move: %v, %v", o, err)
		}
		// The first removal took the block file and failed on the
		// obstacle; the move ended all the same.
		testenv.WaitFor(t, "the move to end after its removal failed", func() bool {
			var final bool
			if err := e.c.Ctrl.Store().Tx(ctx, func(tx *store.Tx) error {
				c, err := tx.GetCommand("move-1", false)
				final = err == nil && c.Final()
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return final
		})
		if _, err := os.Stat(source); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the source copy after the first removal: %v", err)
		}
		if got := e.pool("pool-a").GetCleanupCount(); got != 1 {
			t.Fatalf("pool-a's cleanup_count while its copy cannot be removed: %d, want 1", got)
		}
		if _, err := e.moveVolume("move-back-1", id, "pool-a"); connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("a move back into a pool still keeping a copy: %v, want unavailable", err)
		}
		if _, err := e.c.Volumes.ResizeVolume(ctx, connect.NewRequest(&ctrlv1.ResizeVolumeRequest{
			Command: cmd("resize-1"), VolumeId: id, CapacityBytes: 48 * mib,
		})); err != nil {
			t.Errorf("a resize while the removal is retried: %v", err)
		}
		testenv.WaitFor(t, "the resize", func() bool { return e.volume(id).GetSpec().GetCapacityBytes() == 48*mib })

		if err := os.RemoveAll(obstacle); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "a retry to remove the source copy", func() bool { return e.pool("pool-a").GetCleanupCount() == 0 })
		if o, err := e.moveVolume("move-back-2", id, "pool-a"); err != nil || o.GetStoragePool() != "pool-a" {
			t.Fatalf("move back once the copy is removed: %v, %v", o, err)
		}
	})
}
