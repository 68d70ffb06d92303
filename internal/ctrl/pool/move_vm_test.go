package pool_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

func (e *env) files() ctrlv1connect.FileServiceClient {
	srv := e.c.Ctrl
	return ctrlv1connect.NewFileServiceClient(http.DefaultClient, srv.Client.WorkspaceEndpoint, connect.WithInterceptors(auth.Bearer(srv.Client.Token)))
}

func (e *env) writeGuestFile(id, path string, content []byte) {
	e.t.Helper()
	w := e.files().WriteFile(ctx)
	size := uint64(len(content))
	_ = w.Send(&ctrlv1.WriteFileRequest{WorkspaceId: id, Frame: &ctrlv1.WriteFileRequest_Header{Header: &ctrlv1.WriteFileHeader{
		Path: path, CreateParents: true, Mode: 0o644, SizeBytes: &size}}})
	_ = w.Send(&ctrlv1.WriteFileRequest{Frame: &ctrlv1.WriteFileRequest_Data{Data: content}})
	if _, err := w.CloseAndReceive(); err != nil {
		e.t.Fatalf("write %s: %v", path, err)
	}
}

func (e *env) readGuestFile(id, path string) []byte {
	e.t.Helper()
	r, err := e.files().ReadFile(ctx, connect.NewRequest(&ctrlv1.ReadFileRequest{WorkspaceId: id, Path: path}))
	if err != nil {
		e.t.Fatal(err)
	}
	var got []byte
	for r.Receive() {
		got = append(got, r.Msg().GetData()...)
	}
	if r.Err() != nil {
		e.t.Fatalf("read %s: %v", path, r.Err())
	}
	return got
}

func (e *env) lifecycle(id, commandID string, start bool) {
	e.t.Helper()
	var err error
	if start {
		_, err = e.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd(commandID), WorkspaceId: id}))
	} else {
		_, err = e.c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmd(commandID), WorkspaceId: id}))
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

// On a real microVM: data written to a Workspace's Volume and to its
// writable layer is there again after the Workspace was stopped, both were
// moved to another pool, and it started again from there. A running
// Workspace's Volume and layer do not move, and a Workspace whose Volume
// moves does not start.
func TestMoveVolumeAndLayerOfAStoppedWorkspaceOnARealVM(t *testing.T) {
	e := newEnv(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	e.c.BootableCatalog(t)
	a, dirA, dirB := e.nodeReachingTwoPools()
	t.Cleanup(a.PowerOff)

	res, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: cmd("create-1"),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 * mib, WritableLayerCapacityBytes: 256 * mib},
			Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW,
				NewVolume: &ctrlv1.VolumeSpec{StoragePool: "pool-a", CapacityBytes: 64 * mib}},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	volID := e.waitWorkspace(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE).GetSpec().GetVolume().GetVolumeId()
	onVolume, onLayer := bytes.Repeat([]byte("on the volume\n"), 1000), []byte("on the writable layer\n")
	e.writeGuestFile(id, "/data/moved/file", onVolume)
	e.writeGuestFile(id, "/root/moved-layer", onLayer)

	// Running: its Volume and layer stay where they are.
	if _, err := e.moveVolume("move-running", volID, "pool-b"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("move of a running Workspace's Volume: %v, want failed_precondition", err)
	}
	if _, err := e.moveLayer("move-running-layer", id, "pool-b"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("move of a running Workspace's writable layer: %v, want failed_precondition", err)
	}

	e.lifecycle(id, "stop-1", false)
	e.waitWorkspace(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)

	// With its node down the move waits; meanwhile the Workspace does not
	// start. The same command_id settles it once the node is back.
	pools := []node.Pool{{Name: "pool-a", Dir: dirA, Default: true}, {Name: "pool-b", Dir: dirB}}
	a.Stop(t)
	e.c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = e.c.Nodes.MoveVolume(short, connect.NewRequest(&operatorv1.MoveVolumeRequest{Command: cmd("move-vol"), VolumeId: volID, StoragePool: "pool-b"}))
	if connect.CodeOf(err) != connect.CodeUnavailable || objectIn(err).GetMovingTo() != "pool-b" {
		t.Fatalf("MoveVolume with its node down: %v, want unavailable while it moves", err)
	}
	_, err = e.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd("start-early"), WorkspaceId: id}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("start while its Volume moves: %v, want unavailable", err)
	}
	a = e.c.StartNodeWithPools(t, "node-a", a.StateDir, pools...)
	t.Cleanup(a.PowerOff)
	if o, err := e.moveVolume("move-vol", volID, "pool-b"); err != nil || o.GetStoragePool() != "pool-b" {
		t.Fatalf("MoveVolume: %v, %v", o, err)
	}
	lres, err := e.c.Nodes.MoveWritableLayer(ctx, connect.NewRequest(&operatorv1.MoveWritableLayerRequest{Command: cmd("move-layer"), WorkspaceId: id, StoragePool: "pool-b"}))
	if err != nil || lres.Msg.GetObject().GetStoragePool() != "pool-b" || lres.Msg.GetObject().GetKind() != operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_WRITABLE_LAYER {
		t.Fatalf("MoveWritableLayer: %v, %v", lres, err)
	}
	testenv.WaitFor(t, "pool-a's copies removed", func() bool { return e.pool("pool-a").GetCleanupCount() == 0 })
	for _, f := range []string{filepath.Join(dirA, "volumes", volID+".img"), filepath.Join(dirA, "layers", id+".img")} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left in pool-a: %v", f, err)
		}
	}

	e.lifecycle(id, "start-1", true)
	e.waitWorkspace(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if got := e.readGuestFile(id, "/data/moved/file"); !bytes.Equal(got, onVolume) {
		t.Errorf("the Volume's file after the move: %q", got)
	}
	if got := e.readGuestFile(id, "/root/moved-layer"); !bytes.Equal(got, onLayer) {
		t.Errorf("the layer's file after the move: %q", got)
	}
	if p := e.pool("pool-b"); p.GetVolumeCount() != 1 || p.GetRetainedLayerCount() != 1 || p.GetReservedBytes() != 64*mib+256*mib {
		t.Errorf("pool-b after the moves: %v", p)
	}
}
