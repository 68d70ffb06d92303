package workspace_test

import (
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// A delete that fails after its admission leaves the Workspace FAILED with
// its spec still naming the Volume the admission released, which another
// Workspace may then bind. That Volume is no longer the first Workspace's:
// its start is refused, and neither a new binding nor a second delete of
// it releases or deletes the Volume under the Workspace that binds it now.
func TestAVolumeAFailedDeleteReleasedIsNoLongerTheWorkspaces(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		v, err := e.vols.Create(ctx, &ctrlv1.CreateVolumeRequest{Command: cmd("v1")})
		if err != nil {
			t.Fatal(err)
		}
		x := v.GetVolume().GetVolumeId()
		e.force(t, x, "v1", func(vol *ctrlv1.Volume) { vol.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE })
		bind := func(c string) string {
			s := spec(256 * mib)
			s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: x}
			res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd(c), Spec: s})
			if err != nil {
				t.Fatal(err)
			}
			return res.GetWorkspace().GetWorkspaceId()
		}
		// What a delete that failed on its node leaves: the Workspace
		// FAILED, the Volume it bound released.
		releasedByAFailedDelete := func(c string) string {
			id := bind(c)
			e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED)
			e.force(t, x, c, func(vol *ctrlv1.Volume) { vol.BoundWorkspaceId = "" })
			return id
		}
		a, b := releasedByAFailedDelete("c-a"), releasedByAFailedDelete("c-b")
		now := bind("c-now")
		boundTo := func(what string) {
			t.Helper()
			got, err := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: x})
			if err != nil || got.GetVolume().GetBoundWorkspaceId() != now || got.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
				t.Errorf("after %s: %v %v, want AVAILABLE, bound to %s", what, got.GetVolume(), err, now)
			}
		}

		if _, err := e.ws.Start(ctx, &ctrlv1.StartWorkspaceRequest{Command: cmd("start-a"), WorkspaceId: a}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("start of a Workspace whose Volume a failed delete released: %v, want failed_precondition", err)
		}
		w := get(t, e, a)
		if _, err := e.ws.UpdateVolumeBinding(ctx, &ctrlv1.UpdateWorkspaceVolumeBindingRequest{Command: cmd("rebind-a"), WorkspaceId: a,
			ExpectedBindingRevision: w.GetSpec().GetBindingRevision(), Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}}); err != nil {
			t.Fatal(err)
		}
		boundTo("the first Workspace's binding replaced")
		if _, err := e.ws.Delete(ctx, &ctrlv1.DeleteWorkspaceRequest{Command: cmd("delete-b"), WorkspaceId: b}); err != nil {
			t.Fatal(err)
		}
		boundTo("the second Workspace deleted again")
		if got := get(t, e, b); got.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED {
			t.Errorf("the second delete: %v, want DELETED", got.GetState())
		}
	})
}

// Releasing the NEW Volume of a Workspace whose create has not placed it
// yet keeps the Volume (the reference: "always keeps the Volume"), and
// since no launch will make it now, its creation is admitted as
// CreateVolume's, under the release's command_id and "/create-volume".
func TestAReleasedVolumeNoLaunchMadeIsCreatedOnItsOwn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(256 * mib)}) // NEW, no node acts
		if err != nil {
			t.Fatal(err)
		}
		w := res.GetWorkspace()
		volID := w.GetSpec().GetVolume().GetVolumeId()
		if _, err := e.ws.UpdateVolumeBinding(ctx, &ctrlv1.UpdateWorkspaceVolumeBindingRequest{Command: cmd("release"), WorkspaceId: w.GetWorkspaceId(),
			ExpectedBindingRevision: w.GetSpec().GetBindingRevision(), Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}}); err != nil {
			t.Fatal(err)
		}
		got, err := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: volID})
		if err != nil || got.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_CREATING || got.GetVolume().GetBoundWorkspaceId() != "" {
			t.Fatalf("the released Volume: %v %v, want CREATING and bound to none", got.GetVolume(), err)
		}
		if err := e.store.Tx(ctx, func(tx *store.Tx) error {
			c, err := tx.ActiveCommandOn(volID)
			if err != nil {
				return err
			}
			if c.GetCommandId() != "release/create-volume" || c.GetKind() != "CreateVolume" {
				t.Errorf("the command on the released Volume: %s (%s), want release/create-volume (CreateVolume)", c.GetCommandId(), c.GetKind())
			}
			return nil
		}); err != nil {
			t.Fatalf("no creation admitted for the released Volume: %v", err)
		}
	})
}
