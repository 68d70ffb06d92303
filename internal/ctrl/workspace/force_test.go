package workspace_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store"
)

// "Force stop recovers a guest that does not [answer]": a FORCE stop sent
// while a NORMAL stop waits for the guest takes its place. The NORMAL
// stop fails as cancelled at STOPPING naming the FORCE stop, the
// Workspace stays STOPPING with the FORCE stop as its last_stop, and the
// FORCE stop is the command in progress: another stop of either mode is
// unavailable naming it, and its replay answers what it answered.
func TestAForceStopSupersedesANormalStopUnderWay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		id := e.createWithoutVolume(t, "c1")
		e.endCommand(t, "c1")
		e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
		e.runOn(t, id, "node-a")
		e.setSession(t, "node-a", true, 0)
		if _, err := e.ws.Stop(ctx, &ctrlv1.StopWorkspaceRequest{Command: cmd("s-normal"), WorkspaceId: id}); err != nil {
			t.Fatal(err)
		}
		force := &ctrlv1.StopWorkspaceRequest{Command: cmd("s-force"), WorkspaceId: id, Mode: ctrlv1.StopMode_STOP_MODE_FORCE}
		res, err := e.ws.Stop(ctx, force)
		if err != nil {
			t.Fatalf("a FORCE stop while a NORMAL one is under way: %v", err)
		}
		w := res.GetWorkspace()
		if last := w.GetLastStop(); w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPING || last.GetCommandId() != "s-force" || !last.GetForce() ||
			last.GetCause() != ctrlv1.StopCause_STOP_CAUSE_REQUESTED || last.GetCompletedAt() != nil {
			t.Errorf("the Workspace the FORCE stop answers: %v, last_stop %v; want STOPPING by s-force", w.GetState(), last)
		}
		if c := res.GetCommand(); c.GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_ADMITTED {
			t.Errorf("the FORCE stop's command: %v, want ADMITTED", c)
		}
		normal := e.command(t, "s-normal")
		if f := normal.GetFailure(); normal.GetState() != storev1.CommandState_COMMAND_STATE_FAILED || f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_CANCELLED ||
			f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_STOPPING || !strings.Contains(f.GetMessage(), "s-force") {
			t.Errorf("the NORMAL stop after the FORCE one: %v, %v; want FAILED, cancelled at STOPPING naming s-force", normal.GetState(), f)
		}
		for _, mode := range []ctrlv1.StopMode{ctrlv1.StopMode_STOP_MODE_NORMAL, ctrlv1.StopMode_STOP_MODE_FORCE} {
			_, err := e.ws.Stop(ctx, &ctrlv1.StopWorkspaceRequest{Command: cmd("again-" + mode.String()), WorkspaceId: id, Mode: mode})
			if connect.CodeOf(err) != connect.CodeUnavailable || apierr.DetailOf(err).GetCommandId() != "s-force" {
				t.Errorf("a %v stop after the FORCE one: %v, want unavailable naming s-force", mode, err)
			}
		}
		replay, err := e.ws.Stop(ctx, force)
		if err != nil || replay.GetCommand().GetCommandId() != "s-force" || replay.GetWorkspace().GetLastStop().GetCommandId() != "s-force" {
			t.Errorf("the FORCE stop replayed: %v, %v", replay, err)
		}
	})
}

// endCommand ends command id as SUCCEEDED, as its last step would have.
func (e *env) endCommand(t *testing.T, id string) {
	t.Helper()
	if err := e.store.Tx(ctx, func(tx *store.Tx) error {
		c, err := tx.GetCommand(id, true)
		if err != nil {
			return err
		}
		c.State = storev1.CommandState_COMMAND_STATE_SUCCEEDED
		return tx.UpdateCommand(c)
	}); err != nil {
		t.Fatal(err)
	}
}

// command reads command id as stored.
func (e *env) command(t *testing.T, id string) *store.CommandRow {
	t.Helper()
	var c *store.CommandRow
	if err := e.store.Snapshot(ctx, func(tx *store.Tx) (err error) {
		c, err = tx.GetCommand(id, false)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// A start of a CREATING Workspace is refused (failed_precondition with
// the Workspace); a binding change of one whose create reached a node
// answers unavailable naming the create, and one whose create did not
// takes the new binding.
func TestACreatingWorkspaceRefusesAStartAndHoldsItsBindingOnceAtItsNode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		id := e.createWithoutVolume(t, "c1")
		_, err := e.ws.Start(ctx, &ctrlv1.StartWorkspaceRequest{Command: cmd("start-1"), WorkspaceId: id})
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || apierr.DetailOf(err).GetObservedWorkspace().GetWorkspaceId() != id {
			t.Errorf("a start of a CREATING Workspace: %v, want failed_precondition with the Workspace", err)
		}
		bind := func(command string, revision uint64) error {
			_, err := e.ws.UpdateVolumeBinding(ctx, &ctrlv1.UpdateWorkspaceVolumeBindingRequest{Command: cmd(command), WorkspaceId: id, ExpectedBindingRevision: revision,
				Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: e.availableVolume(t, "v-"+command)}})
			return err
		}
		if err := bind("bind-1", 1); err != nil {
			t.Errorf("a binding while the create waits for placement: %v, want it taken", err)
		}
		if err := e.store.Tx(ctx, func(tx *store.Tx) error {
			c, err := tx.GetCommand("c1", true)
			if err != nil {
				return err
			}
			c.NodeId = "node-a" // its start sent to node-a
			return tx.UpdateCommand(c)
		}); err != nil {
			t.Fatal(err)
		}
		if err := bind("bind-2", 2); connect.CodeOf(err) != connect.CodeUnavailable || apierr.DetailOf(err).GetCommandId() != "c1" {
			t.Errorf("a binding while the create is at its node: %v, want unavailable naming c1", err)
		}
	})
}
