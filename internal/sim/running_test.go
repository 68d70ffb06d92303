package sim_test

import (
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

// A Workspace that holds an execution refuses a new Volume binding and a
// start with failed_precondition carrying the Workspace as it is, and
// changes nothing: the binding changes "only while it holds no execution".
func TestARunningWorkspaceRefusesABindingAndAStart(t *testing.T) {
	c, _ := oneNode(t, nil)
	id := createWithoutVolume(t, c, "create")
	w := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	_, err := c.Workspaces.UpdateWorkspaceVolumeBinding(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceVolumeBindingRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "rebind"}, WorkspaceId: id, ExpectedBindingRevision: w.GetSpec().GetBindingRevision(),
		Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: "vol-any"},
	}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || apierr.DetailOf(err).GetObservedWorkspace().GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
		t.Errorf("a binding of a running Workspace: %v (detail %v), want failed_precondition with the Workspace", err, apierr.DetailOf(err))
	}
	_, err = c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: "start"}, WorkspaceId: id}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || apierr.DetailOf(err).GetObservedWorkspace().GetWorkspaceId() != id {
		t.Errorf("a start of a running Workspace: %v, want failed_precondition with the Workspace", err)
	}
	if after := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE); after.GetSpec().GetBindingRevision() != w.GetSpec().GetBindingRevision() || after.GetGeneration() != 1 {
		t.Errorf("the refusals changed the Workspace: binding_revision %d, generation %d", after.GetSpec().GetBindingRevision(), after.GetGeneration())
	}
}
