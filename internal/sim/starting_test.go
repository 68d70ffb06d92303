package sim_test

import (
	"slices"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/sim"
)

// Updates admitted while a create's StartExecution is on its node (memory,
// then the writable layer's capacity) are in the Workspace once the start
// ended, at their resources_revision: the start's end records what the
// start bound, not the spec it read before the updates. They take effect
// at the next start (the reference's "It takes effect at the next start").
func TestUpdatesAdmittedWhileStartingOutliveTheStart(t *testing.T) {
	var once sync.Once
	reached, release := make(chan struct{}), make(chan struct{})
	c, _ := oneNode(t, func(cfg *sim.Config) {
		cfg.OnCommand = func(_ string, op proto.Message) {
			if _, ok := op.(*nodev1.StartExecution); ok {
				once.Do(func() { close(reached); <-release })
			}
		}
	})
	id := createWithoutVolume(t, c, "held-create")
	<-reached // the node holds the StartExecution

	_, err := c.Workspaces.UpdateWorkspaceMemory(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceMemoryRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "memory"}, WorkspaceId: id, ExpectedResourcesRevision: 1, MemoryBytes: 512 * mib}))
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	layer := uint64(2 * workspace.DefaultLayerCapacity) // the layer the start creates has the default
	if _, err := c.Workspaces.ResizeWorkspaceWritableLayer(ctx, connect.NewRequest(&ctrlv1.ResizeWorkspaceWritableLayerRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "layer"}, WorkspaceId: id, ExpectedResourcesRevision: 2, CapacityBytes: layer})); err != nil {
		close(release)
		t.Fatal(err)
	}
	close(release)

	res := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE).GetSpec()
	if res.GetResources().GetMemoryBytes() != 512*mib || res.GetResources().GetWritableLayerCapacityBytes() != layer || res.GetResourcesRevision() != 3 {
		t.Errorf("once AVAILABLE: memory %d, layer %d, resources_revision %d; want %d, %d, 3 (the updates admitted while starting)",
			res.GetResources().GetMemoryBytes(), res.GetResources().GetWritableLayerCapacityBytes(), res.GetResourcesRevision(), 512*mib, layer)
	}
	if res.GetLaunchRef() == "" || res.GetTemplate() == nil {
		t.Errorf("once AVAILABLE the start's bindings are gone: %v", res)
	}
}

// A memory update takes effect at the next start (workspaces.md U3,
// R3 at ctrl): the execution running when it is admitted keeps the memory
// it started with, and the next StartExecution the node receives carries
// the new value, exactly as requested.
func TestAMemoryUpdateReachesTheNextStart(t *testing.T) {
	var mu sync.Mutex
	var memories []uint64 // of each StartExecution, in order
	c, _ := oneNode(t, func(cfg *sim.Config) {
		cfg.OnCommand = func(_ string, op proto.Message) {
			if start, ok := op.(*nodev1.StartExecution); ok {
				mu.Lock()
				memories = append(memories, start.GetMemoryBytes())
				mu.Unlock()
			}
		}
	})
	id := createWithoutVolume(t, c, "create")
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if _, err := c.Workspaces.UpdateWorkspaceMemory(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceMemoryRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "memory"}, WorkspaceId: id, ExpectedResourcesRevision: 1, MemoryBytes: 768 * mib})); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	running := slices.Clone(memories)
	mu.Unlock()
	if !slices.Equal(running, []uint64{256 * mib}) {
		t.Errorf("starts before the next one: memory %v, want one of 256 MiB (the update sends nothing to the running execution)", running)
	}
	restart(t, c, id, "1")
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(memories, []uint64{256 * mib, 768 * mib}) {
		t.Errorf("StartExecution memories: %v, want 256 MiB then 768 MiB", memories)
	}
}
