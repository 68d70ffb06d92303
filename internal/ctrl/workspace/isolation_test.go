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

// A running Workspace on a node an operator isolates keeps nothing its
// execution reported once FAILED (workspaces.md O2: guest_observation "is
// absent when there is no current execution"), nor a network policy
// status, nor Egress or Resolver observations.
func TestAWorkspaceOnAnIsolatedNodeKeepsNoObservation(t *testing.T) {
	e := sqlite(t)
	id := e.createWithoutVolume(t, "c1")
	e.endCommand(t, "c1")
	e.changeWorkspace(t, id, func(w *ctrlv1.Workspace) {
		w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE
		w.GuestObservation = &ctrlv1.GuestObservation{Condition: ctrlv1.GuestCondition_GUEST_CONDITION_RESPONDING}
		w.NetworkPolicyStatus = &ctrlv1.NetworkPolicyStatus{AppliedRevision: 1}
		w.EgressObservations = []*ctrlv1.EgressObservation{{EgressId: "egr-1"}}
		w.ResolverObservations = []*ctrlv1.ResolverObservation{{ResolverId: "rsv-1"}}
	})
	e.runOn(t, id, "node-a")
	if err := e.store.Tx(ctx, func(tx *store.Tx) error {
		_, err := e.ws.ReleaseNode(tx, "node-a", nil, &ctrlv1.WorkspaceFailure{Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	w := get(t, e, id)
	if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED || w.GetGuestObservation() != nil || w.GetNetworkPolicyStatus() != nil ||
		len(w.GetEgressObservations())+len(w.GetResolverObservations()) != 0 {
		t.Errorf("after its node was isolated: %v, guest %v, policy status %v, egresses %v, resolvers %v; want FAILED with none",
			w.GetState(), w.GetGuestObservation(), w.GetNetworkPolicyStatus(), w.GetEgressObservations(), w.GetResolverObservations())
	}
}
