package workspace_test

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store"
)

// A Volume grows offline (the node runs e2fsck and resize2fs on its block
// file), so no execution may hold it, or be about to: a resize of a
// Volume whose Workspace has a create in progress is unavailable naming
// that command, one whose Workspace runs (the Volume ATTACHED) is
// failed_precondition, and neither changes the Volume or records the
// command. Once the Workspace is stopped the Volume grows, and while it
// is RESIZING the Workspace does not start (unavailable).
func TestAVolumeGrowsOnlyWhileNoExecutionHoldsIt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		v, err := e.vols.Create(ctx, &ctrlv1.CreateVolumeRequest{Command: cmd("v1")})
		if err != nil {
			t.Fatal(err)
		}
		volID := v.GetVolume().GetVolumeId()
		capacity := v.GetVolume().GetSpec().GetCapacityBytes()
		// The Volume as a node made it: AVAILABLE, its creation over.
		e.force(t, volID, "v1", func(vol *ctrlv1.Volume) { vol.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE })

		s := spec(256 * mib)
		s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: volID}
		created, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: s})
		if err != nil {
			t.Fatal(err)
		}
		wsID := created.GetWorkspace().GetWorkspaceId()
		resize := func(id string) error {
			_, err := e.vols.Resize(ctx, &ctrlv1.ResizeVolumeRequest{Command: cmd(id), VolumeId: volID, CapacityBytes: capacity * 2})
			return err
		}
		unchanged := func(state ctrlv1.VolumeState, refused string) {
			t.Helper()
			got, err := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: volID})
			if err != nil || got.GetVolume().GetState() != state || got.GetVolume().GetSpec().GetCapacityBytes() != capacity {
				t.Errorf("after the refused resize: %v %v, want %v at %d bytes", got.GetVolume(), err, state, capacity)
			}
			if err := e.store.Tx(ctx, func(tx *store.Tx) error { _, err := tx.GetCommand(refused, false); return err }); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the refused resize %s was recorded: %v", refused, err)
			}
		}

		// The Workspace's create is in progress (no node acts here).
		err = resize("r1")
		if connect.CodeOf(err) != connect.CodeUnavailable || apierr.DetailOf(err).GetCommandId() != "c1" || !apierr.DetailOf(err).GetRetryable() {
			t.Errorf("resize while the Workspace's create is in progress: %v (detail %v), want unavailable naming c1", err, apierr.DetailOf(err))
		}
		unchanged(ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE, "r1")

		// The Workspace runs with the Volume attached.
		e.force(t, volID, "c1", func(vol *ctrlv1.Volume) { vol.State = ctrlv1.VolumeState_VOLUME_STATE_ATTACHED })
		e.forceWorkspace(t, wsID, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
		if err := resize("r2"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("resize of an attached Volume: %v, want failed_precondition", err)
		}
		unchanged(ctrlv1.VolumeState_VOLUME_STATE_ATTACHED, "r2")

		// A bound Volume is not deleted: the refusal names its Workspace.
		if _, err := e.vols.Delete(ctx, &ctrlv1.DeleteVolumeRequest{Command: cmd("del"), VolumeId: volID}); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), wsID) ||
			apierr.DetailOf(err).GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_DELETING_VOLUME {
			t.Errorf("delete of a bound Volume: %v, want failed_precondition at DELETING_VOLUME naming %s", err, wsID)
		}

		// Stopped: the Volume is released and grows, to more than it has.
		e.force(t, volID, "", func(vol *ctrlv1.Volume) { vol.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE })
		e.forceWorkspace(t, wsID, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
		if _, err := e.vols.Resize(ctx, &ctrlv1.ResizeVolumeRequest{Command: cmd("r-same"), VolumeId: volID, CapacityBytes: capacity}); connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "capacity_bytes" {
			t.Errorf("resize to the capacity it has: %v, want invalid_argument naming capacity_bytes", err)
		}
		if err := resize("r3"); err != nil {
			t.Fatalf("resize of a stopped Workspace's Volume: %v", err)
		}
		got, _ := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: volID})
		if got.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_RESIZING {
			t.Errorf("after the resize's admission: %v, want RESIZING", got.GetVolume())
		}
		_, err = e.ws.Start(ctx, &ctrlv1.StartWorkspaceRequest{Command: cmd("s1"), WorkspaceId: wsID})
		if connect.CodeOf(err) != connect.CodeUnavailable || apierr.DetailOf(err).GetCommandId() != "r3" {
			t.Errorf("start while its Volume grows: %v (detail %v), want unavailable naming r3", err, apierr.DetailOf(err))
		}
	})
}

