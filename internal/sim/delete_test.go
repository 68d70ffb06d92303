package sim_test

import (
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

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

// A stop in either mode clears what the execution reported
// (workspaces.md O2: guest_observation "is absent when there is no current
// execution"), and which mode it was does not change the retention tiers
// (L7: last_stop "is a fact about that stop command only"): two
// Workspaces alike, one stopped normally and one by force, read the same
// tiers.
func TestAStoppedWorkspaceKeepsNoObservationAndItsTiersWhateverTheMode(t *testing.T) {
	c, _ := oneNode(t, nil)
	tiers := map[ctrlv1.StopMode][]*ctrlv1.RetentionTier{}
	for _, mode := range []ctrlv1.StopMode{ctrlv1.StopMode_STOP_MODE_NORMAL, ctrlv1.StopMode_STOP_MODE_FORCE} {
		id := createWithoutVolume(t, c, "create-"+mode.String())
		if w := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE); w.GetGuestObservation() == nil {
			t.Fatalf("AVAILABLE without its guest observation: %v", w)
		}
		if _, err := c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{
			Command: &ctrlv1.CommandMetadata{CommandId: "stop-" + mode.String()}, WorkspaceId: id, Mode: mode})); err != nil {
			t.Fatal(err)
		}
		w := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
		if w.GetGuestObservation() != nil || w.GetNetworkPolicyStatus() != nil {
			t.Errorf("%v stop: STOPPED with its execution's observations: guest %v, policy status %v", mode, w.GetGuestObservation(), w.GetNetworkPolicyStatus())
		}
		if w.GetLastStop().GetForce() != (mode == ctrlv1.StopMode_STOP_MODE_FORCE) {
			t.Errorf("%v stop: last_stop %v", mode, w.GetLastStop())
		}
		tiers[mode] = w.GetRetentionTiers()
	}
	normal, force := tiers[ctrlv1.StopMode_STOP_MODE_NORMAL], tiers[ctrlv1.StopMode_STOP_MODE_FORCE]
	if len(normal) != 3 || len(force) != 3 {
		t.Fatalf("tiers: %v and %v, want three each", normal, force)
	}
	for i := range normal {
		if !proto.Equal(normal[i], force[i]) {
			t.Errorf("tier %d after a normal stop %v, after a forced one %v: want the same", i, normal[i], force[i])
		}
	}
}
