package sim_test

import (
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
)

// A running Workspace deleted with the API's default Volume (NEW, deleted
// with it) keeps nothing of its execution once DELETED: no guest
// observation, no network policy status ("absent when there is no current
// execution"); its Volume is DELETED, its block file gone, and it names no
// Workspace ("bound_workspace_id names the non-deleted Workspace").
func TestADeletedWorkspaceKeepsNothingOfItsExecution(t *testing.T) {
	c, f := oneNode(t, nil)
	res, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "create"}, Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{MemoryBytes: 256 * mib}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	volID := res.Msg.GetWorkspace().GetSpec().GetVolume().GetVolumeId()
	if w := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE); w.GetGuestObservation() == nil {
		t.Fatalf("AVAILABLE without its observations: %v", w)
	}
	if _, err := c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "delete"}, WorkspaceId: id,
	})); err != nil {
		t.Fatal(err)
	}
	w := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED)
	if w.GetGuestObservation() != nil || w.GetNetworkPolicyStatus() != nil || len(w.GetEgressObservations())+len(w.GetResolverObservations()) != 0 {
		t.Errorf("DELETED with observations of its execution: guest %v, policy status %v", w.GetGuestObservation(), w.GetNetworkPolicyStatus())
	}
	vol, err := c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: volID}))
	if err != nil || vol.Msg.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_DELETED || vol.Msg.GetVolume().GetBoundWorkspaceId() != "" {
		t.Errorf("its Volume after the delete: %v %v, want DELETED, bound to none", vol.Msg.GetVolume(), err)
	}
	if f.HasBlockFile(&nodev1.BlockFileRef{StoragePool: sharedPool, Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME, ObjectId: volID}) {
		t.Errorf("the deleted Volume %s still has its block file", volID)
	}
}
