package workspace_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// STOP_CAUSE_GUEST_SHUTDOWN and HOST_MEMORY_EXHAUSTED: "ctrl released the
// execution as a forced stop, so a caller can start the Workspace again":
// an execution its node reports ended leaves the Workspace STOPPED with
// that cause, forced, its durability unconfirmed, no guest observation,
// and a start is admitted. A VMM that crashed is released the same way
// with no cause (UNSPECIFIED, "a release that did not record a cause"):
// it was recorded as GUEST_SHUTDOWN before, blaming the guest. An end a
// StopExecution answered (STOPPED) is that stop's to record.
func TestAnExecutionThatEndsOnItsOwnIsReleasedAsAForcedStop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.setSession(t, "node-a", true, 0)
		for i, c := range []struct {
			end   nodev1.ExecutionEnd
			cause ctrlv1.StopCause
		}{
			{nodev1.ExecutionEnd_EXECUTION_END_GUEST_SHUTDOWN, ctrlv1.StopCause_STOP_CAUSE_GUEST_SHUTDOWN},
			{nodev1.ExecutionEnd_EXECUTION_END_HOST_MEMORY_EXHAUSTED, ctrlv1.StopCause_STOP_CAUSE_HOST_MEMORY_EXHAUSTED},
			{nodev1.ExecutionEnd_EXECUTION_END_CRASHED, ctrlv1.StopCause_STOP_CAUSE_UNSPECIFIED},
		} {
			create := []string{"c1", "c2", "c3"}[i]
			id := e.createWithoutVolume(t, create)
			e.endCommand(t, create)
			e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
			e.runOn(t, id, "node-a")
			e.changeWorkspace(t, id, func(w *ctrlv1.Workspace) {
				w.GuestObservation = &ctrlv1.GuestObservation{Condition: ctrlv1.GuestCondition_GUEST_CONDITION_RESPONDING}
			})

			e.ws.ExecutionEnded(ctx, "node-a", &nodev1.ExecutionReport{InstanceId: id + ".1", End: nodev1.ExecutionEnd_EXECUTION_END_STOPPED})
			if got := get(t, e, id).GetState(); got != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
				t.Errorf("after an end a StopExecution answered: %v, want AVAILABLE (that stop records it)", got)
			}
			e.ws.ExecutionEnded(ctx, "node-a", &nodev1.ExecutionReport{InstanceId: id + ".1", End: c.end})
			w := get(t, e, id)
			if last := w.GetLastStop(); w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED || last.GetCause() != c.cause || !last.GetForce() ||
				last.GetDurability() != ctrlv1.StopDurability_STOP_DURABILITY_UNCONFIRMED || w.GetGuestObservation() != nil {
				t.Errorf("after %v: %v, last_stop %v, guest %v; want STOPPED by %v, forced, unconfirmed, no observation", c.end, w.GetState(), last, w.GetGuestObservation(), c.cause)
			}
			res, err := e.ws.Start(ctx, &ctrlv1.StartWorkspaceRequest{Command: cmd("start-" + create), WorkspaceId: id})
			if err != nil || res.GetWorkspace().GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_STARTING {
				t.Errorf("a start after %v: %v, %v; want admitted, STARTING", c.end, res.GetWorkspace().GetState(), err)
			}
		}
	})
}

// "While the guest is coming back there is no observation at all", and
// "last_reset_at is present only when restart_count is not zero".
func TestAGuestComingBackHasNoObservation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		id := e.createWithoutVolume(t, "c1")
		e.endCommand(t, "c1")
		e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
		e.runOn(t, id, "node-a")
		observe := func(r *nodev1.ExecutionReport) *ctrlv1.GuestObservation {
			t.Helper()
			r.InstanceId, r.Running = id+".1", true
			if err := e.store.Tx(ctx, func(tx *store.Tx) error {
				_, _, err := e.ws.ExecutionObserved(tx, "node-a", r)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return get(t, e, id).GetGuestObservation()
		}
		resetAt := timestamppb.New(time.Now().Add(-time.Second))
		if obs := observe(&nodev1.ExecutionReport{Responding: true, LastResetAt: resetAt}); obs.GetRestartCount() != 0 || obs.GetLastResetAt() != nil {
			t.Errorf("restart_count 0: %v, want no last_reset_at", obs)
		}
		if obs := observe(&nodev1.ExecutionReport{ComingBack: true, RestartCount: 1, LastResetAt: resetAt}); obs != nil {
			t.Errorf("a guest coming back: %v, want no observation", obs)
		}
		if obs := observe(&nodev1.ExecutionReport{Responding: true, RestartCount: 1, LastResetAt: resetAt}); obs.GetRestartCount() != 1 ||
			!obs.GetLastResetAt().AsTime().Equal(resetAt.AsTime()) || !obs.GetRebooted() {
			t.Errorf("the guest back: %v, want restart_count 1, last_reset_at the host's, rebooted", obs)
		}
	})
}

// RetentionTier: "Exactly one PROMISED, BEST_EFFORT, and NONE entry is
// returned. The path shape is [mount_path] ..., /, and [/tmp, /run]";
// BEST_EFFORT's capacity_bytes "is absent until the layer exists"; a tier
// is AVAILABLE while what holds it exists (the Volume AVAILABLE or
// ATTACHED, the layer made by a start, tmpfs while an execution runs),
// UNAVAILABLE otherwise.
func TestRetentionTiersShapes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		s := spec(256 * mib)
		s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: e.availableVolume(t, "v1"), MountPath: "/srv"}
		res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: s})
		if err != nil {
			t.Fatal(err)
		}
		id := res.GetWorkspace().GetWorkspaceId()
		available, unavailable := ctrlv1.RetentionAvailability_RETENTION_AVAILABILITY_AVAILABLE, ctrlv1.RetentionAvailability_RETENTION_AVAILABILITY_UNAVAILABLE
		check := func(when string, want [3]ctrlv1.RetentionAvailability, layer bool) {
			t.Helper()
			tiers := get(t, e, id).GetRetentionTiers()
			kinds := []ctrlv1.RetentionTierKind{ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_PROMISED, ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_BEST_EFFORT, ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_NONE}
			paths := [][]string{{"/srv"}, {"/"}, {"/tmp", "/run"}}
			if len(tiers) != 3 {
				t.Fatalf("%s: %d tiers, want 3", when, len(tiers))
			}
			for i, tier := range tiers {
				if tier.GetKind() != kinds[i] || !slices.Equal(tier.GetPaths(), paths[i]) || tier.GetAvailability() != want[i] {
					t.Errorf("%s: tier %d is %v %v %v, want %v %v %v", when, i, tier.GetKind(), tier.GetPaths(), tier.GetAvailability(), kinds[i], paths[i], want[i])
				}
			}
			if got := tiers[1].CapacityBytes != nil; got != layer {
				t.Errorf("%s: BEST_EFFORT capacity_bytes present %t, want %t", when, got, layer)
			}
		}
		check("before any start", [3]ctrlv1.RetentionAvailability{available, unavailable, unavailable}, false)
		e.endCommand(t, "c1")
		e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
		if err := e.store.Tx(ctx, func(tx *store.Tx) error {
			return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: id, InstanceId: id + ".1", NodeId: "node-a", Starts: 1, LayerPool: "pool-a", LayerCapacityBytes: 256 * mib})
		}); err != nil {
			t.Fatal(err)
		}
		e.setSession(t, "node-a", true, 0)
		check("running", [3]ctrlv1.RetentionAvailability{available, available, available}, true)
	})
}
