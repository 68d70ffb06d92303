package workspace_test

import (
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// A Workspace STOPPING on a node an operator isolates (ReleaseNode) ends
// FAILED without its last_stop: the reference has last_stop "present
// while the Workspace is STOPPING or STOPPED".
func TestAWorkspaceStoppingOnAnIsolatedNodeFailsWithoutItsStop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		id := e.createWithoutVolume(t, "c1")
		// Its execution on node-a, a requested stop under way.
		e.changeWorkspace(t, id, stoppedBy(ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPING))
		if err := e.store.Tx(ctx, func(tx *store.Tx) error {
			return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: id, InstanceId: id + ".1", NodeId: "node-a"})
		}); err != nil {
			t.Fatal(err)
		}
		if err := e.store.Tx(ctx, func(tx *store.Tx) error {
			_, err := e.ws.ReleaseNode(tx, "node-a", nil, &ctrlv1.WorkspaceFailure{Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if w := get(t, e, id); w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED || w.GetLastStop() != nil {
			t.Errorf("after its node was isolated: %v, last_stop %v; want FAILED without last_stop", w.GetState(), w.GetLastStop())
		}
	})
}
