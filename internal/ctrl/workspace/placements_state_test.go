package workspace_test

import (
	"testing"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// WorkspacePlacement: "workspace_state is the state the Workspace API
// reports for it": UNKNOWN for an AVAILABLE Workspace whose node has been
// without a live control session for 15 s, as GetWorkspace reads it, not
// the AVAILABLE of its record.
func TestAPlacementsStateIsTheOneTheWorkspaceAPIReports(t *testing.T) {
	e := sqlite(t)

	id := e.createWithoutVolume(t, "c1")
	e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	e.runOn(t, id, "node-a")
	if err := e.store.Tx(ctx, func(tx *store.Tx) error {
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
	res, err := e.fleet.ListWorkspacePlacements(ctx, &operatorv1.ListWorkspacePlacementsRequest{
		Filter: &operatorv1.ListWorkspacePlacementsRequest_WorkspaceId{WorkspaceId: id},
	})
	if err != nil || len(res.GetWorkspacePlacements()) != 1 {
		t.Fatalf("placements: %v %v", res, err)
	}
	if got := res.GetWorkspacePlacements()[0].GetWorkspaceState(); got != api || api != ctrlv1.WorkspaceState_WORKSPACE_STATE_UNKNOWN {
		t.Errorf("workspace_state %v, and the Workspace API reports %v; want both UNKNOWN", got, api)
	}
}
