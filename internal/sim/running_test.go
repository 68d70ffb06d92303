package sim_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

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

// An expiration policy is independent of execution generation: a stop and
// a start leave it, its deadline and its revision as they were.
func TestAnExpirationOutlivesAStopAndAStart(t *testing.T) {
	c, _ := oneNode(t, nil)
	deadline := timestamppb.New(time.Now().Add(time.Hour).Truncate(time.Second))
	res, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "create"}, Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources:  &ctrlv1.ResourceRequest{MemoryBytes: 256 * mib},
			Volume:     &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE},
			Expiration: &ctrlv1.WorkspaceExpirationPolicy{Action: ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_DELETE, Deadline: deadline},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	before := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE).GetExpiration()
	w := restart(t, c, id, "")
	if !proto.Equal(w.GetExpiration(), before) || w.GetGeneration() != 2 || !w.GetExpiration().GetPolicy().GetDeadline().AsTime().Equal(deadline.AsTime()) {
		t.Errorf("the expiration after a stop and a start (generation %d): %v, want %v", w.GetGeneration(), w.GetExpiration(), before)
	}
}
