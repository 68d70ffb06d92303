package workspace_test

import (
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/testenv"
)

// vmWait bounds what waits for a VM to boot under TCG on a loaded machine.
const vmWait = 4 * time.Minute

// vmEnv is a real ctrl with one real node agent ("node-a", pool
// "default") and a catalog real microVMs boot from.
type vmEnv struct {
	t    *testing.T
	c    *testenv.Cluster
	node *testenv.Node
}

func newVMEnv(t *testing.T) *vmEnv {
	t.Helper()
	c := testenv.New(t, testenv.FastFleet())
	c.BootableCatalog(t)
	n := c.StartNode(t, "node-a", "", "")
	t.Cleanup(n.PowerOff) // a VM outlives its agent
	return &vmEnv{t: t, c: c, node: n}
}

func (e *vmEnv) workspace(id string) *ctrlv1.Workspace {
	e.t.Helper()
	res, err := e.c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.GetWorkspace()
}

func (e *vmEnv) volume(id string) *ctrlv1.Volume {
	e.t.Helper()
	res, err := e.c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: id}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.GetVolume()
}

// waitLong polls cond for as long as a VM may take.
func (e *vmEnv) waitLong(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(vmWait)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *vmEnv) waitState(id string, want ctrlv1.WorkspaceState) *ctrlv1.Workspace {
	e.t.Helper()
	var w *ctrlv1.Workspace
	e.waitLong(fmt.Sprintf("workspace %s %s", id, want), func() bool {
		w = e.workspace(id)
		if w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED && want != w.GetState() {
			e.t.Fatalf("workspace failed: %v", w.GetFailure())
		}
		return w.GetState() == want
	})
	return w
}

// create admits a Workspace of one CPU and 256 MiB of memory and of
// writable layer with binding b, and waits until it is AVAILABLE.
func (e *vmEnv) create(commandID string, b *ctrlv1.WorkspaceVolumeBinding) *ctrlv1.Workspace {
	e.t.Helper()
	return e.createWithLayer(commandID, b, 256*mib)
}

// createWithLayer is create with a writable layer of layer bytes (0: the
// storage profile's).
func (e *vmEnv) createWithLayer(commandID string, b *ctrlv1.WorkspaceVolumeBinding, layer uint64) *ctrlv1.Workspace {
	e.t.Helper()
	res, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: cmd(commandID),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 * mib, WritableLayerCapacityBytes: layer},
			Volume:    b,
		},
	}))
	if err != nil {
		e.t.Fatal(err)
	}
	return e.waitState(res.Msg.GetWorkspace().GetWorkspaceId(), ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
}

// newVolume creates a Volume of 64 MiB and waits until a node made it.
func (e *vmEnv) newVolume(commandID string) *ctrlv1.Volume {
	e.t.Helper()
	res, err := e.c.Volumes.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{Command: cmd(commandID), Spec: &ctrlv1.VolumeSpec{CapacityBytes: 64 * mib}}))
	if err != nil {
		e.t.Fatal(err)
	}
	id := res.Msg.GetVolume().GetVolumeId()
	var v *ctrlv1.Volume
	e.waitLong("volume "+id+" AVAILABLE", func() bool {
		v = e.volume(id)
		return v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
	})
	return v
}

var noVolume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
