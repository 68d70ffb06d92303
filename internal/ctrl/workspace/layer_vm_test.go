package workspace_test

import (
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
)

const gib = 1 << 30

// bestEffort is the Workspace's BEST_EFFORT retention tier.
func bestEffort(w *ctrlv1.Workspace) *ctrlv1.RetentionTier {
	for _, tier := range w.GetRetentionTiers() {
		if tier.GetKind() == ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_BEST_EFFORT {
			return tier
		}
	}
	return nil
}

// ResizeWorkspaceWritableLayer is judged against the capacity the layer
// has once it exists (the BEST_EFFORT tier's, here the storage profile's
// for a request of zero), and a grown layer is grown, block file and
// filesystem, at the next start: BEST_EFFORT then reports the new
// capacity, the guest's root filesystem has it, and the layer's content
// continued.
func TestAResizedWritableLayerGrowsAtTheNextStart(t *testing.T) {
	e := newVMEnv(t)
	w := e.createWithLayer("create-1", noVolume, 0)
	id := w.GetWorkspaceId()
	if got := bestEffort(w).GetCapacityBytes(); got != workspace.DefaultLayerCapacity {
		t.Fatalf("BEST_EFFORT capacity of a layer asked as 0: %d, want the profile's %d", got, workspace.DefaultLayerCapacity)
	}
	if out, code := e.c.Exec(t, id, "sh", "-c", "echo kept > /root/kept && sync"); code != 0 {
		t.Fatalf("write to the layer: %d %q", code, out)
	}
	resize := func(commandID string, capacity uint64) (*ctrlv1.ResizeWorkspaceWritableLayerResponse, error) {
		cur := e.workspace(id)
		res, err := e.c.Workspaces.ResizeWorkspaceWritableLayer(ctx, connect.NewRequest(&ctrlv1.ResizeWorkspaceWritableLayerRequest{
			Command: cmd(commandID), WorkspaceId: id, ExpectedResourcesRevision: cur.GetSpec().GetResourcesRevision(), CapacityBytes: capacity,
		}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	// Above the 0 asked for, below the 4 GiB the layer has.
	if _, err := resize("resize-small", 1*gib); connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "capacity_bytes" {
		t.Errorf("a resize below the layer's capacity: %v (field %q), want invalid_argument naming capacity_bytes", err, apierr.FieldOf(err))
	}
	res, err := resize("resize-5g", 5*gib)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.GetWorkspace(); got.GetSpec().GetResources().GetWritableLayerCapacityBytes() != 5*gib || bestEffort(got).GetCapacityBytes() != workspace.DefaultLayerCapacity {
		t.Errorf("after the resize, while running: asked %d, BEST_EFFORT %d; want 5 GiB asked, the layer still %d",
			got.GetSpec().GetResources().GetWritableLayerCapacityBytes(), bestEffort(got).GetCapacityBytes(), workspace.DefaultLayerCapacity)
	}

	if _, err := e.c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmd("stop-1"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	if _, err := e.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd("start-1"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	started := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	tier := bestEffort(started)
	if tier.GetCapacityBytes() != 5*gib || tier.GetContinuity() != ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_CONTINUED {
		t.Errorf("BEST_EFFORT after the start: %v, want 5 GiB, CONTINUED", tier)
	}
	if out, code := e.c.Exec(t, id, "cat", "/root/kept"); code != 0 || out != "kept\n" {
		t.Errorf("the grown layer's content: %d %q, want kept", code, out)
	}
	out, code := e.c.Exec(t, id, "df", "-k", "/")
	if code != 0 {
		t.Fatalf("df: %d %q", code, out)
	}
	if kib := rootSizeKiB(t, out); kib < 4608*1024 {
		t.Errorf("the guest's root filesystem has %d KiB, want about 5 GiB (more than 4.5 GiB): %q", kib, out)
	}
}

// rootSizeKiB is the size column of df -k's one filesystem line.
func rootSizeKiB(t *testing.T, df string) uint64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(df), "\n")
	fields := strings.Fields(lines[len(lines)-1])
	if len(fields) < 2 {
		t.Fatalf("df output: %q", df)
	}
	kib, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		t.Fatalf("df output %q: %v", df, err)
	}
	return kib
}
