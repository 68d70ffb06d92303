package workspace_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// Deleting a running Workspace bound to an existing Volume (delete_with_
// workspace off) releases the binding and, once the execution is released,
// leaves the Volume AVAILABLE, as a stop before the delete does: it can be
// bound again.
func TestDeletingARunningWorkspaceLeavesItsKeptVolumeAvailable(t *testing.T) {
	e := newVMEnv(t)
	vol := e.newVolume("volume-1")
	w := e.create("create-1", &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: vol.GetVolumeId()})
	if got := e.volume(vol.GetVolumeId()); got.GetState() != ctrlv1.VolumeState_VOLUME_STATE_ATTACHED || got.GetBoundWorkspaceId() != w.GetWorkspaceId() {
		t.Fatalf("the Volume of a running Workspace: %v, want ATTACHED, bound to %s", got, w.GetWorkspaceId())
	}
	if _, err := e.c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: cmd("delete-1"), WorkspaceId: w.GetWorkspaceId()})); err != nil {
		t.Fatal(err)
	}
	e.waitState(w.GetWorkspaceId(), ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED)
	if got := e.volume(vol.GetVolumeId()); got.GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE || got.GetBoundWorkspaceId() != "" {
		t.Errorf("the kept Volume after its running Workspace was deleted: %v, want AVAILABLE and free", got)
	}
	again, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: cmd("create-2"),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{MemoryBytes: 256 * mib},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: vol.GetVolumeId()},
		},
	}))
	if err != nil {
		t.Fatalf("binding the released Volume again: %v", err)
	}
	if got := e.volume(vol.GetVolumeId()); got.GetBoundWorkspaceId() != again.Msg.GetWorkspace().GetWorkspaceId() {
		t.Errorf("the Volume bound again: %v, want bound to %s", got, again.Msg.GetWorkspace().GetWorkspaceId())
	}
}

// A STOP expiration policy stops an AVAILABLE Workspace at its deadline:
// STOPPED, last_stop naming STOP_CAUSE_EXPIRED with its completion, the
// fired policy cleared.
func TestAStopExpirationStopsARunningWorkspace(t *testing.T) {
	e := newVMEnv(t)
	w := e.create("create-1", noVolume)
	res, err := e.c.Workspaces.UpdateWorkspaceExpiration(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceExpirationRequest{
		Command: cmd("expire-soon"), WorkspaceId: w.GetWorkspaceId(), ExpectedExpirationRevision: w.GetExpiration().GetRevision(),
		Change: &ctrlv1.WorkspaceExpirationChange{Change: &ctrlv1.WorkspaceExpirationChange_Set{Set: &ctrlv1.WorkspaceExpirationPolicy{
			Action: ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP, Deadline: timestamppb.New(time.Now().Add(time.Second)),
		}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.GetWorkspace().GetExpiration() == nil {
		t.Fatalf("the policy was not set: %v", res.Msg.GetWorkspace())
	}
	stopped := e.waitState(w.GetWorkspaceId(), ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	stop := stopped.GetLastStop()
	switch {
	case stop.GetCause() != ctrlv1.StopCause_STOP_CAUSE_EXPIRED || stop.GetForce():
		t.Errorf("last_stop %v: want STOP_CAUSE_EXPIRED, not forced", stop)
	case stop.GetRequestedAt() == nil || stop.GetCompletedAt() == nil || stop.GetDurability() == ctrlv1.StopDurability_STOP_DURABILITY_UNSPECIFIED:
		t.Errorf("last_stop %v: want requested_at, completed_at and a durability", stop)
	case stopped.GetExpiration().GetPolicy() != nil || stopped.GetExpiration().GetRevision() != 2:
		t.Errorf("expiration after the policy fired: %v, want no policy at revision 2", stopped.GetExpiration())
	}
}
