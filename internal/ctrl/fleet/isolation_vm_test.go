package fleet_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/testenv"
)

// vmWait bounds what waits for a VM to boot under TCG on a loaded machine.
const vmWait = 4 * time.Minute

// waitLong polls cond for as long as a VM may take.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(vmWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type vmEnv struct {
	*lifecycleEnv
	t *testing.T
}

func (e *vmEnv) workspace(id string) *ctrlv1.Workspace {
	res, err := e.c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.GetWorkspace()
}

func (e *vmEnv) command(id string) *ctrlv1.WorkspaceCommand {
	res, err := e.c.Workspaces.GetWorkspaceCommand(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{CommandId: id}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.GetCommand()
}

// waitForANode waits until command commandID waits for a node to take it.
func (e *vmEnv) waitForANode(commandID, what string) {
	e.t.Helper()
	testenv.WaitFor(e.t, what, func() bool {
		k := e.command(commandID)
		return k.GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_WAITING && strings.Contains(k.GetWaitingFor(), "a node to take it")
	})
}

func (e *vmEnv) waitState(id string, want ctrlv1.WorkspaceState) *ctrlv1.Workspace {
	var w *ctrlv1.Workspace
	waitLong(e.t, fmt.Sprintf("workspace %s %s", id, want), func() bool {
		w = e.workspace(id)
		if w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED && want != w.GetState() {
			e.t.Fatalf("workspace failed: %v", w.GetFailure())
		}
		return w.GetState() == want
	})
	return w
}

// waitStarted waits until Workspace id is AVAILABLE, and checks that the
// transaction that made it so recorded the node's answer to the start of
// command commandID as well (fleet.Answer.Record): both are read in one
// transaction, before the operation sweep sends the operation again (a
// second later) and records the node's second answer.
func (e *vmEnv) waitStarted(id, commandID string) {
	var op *storev1.NodeOperation
	waitLong(e.t, "workspace "+id+" AVAILABLE", func() bool {
		available := false
		mustTx(e.t, e.c.Ctrl.Store(), func(tx *store.Tx) error {
			w, err := tx.GetWorkspace(id, false)
			if err != nil || w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
				if w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED {
					e.t.Fatalf("workspace failed: %v", w.GetFailure())
				}
				return err
			}
			available = true
			op, err = tx.GetNodeOperation(commandID+"/start", false)
			return err
		})
		return available
	})
	if op.GetState() != storev1.NodeOperationState_NODE_OPERATION_STATE_SUCCEEDED || op.GetAnsweredAt() == nil {
		e.t.Errorf("StartExecution once %s was AVAILABLE: %v answered at %v, want the node's answer recorded", id, op.GetState(), op.GetAnsweredAt())
	}
}

func (e *vmEnv) volume(id string) *ctrlv1.Volume {
	res, err := e.c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: id}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.GetVolume()
}