// force rewrites a Volume in the store, and ends the command doneCommand
// (if any) as SUCCEEDED, as a node's answer would have.
func (e *env) force(t *testing.T, volID, doneCommand string, change func(*ctrlv1.Volume)) {
	t.Helper()
	if err := e.store.Tx(ctx, func(tx *store.Tx) error {
		vol, err := tx.GetVolume(volID, true)
		if err != nil {
			return err
		}
		change(vol)
		if err := tx.PutVolume(vol); err != nil {
			return err
		}
		if doneCommand == "" {
			return nil
		}
		c, err := tx.GetCommand(doneCommand, true)
		if err != nil {
			return err
		}
		c.State = storev1.CommandState_COMMAND_STATE_SUCCEEDED
		return tx.UpdateCommand(c)
	}); err != nil {
		t.Fatal(err)
	}
}

// createWithoutVolume admits a create of a Workspace with no Volume (it
// stays CREATING: no node acts here) and returns its id.
func (e *env) createWithoutVolume(t *testing.T, command string) string {
	t.Helper()
	s := spec(256 * mib)
	s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
	res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd(command), Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetWorkspace().GetWorkspaceId()
}

// forceWorkspace sets a Workspace's state in the store.
func (e *env) forceWorkspace(t *testing.T, id string, state ctrlv1.WorkspaceState) {
	t.Helper()
	e.changeWorkspace(t, id, func(w *ctrlv1.Workspace) { w.State = state })
}

// changeWorkspace rewrites a Workspace in the store with change.
func (e *env) changeWorkspace(t *testing.T, id string, change func(*ctrlv1.Workspace)) {
	t.Helper()
	if err := e.store.Tx(ctx, func(tx *store.Tx) error {
		w, err := tx.GetWorkspace(id, true)
		if err != nil {
			return err
		}
		change(w)
		return tx.PutWorkspace(w)
	}); err != nil {
		t.Fatal(err)
	}
}

// stoppedBy sets a Workspace's state with a requested stop s1 as its last
// stop.
func stoppedBy(state ctrlv1.WorkspaceState) func(*ctrlv1.Workspace) {
	return func(w *ctrlv1.Workspace) {
		w.State = state
		w.LastStop = &ctrlv1.WorkspaceStop{Cause: ctrlv1.StopCause_STOP_CAUSE_REQUESTED, CommandId: "s1"}
	}
}

// A stop while another is under way (the Workspace STOPPING) answers
// unavailable naming the command in progress, retryable: the stop under
// way ends within the node's stop timeout.
func TestAStopWhileAStopIsUnderWayIsUnavailable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		id := e.createWithoutVolume(t, "c1")
		e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPING) // c1 stands for the stop under way
		for _, mode := range []ctrlv1.StopMode{ctrlv1.StopMode_STOP_MODE_NORMAL, ctrlv1.StopMode_STOP_MODE_FORCE} {
			_, err := e.ws.Stop(ctx, &ctrlv1.StopWorkspaceRequest{Command: cmd("stop-" + mode.String()), WorkspaceId: id, Mode: mode})
			if connect.CodeOf(err) != connect.CodeUnavailable || apierr.DetailOf(err).GetCommandId() != "c1" || !apierr.DetailOf(err).GetRetryable() {
				t.Errorf("%v stop of a STOPPING Workspace: %v, want unavailable naming c1", mode, err)
			}
		}
	})
}
