package sim_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/sim"
)

// A lifecycle command whose node refuses its operation fails at the stage
// of the call it belongs to (types.proto's table): a create's start at
// CREATING, a start's at STARTING, a stop's at STOPPING, and the forced
// stop of a running Workspace being deleted at DELETING. A stop refused
// leaves the Workspace AVAILABLE (its execution runs on), a delete
// refused leaves it FAILED.
func TestALifecycleCommandANodeRefusesFailsAtItsStage(t *testing.T) {
	var mu sync.Mutex
	refused := map[string]bool{} // the operations' message names to refuse
	refuse := func(names ...proto.Message) {
		mu.Lock()
		defer mu.Unlock()
		clear(refused)
		for _, n := range names {
			refused[string(proto.MessageName(n))] = true
		}
	}
	c, _ := oneNode(t, func(cfg *sim.Config) {
		cfg.Refuse = func(_ string, op proto.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if refused[string(proto.MessageName(op))] {
				return errors.New("refused by the test")
			}
			return nil
		}
	})
	call := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	failedAt := func(id, command string, want ctrlv1.FailureStage) {
		t.Helper()
		res, err := c.Workspaces.WaitWorkspace(ctx, connect.NewRequest(&ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, CommandId: command, Timeout: durationpb.New(time.Minute)}))
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Msg.GetCommand(); got.GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED || got.GetFailure().GetStage() != want {
			t.Errorf("%s refused by its node: %v (%v), want FAILED at %v", command, got.GetState(), got.GetFailure(), want)
		}
	}
	start := (*nodev1.StartExecution)(nil)
	stop := (*nodev1.StopExecution)(nil)

	refuse(start)
	created := createWithoutVolume(t, c, "create-refused")
	failedAt(created, "create-refused", ctrlv1.FailureStage_FAILURE_STAGE_CREATING)

	refuse()
	id := createWithoutVolume(t, c, "create")
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	refuse(stop)
	_, err := c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmdID("stop-refused"), WorkspaceId: id}))
	call(err)
	failedAt(id, "stop-refused", ctrlv1.FailureStage_FAILURE_STAGE_STOPPING)
	// Its execution runs on: AVAILABLE again, without that stop as its
	// last stop, and it stops again.
	if w := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE); w.GetLastStop() != nil {
		t.Errorf("after a stop its node refused: last_stop %v, want none", w.GetLastStop())
	}

	refuse()
	_, err = c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmdID("stop"), WorkspaceId: id}))
	call(err)
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	refuse(start)
	_, err = c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmdID("start-refused"), WorkspaceId: id}))
	call(err)
	failedAt(id, "start-refused", ctrlv1.FailureStage_FAILURE_STAGE_STARTING)

	refuse()
	_, err = c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmdID("start"), WorkspaceId: id}))
	call(err)
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	refuse(stop)
	_, err = c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: cmdID("delete-refused"), WorkspaceId: id}))
	call(err)
	failedAt(id, "delete-refused", ctrlv1.FailureStage_FAILURE_STAGE_DELETING)
	// FAILED with why, as a removal the node fails leaves it, not
	// DELETING with nothing in progress; a delete sent again goes on.
	res, err := c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
	call(err)
	if w := res.Msg.GetWorkspace(); w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED || w.GetFailure().GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_DELETING {
		t.Errorf("after a delete whose stop its node refused: %v (%v), want FAILED at DELETING", w.GetState(), w.GetFailure())
	}
	refuse()
	_, err = c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: cmdID("delete"), WorkspaceId: id}))
	call(err)
	res2, err := c.Workspaces.WaitWorkspace(ctx, connect.NewRequest(&ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, States: []ctrlv1.WorkspaceState{ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED}, Timeout: durationpb.New(time.Minute)}))
	if err != nil || !res2.Msg.GetReached() {
		t.Errorf("the delete sent again: %v, %v; want DELETED", res2.Msg.GetWorkspace().GetState(), err)
	}
}

func cmdID(id string) *ctrlv1.CommandMetadata { return &ctrlv1.CommandMetadata{CommandId: id} }
