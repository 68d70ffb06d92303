package workspace_test

import (
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

// binding_revision and annotations_revision are CAS tokens: a change moves
// them by one, a stale one is failed_precondition with the Workspace as it
// is in the ErrorDetail, and writes nothing.
func TestBindingAndAnnotationsTokensAreCAS(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		id := e.createWithoutVolume(t, "c1")
		none := &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
		stale := func(what string, err error, current uint64, revision func(*ctrlv1.Workspace) uint64) {
			t.Helper()
			d := apierr.DetailOf(err)
			if connect.CodeOf(err) != connect.CodeFailedPrecondition || revision(d.GetObservedWorkspace()) != current {
				t.Errorf("a stale %s token: %v (observed %v), want failed_precondition with the Workspace at revision %d", what, err, d.GetObservedWorkspace(), current)
			}
		}
		a, err := e.ws.UpdateAnnotations(ctx, &ctrlv1.UpdateWorkspaceAnnotationsRequest{Command: cmd("a1"), WorkspaceId: id, ExpectedAnnotationsRevision: 1, Annotations: map[string]string{"note": "x"}})
		if err != nil || a.GetWorkspace().GetAnnotationsRevision() != 2 {
			t.Fatalf("annotations: %v %v, want revision 2", a.GetWorkspace(), err)
		}
		_, err = e.ws.UpdateAnnotations(ctx, &ctrlv1.UpdateWorkspaceAnnotationsRequest{Command: cmd("a2"), WorkspaceId: id, ExpectedAnnotationsRevision: 1, Annotations: map[string]string{"note": "y"}})
		stale("annotations", err, 2, (*ctrlv1.Workspace).GetAnnotationsRevision)

		b, err := e.ws.UpdateVolumeBinding(ctx, &ctrlv1.UpdateWorkspaceVolumeBindingRequest{Command: cmd("b1"), WorkspaceId: id, ExpectedBindingRevision: 1,
			Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: e.availableVolume(t, "v1")}})
		if err != nil || b.GetWorkspace().GetSpec().GetBindingRevision() != 2 {
			t.Fatalf("binding: %v %v, want binding_revision 2", b.GetWorkspace(), err)
		}
		_, err = e.ws.UpdateVolumeBinding(ctx, &ctrlv1.UpdateWorkspaceVolumeBindingRequest{Command: cmd("b2"), WorkspaceId: id, ExpectedBindingRevision: 1, Volume: none})
		stale("binding", err, 2, func(w *ctrlv1.Workspace) uint64 { return w.GetSpec().GetBindingRevision() })

		w := get(t, e, id)
		if w.GetAnnotations()["note"] != "x" || w.GetSpec().GetVolume().GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND {
			t.Errorf("the stale writes changed the Workspace: %v", w)
		}
	})
}

// Delete clears last_stop, as start does.
func TestDeleteClearsLastStop(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		id := e.createWithoutVolume(t, "c1")
		e.changeWorkspace(t, id, stoppedBy(ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED))
		del, err := e.ws.Delete(ctx, &ctrlv1.DeleteWorkspaceRequest{Command: cmd("d1"), WorkspaceId: id})
		if err != nil || del.GetWorkspace().GetLastStop() != nil || get(t, e, id).GetLastStop() != nil {
			t.Errorf("delete of a STOPPED Workspace: %v %v, want no last_stop", del.GetWorkspace(), err)
		}
	})
}

// availableVolume creates a Volume and makes it AVAILABLE, its creation
// over, as a node would.
func (e *env) availableVolume(t *testing.T, command string) string {
	t.Helper()
	v, err := e.vols.Create(ctx, &ctrlv1.CreateVolumeRequest{Command: cmd(command)})
	if err != nil {
		t.Fatal(err)
	}
	e.force(t, v.GetVolume().GetVolumeId(), command, func(vol *ctrlv1.Volume) { vol.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE })
	return v.GetVolume().GetVolumeId()
}

// A start is admitted only for a STOPPED or FAILED Workspace, and a new
// Volume binding only while the Workspace holds no execution: in STARTING,
// STOPPING and DELETING both are failed_precondition with the Workspace in
// the ErrorDetail, and nothing changes.
func TestAStartAndABindingAreRefusedWhileAnExecutionComesOrGoes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		none := &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
		for _, state := range []ctrlv1.WorkspaceState{
			ctrlv1.WorkspaceState_WORKSPACE_STATE_STARTING, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPING, ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETING,
		} {
			id := e.createWithoutVolume(t, "c-"+state.String())
			e.forceWorkspace(t, id, state)
			_, err := e.ws.Start(ctx, &ctrlv1.StartWorkspaceRequest{Command: cmd("s-" + state.String()), WorkspaceId: id})
			if connect.CodeOf(err) != connect.CodeFailedPrecondition || apierr.DetailOf(err).GetObservedWorkspace().GetState() != state {
				t.Errorf("a start in %v: %v, want failed_precondition with the Workspace", state, err)
			}
			_, err = e.ws.UpdateVolumeBinding(ctx, &ctrlv1.UpdateWorkspaceVolumeBindingRequest{Command: cmd("b-" + state.String()), WorkspaceId: id, ExpectedBindingRevision: 1, Volume: none})
			if connect.CodeOf(err) != connect.CodeFailedPrecondition || apierr.DetailOf(err).GetObservedWorkspace().GetState() != state {
				t.Errorf("a binding in %v: %v, want failed_precondition with the Workspace", state, err)
			}
			if w := get(t, e, id); w.GetState() != state || w.GetSpec().GetBindingRevision() != 1 {
				t.Errorf("the refusals in %v changed the Workspace: %v", state, w)
			}
		}
	})
}