// The node lifecycle around a real Workspace on a real microVM: a drain
// holds its placement back, DRAINING lasts while it runs; isolating the
// node once its host is off fails the Workspace as unavailable and
// retryable, releases its Volume and writable layer, fails the command
// still addressed to the node; another node reaching the same pool then
// runs it.
func TestIsolatingANodeFailsItsWorkspacesAsUnavailableAndRetryable(t *testing.T) {
	e := newVMEnv(t)
	c := e.c
	n := e.startNode("node-a", "")

	if _, err := e.drain("drain-1", "node-a"); err != nil {
		t.Fatal(err)
	}
	created, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(createRequest("create-1")))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	e.waitForANode("create-1", "the create to wait for a node")
	if got := e.workspace(id).GetState(); got != ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING {
		t.Errorf("a Workspace whose only node is DRAINED is %v, want CREATING", got)
	}

	if _, err := c.Nodes.CancelNodeDrain(ctx, connect.NewRequest(&operatorv1.CancelNodeDrainRequest{Command: cmd("undrain-1"), NodeId: "node-a"})); err != nil {
		t.Fatal(err)
	}
	w := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	volumeID := w.GetSpec().GetVolume().GetVolumeId()
	if got := e.volume(volumeID).GetState(); got != ctrlv1.VolumeState_VOLUME_STATE_ATTACHED {
		t.Fatalf("volume of a running Workspace: %v", got)
	}

	if d, err := e.drain("drain-2", "node-a"); err != nil || d.GetRegistration().GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_DRAINING {
		t.Errorf("draining a node that runs a Workspace: %v %v, want DRAINING", d, err)
	}
	if _, err := e.retire("retire-1", "node-a"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("retiring a DRAINING node: %v, want failed_precondition", err)
	}
	if _, err := c.Nodes.CancelNodeDrain(ctx, connect.NewRequest(&operatorv1.CancelNodeDrainRequest{Command: cmd("undrain-2"), NodeId: "node-a"})); err != nil {
		t.Fatal(err)
	}
	incarnation := c.Registration(t, "node-a").GetIncarnation()
	if _, err := e.isolate("iso-0", "node-a", incarnation); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("isolating a connected node: %v, want failed_precondition", err)
	}
	if got := e.workspace(id).GetState(); got != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
		t.Errorf("a refused isolation moved the Workspace to %v", got)
	}

	// The host goes off; a stop sent meanwhile is addressed to the node,
	// which will never answer it.
	n.Stop(t)
	n.PowerOff()
	c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	if _, err := c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmd("stop-1"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the stop to be sent to node-a", func() bool {
		return strings.Contains(e.command("stop-1").GetProgress(), "node node-a")
	})

	if got := c.Registration(t, "node-a").GetStoragePools()[0].GetHeldObjectCount(); got != 2 {
		t.Errorf("held_object_count before the isolation: %d, want 2 (the Volume and the writable layer)", got)
	}
	res, err := e.isolate("iso-1", "node-a", incarnation)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.GetRegistration().GetStoragePools()[0].GetHeldObjectCount(); got != 0 {
		t.Errorf("held_object_count after the isolation: %d, want 0", got)
	}
	if res.GetFailedWorkspaces() != 1 || res.GetReleasedVolumes() != 1 || res.GetReleasedRetainedLayers() != 1 {
		t.Errorf("isolation released volumes %d, layers %d, failed %d Workspaces; want 1 each",
			res.GetReleasedVolumes(), res.GetReleasedRetainedLayers(), res.GetFailedWorkspaces())
	}
	failed := e.workspace(id)
	if f := failed.GetFailure(); failed.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED ||
		f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE || !f.GetRetryable() {
		t.Errorf("Workspace after the isolation: %v, failure %v; want FAILED, unavailable and retryable", failed.GetState(), f)
	}
	if got := e.volume(volumeID).GetState(); got != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
		t.Errorf("Volume after the isolation: %v, want AVAILABLE (its use right released)", got)
	}
	testenv.WaitFor(t, "the stop addressed to the isolated node to fail", func() bool {
		return e.command("stop-1").GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED
	})
	if f := e.command("stop-1").GetFailure(); f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE || !f.GetRetryable() {
		t.Errorf("failure of the stop addressed to the isolated node: %v", f)
	}
	if again, err := e.isolate("iso-1", "node-a", incarnation); err != nil || again.GetFailedWorkspaces() != 1 {
		t.Errorf("replay: %v %v", again, err)
	}

	// Its objects are in pool "default", which only node-a reached: a
	// start waits for a host reaching that pool.
	e.start("start-1", id)
	e.waitForANode("start-1", "the start to wait for a node reaching the pool")
	// Another host reaching the same pool (node-b, on node-a's pool
	// directory) starts it, from the Volume and layer node-a left.
	b := e.startNode("node-b", n.PoolDir)
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if dirs, _ := filepath.Glob(filepath.Join(b.StateDir, "executions", id+".*")); len(dirs) != 1 {
		t.Errorf("executions of %s on node-b: %v, want one", id, dirs)
	}

	// node-a comes back with a new incarnation, no longer isolated.
	c.StartNode(t, "node-a", n.StateDir, n.PoolDir)
	if reg := c.Registration(t, "node-a"); reg.GetIsolated() || reg.GetIncarnation() != incarnation+1 {
		t.Errorf("node back: isolated %v incarnation %d", reg.GetIsolated(), reg.GetIncarnation())
	}
}
