package workspace_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// guest_observation "is an observation, not a state: an UNRESPONSIVE guest
// leaves state, admission and expiration unchanged, and the guest may
// recover." While the guest does not answer, error is the latest probe
// failure and memory_condition is UNSPECIFIED (unknown), the memory kills
// standing; once it answers, it is RESPONDING with no error, though the
// node sent one.
func TestAnUnresponsiveGuestLeavesTheWorkspaceAlone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		id := e.createWithoutVolume(t, "c1")
		e.endCommand(t, "c1")
		deadline := timestamppb.New(time.Now().Add(time.Hour))
		e.changeWorkspace(t, id, func(w *ctrlv1.Workspace) {
			w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE
			w.Expiration = &ctrlv1.WorkspaceExpiration{Revision: 1, Policy: &ctrlv1.WorkspaceExpirationPolicy{
				Action: ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP, Deadline: deadline}}
		})
		e.runOn(t, id, "node-a")
		e.setSession(t, "node-a", true, 0)
		kill := &guestv1.MemoryKill{Pid: 42, Command: "hog", RssBytes: 1 << 20}
		report := func(responding bool, probeError string) *ctrlv1.Workspace {
			t.Helper()
			if err := e.store.Tx(ctx, func(tx *store.Tx) error {
				_, _, err := e.ws.ExecutionObserved(tx, "node-a", &nodev1.ExecutionReport{
					InstanceId: id + ".1", Running: true, Responding: responding, ProbeError: probeError,
					Memory: &guestv1.MemoryReport{Condition: guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED, SaturatedSince: timestamppb.Now(), KillCount: 1, LatestKill: kill},
				})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return get(t, e, id)
		}
		before := get(t, e, id)

		w := report(false, "ping: deadline exceeded")
		obs := w.GetGuestObservation()
		if obs.GetCondition() != ctrlv1.GuestCondition_GUEST_CONDITION_UNRESPONSIVE || obs.GetError() != "ping: deadline exceeded" ||
			obs.GetMemoryCondition() != ctrlv1.GuestMemoryCondition_GUEST_MEMORY_CONDITION_UNSPECIFIED || obs.GetMemorySaturatedSince() != nil ||
			obs.GetMemoryKillCount() != 1 || obs.GetLatestMemoryKill().GetPid() != 42 {
			t.Errorf("an unresponsive guest's observation: %v; want UNRESPONSIVE, the probe's error, memory unknown, the kill standing", obs)
		}
		if w.GetState() != before.GetState() || w.GetGeneration() != before.GetGeneration() || !proto.Equal(w.GetExpiration(), before.GetExpiration()) {
			t.Errorf("a Workspace whose guest does not answer: %v at generation %d, expiration %v; want it as before (%v, %d, %v)",
				w.GetState(), w.GetGeneration(), w.GetExpiration(), before.GetState(), before.GetGeneration(), before.GetExpiration())
		}
		// Admission: an update is admitted as before.
		if _, err := e.ws.UpdateLabels(ctx, &ctrlv1.UpdateWorkspaceLabelsRequest{
			Command: cmd("labels"), WorkspaceId: id, ExpectedLabelsRevision: w.GetLabelsRevision(), Labels: map[string]string{"a": "b"},
		}); err != nil {
			t.Errorf("a labels update while the guest does not answer: %v", err)
		}

		w = report(true, "boot id mismatch")
		if obs := w.GetGuestObservation(); obs.GetCondition() != ctrlv1.GuestCondition_GUEST_CONDITION_RESPONDING || obs.GetError() != "" ||
			obs.GetUnresponsiveSince() != nil || obs.GetMemoryCondition() != ctrlv1.GuestMemoryCondition_GUEST_MEMORY_CONDITION_SATURATED {
			t.Errorf("the guest recovered: %v; want RESPONDING, no error, its memory condition known", obs)
		}
	})
}
