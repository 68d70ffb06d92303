package workspace_test

import (
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// Volume.observation is what the Volume's holder, the node running the
// execution that has it attached, reports: HEALTHY with the capacity its
// filesystem has, DAMAGED (with why) once its block file no longer opens
// as the Volume that was created; observed_at on ctrl's clock. GetVolume
// and ListVolumes return it, command responses do not, and it is kept as
// it was while nothing holds the Volume.
func TestTheHolderOfAVolumeReportsItsObservation(t *testing.T) {
	e := newVMEnv(t)
	vol := e.newVolume("volume-1")
	id := vol.GetVolumeId()
	if vol.GetObservation() != nil {
		t.Errorf("a Volume no holder reported yet has an observation: %v", vol.GetObservation())
	}
	e.create("create-1", &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: id})
	obs := e.waitObservation(id, ctrlv1.VolumeCondition_VOLUME_CONDITION_HEALTHY)
	if at := obs.GetObservedAt().AsTime(); obs.GetCapacityBytes() != 64*mib || at.After(time.Now()) || obs.GetMessage() != "" {
		t.Errorf("HEALTHY observation %v: want the 64 MiB filesystem, observed_at on ctrl's clock, no message", obs)
	}

	labeled, err := e.c.Volumes.UpdateVolumeLabels(ctx, connect.NewRequest(&ctrlv1.UpdateVolumeLabelsRequest{
		Command: cmd("labels-1"), VolumeId: id, ExpectedLabelsRevision: e.volume(id).GetLabelsRevision(), Labels: map[string]string{"team": "a"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := labeled.Msg.GetVolume().GetObservation(); got != nil {
		t.Errorf("a command response carries the observation: %v", got)
	}
	list, err := e.c.Volumes.ListVolumes(ctx, connect.NewRequest(&ctrlv1.ListVolumesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if vols := list.Msg.GetVolumes(); len(vols) != 1 || vols[0].GetObservation().GetCondition() != ctrlv1.VolumeCondition_VOLUME_CONDITION_HEALTHY {
		t.Errorf("ListVolumes: %v, want the Volume with its HEALTHY observation", vols)
	}

	damageSuperblock(t, e.node.PoolFile(id))
	damaged := e.waitObservation(id, ctrlv1.VolumeCondition_VOLUME_CONDITION_DAMAGED)
	if damaged.GetMessage() == "" || !damaged.GetObservedAt().AsTime().After(obs.GetObservedAt().AsTime()) {
		t.Errorf("DAMAGED observation %v: want why, observed after %v", damaged, obs.GetObservedAt().AsTime())
	}

	// Nothing holds the Volume once its Workspace stopped.
	ws := e.volume(id).GetBoundWorkspaceId()
	if _, err := e.c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{
		Command: cmd("stop-1"), WorkspaceId: ws, Mode: ctrlv1.StopMode_STOP_MODE_FORCE,
	})); err != nil {
		t.Fatal(err)
	}
	e.waitState(ws, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	kept := e.volume(id).GetObservation()
	e.waitNodeObservations(2)
	if again := e.volume(id).GetObservation(); !proto.Equal(again, kept) || again.GetCondition() != ctrlv1.VolumeCondition_VOLUME_CONDITION_DAMAGED {
		t.Errorf("the observation while nothing holds the Volume: %v, want it kept as %v", again, kept)
	}
}

// waitObservation waits until Volume id's observation has condition.
func (e *vmEnv) waitObservation(id string, condition ctrlv1.VolumeCondition) *ctrlv1.VolumeObservation {
	e.t.Helper()
	var obs *ctrlv1.VolumeObservation
	e.waitLong("volume "+id+" observed "+condition.String(), func() bool {
		obs = e.volume(id).GetObservation()
		return obs.GetCondition() == condition
	})
	return obs
}

// waitNodeObservations waits until ctrl recorded n more observations of
// the node.
func (e *vmEnv) waitNodeObservations(n uint64) {
	e.t.Helper()
	from := e.c.Registration(e.t, e.node.ID).GetObservation().GetObservationVersion()
	e.waitLong("later observations of the node", func() bool {
		return e.c.Registration(e.t, e.node.ID).GetObservation().GetObservationVersion() >= from+n
	})
}

// damageSuperblock overwrites the ext4 magic number of the filesystem in
// the block file at path, as a disk fault would.
func damageSuperblock(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{0, 0}, 1024+0x38); err != nil {
		t.Fatal(err)
	}
}
