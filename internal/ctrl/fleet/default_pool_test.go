package fleet_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/testenv"
)

// A new Workspace's first writable layer, with no Volume to go beside,
// goes to its node's own default pool, so a node that declares pools but
// names none its default is no candidate for it: the create goes to the
// next node (node-a sorts first), and one pinned to such a node fails at
// PLACING saying what the node lacks. It failed before, placed on node-a,
// with `storage pool "" has no capacity set`.
func TestANewLayerIsPlacedOnlyOnANodeNamingADefaultPool(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c := testenv.New(t, db, placementTimeout(2*time.Second))
		c.StartNodeWithPools(t, "node-a", "", node.Pool{Name: "shared", Dir: t.TempDir()}, node.Pool{Name: "other", Dir: t.TempDir()})
		c.StartNodeWithPools(t, "node-b", "", node.Pool{Name: "fast", Dir: t.TempDir(), Default: true})
		for _, p := range []string{"shared", "other", "fast"} {
			c.EnsureCapacity(t, p, 1<<40)
		}
		c.UnbootableCatalog(t)
		noVolume := &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
		spec := &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: 100, MemoryBytes: 128 << 20}, Volume: noVolume}

		res, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{Command: cmd("create-1"), Spec: spec}))
		if err != nil {
			t.Fatal(err)
		}
		if w := failedWorkspace(t, c, res.Msg.GetWorkspace().GetWorkspaceId()); !bootedOn(w, "node-b") {
			t.Errorf("a create without a Volume: %v, want it placed on node-b, whose default pool takes its layer", w.GetFailure())
		}

		pinned, err := c.Nodes.CreateWorkspaceOnNode(ctx, connect.NewRequest(&operatorv1.CreateWorkspaceOnNodeRequest{
			NodeId: "node-a", Request: &ctrlv1.CreateWorkspaceRequest{Command: cmd("create-2"), Spec: spec},
		}))
		if err != nil {
			t.Fatal(err)
		}
		f := failedWorkspace(t, c, pinned.Msg.GetResponse().GetWorkspace().GetWorkspaceId()).GetFailure()
		if f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING || f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE ||
			!strings.Contains(f.GetMessage(), "node-a: names no default storage pool") {
			t.Errorf("a create without a Volume pinned to node-a: %v, want it refused at PLACING naming the default pool node-a lacks", f)
		}
	})
}
