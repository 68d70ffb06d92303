package workspace_test

import (
	"log/slog"
	"testing"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// WorkspacePlacement: "workspace_state is the state the Workspace API
// reports for it": UNKNOWN for an AVAILABLE Workspace whose node has been
// without a live control session for 15 s, as GetWorkspace reads it, not
// the AVAILABLE of its record.
func TestAPlacementsStateIsTheOneTheWorkspaceAPIReports(t *testing.T) {
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	runner := command.NewRunner(st, "test", slog.Default())
	f := fleet.New(st, runner, slog.Default(), fleet.DefaultConfig, fleet.Deps{})
	storetest.PutNodeWithPool(t, st, "node-a", "pool-a")
	vols := volume.New(st, f, runner, volume.DefaultProfile)
	e := &env{store: st, ws: workspace.New(st, f, vols, runner), vols: vols}
	storetest.PutReadyTemplate(t, e.store, "busybox", "1", true)

	id := e.createWithoutVolume(t, "c1")
	e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	e.runOn(t, id, "node-a")
	if err := st.Tx(ctx, func(tx *store.Tx) error {
		_ = tx.ReleaseAllocation(id, "")
		ok, err := tx.Allocate(store.Allocation{WorkspaceID: id, InstanceID: id + ".1", NodeID: "node-a", AllocatedAt: time.Now()}, store.Ratios{CPU: 1000, Memory: 1000})
		if err == nil && !ok {
			t.Fatal("allocation refused")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	e.setSession(t, "node-a", false, time.Minute) // lost a minute ago

	api := get(t, e, id).GetState()
	res, err := f.ListWorkspacePlacements(ctx, &operatorv1.ListWorkspacePlacementsRequest{
		Filter: &operatorv1.ListWorkspacePlacementsRequest_WorkspaceId{WorkspaceId: id},
	})
	if err != nil || len(res.GetWorkspacePlacements()) != 1 {
		t.Fatalf("placements: %v %v", res, err)
	}
	if got := res.GetWorkspacePlacements()[0].GetWorkspaceState(); got != api || api != ctrlv1.WorkspaceState_WORKSPACE_STATE_UNKNOWN {
		t.Errorf("workspace_state %v, and the Workspace API reports %v; want both UNKNOWN", got, api)
	}
}
