package sim_test

import (
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/sim"
	"github.com/kibotos/kibotos/internal/testenv"
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

// "Stopping and starting the Workspace recovers one that stays saturated
// regardless" (workspaces.md O32): the start boots a new execution, whose
// guest reports for itself, and nothing of the saturated execution's
// report is carried into it. The simulated guest of the first execution
// reports SATURATED with a kill; after a stop and a start the Workspace
// reads the new execution's NORMAL, with no kill and no saturated_since.
func TestAStopAndAStartRecoverASaturatedGuest(t *testing.T) {
	var mu sync.Mutex
	first := ""
	since := timestamppb.New(time.Now().Add(-time.Minute))
	c, _ := oneNode(t, func(cfg *sim.Config) {
		cfg.GuestMemory = func(instanceID string) *guestv1.MemoryReport {
			mu.Lock()
			defer mu.Unlock()
			if first == "" {
				first = instanceID
			}
			if instanceID != first {
				return &guestv1.MemoryReport{Condition: guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL}
			}
			return &guestv1.MemoryReport{Condition: guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED, SaturatedSince: since, KillCount: 1,
				LatestKill: &guestv1.MemoryKill{KilledAt: since, Pid: 41, Command: "hog", RssBytes: 200 * mib}}
		}
	})
	id := createWithoutVolume(t, c, "create")
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	saturated := ctrlv1.GuestMemoryCondition_GUEST_MEMORY_CONDITION_SATURATED
	testenv.WaitFor(t, "the first execution's guest read SATURATED", func() bool {
		res, err := c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
		return err == nil && res.Msg.GetWorkspace().GetGuestObservation().GetMemoryCondition() == saturated
	})
	w := restart(t, c, id, "")
	obs := w.GetGuestObservation()
	if w.GetGeneration() != 2 || obs.GetMemoryCondition() != ctrlv1.GuestMemoryCondition_GUEST_MEMORY_CONDITION_NORMAL ||
		obs.GetMemorySaturatedSince() != nil || obs.GetMemoryKillCount() != 0 || obs.GetLatestMemoryKill() != nil {
		t.Errorf("after a stop and a start (generation %d): %v, want the new guest's NORMAL with no kill", w.GetGeneration(), obs)
	}
}
