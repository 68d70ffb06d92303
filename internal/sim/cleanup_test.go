package sim_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/sim"
	"github.com/kibotos/kibotos/internal/testenv"
)

// A delete whose removal the node fails (a Volume's block file, a
// stopped Workspace's writable layer) fails at
// FAILURE_STAGE_OBSERVING_CLEANUP: the stage of "ctrl waits for a node to
// confirm removal", not of the delete's admission.
func TestARemovalTheNodeFailsIsAtObservingCleanup(t *testing.T) {
	var refuse atomic.Bool
	c, _ := oneNode(t, func(cfg *sim.Config) {
		cfg.Refuse = func(_ string, op proto.Message) error {
			if _, ok := op.(*nodev1.RemoveBlockFile); ok && refuse.Load() {
				return errors.New("the block file is busy")
			}
			return nil
		}
	})
	vol, err := c.Volumes.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "volume"}}))
	if err != nil {
		t.Fatal(err)
	}
	volID := vol.Msg.GetVolume().GetVolumeId()
	getVolume := func() *ctrlv1.Volume {
		got, err := c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: volID}))
		if err != nil {
			t.Fatal(err)
		}
		return got.Msg.GetVolume()
	}
	testenv.WaitFor(t, "the Volume AVAILABLE", func() bool { return getVolume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE })
	id := createWithoutVolume(t, c, "create")
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if _, err := c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: "stop"}, WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)

	refuse.Store(true)
	if _, err := c.Volumes.DeleteVolume(ctx, connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "delete-volume"}, VolumeId: volID})); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the Volume's delete failed", func() bool { return getVolume().GetFailure() != nil })
	if f := getVolume().GetFailure(); f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_OBSERVING_CLEANUP {
		t.Errorf("the Volume's failed removal: %v, want at OBSERVING_CLEANUP", f)
	}
	if _, err := c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: "delete"}, WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	var w *ctrlv1.Workspace
	testenv.WaitFor(t, "the Workspace's delete failed", func() bool {
		res, err := c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
		if err != nil {
			return false
		}
		w = res.Msg.GetWorkspace()
		return w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED
	})
	if w.GetFailure().GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_OBSERVING_CLEANUP {
		t.Errorf("the Workspace's failed removal of its layer: %v, want at OBSERVING_CLEANUP", w.GetFailure())
	}
}
