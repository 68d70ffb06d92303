package fleet_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/testenv"
)

// A node agent that stops leaves its VM running; once the operator
// isolated the node, its Workspace failed and ctrl let go of that VM's
// Instance. When the node comes back with a new incarnation it re-attaches
// the VM, reports it, and ctrl tells it to stop it (forced) with one
// operation. The stop is a power-off and nothing more: the Workspace stays
// as the isolation left it, its Volume and writable layer stay in their
// pool, and it starts again on the node from them.
func TestANodeBackFromIsolationStopsTheVMItsOldIncarnationLeft(t *testing.T) {
	e := newVMEnv(t)
	c := e.c
	n := e.startNode("node-a", "")

	created, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(createRequest("create-1")))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	w := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	volumeID := w.GetSpec().GetVolume().GetVolumeId()
	runDirs, _ := filepath.Glob(filepath.Join(n.StateDir, "executions", id+".*"))
	if len(runDirs) != 1 {
		t.Fatalf("executions of %s on node-a: %v, want one", id, runDirs)
	}
	runDir := runDirs[0]
	instance := filepath.Base(runDir)

	// The agent stops; its VM lives on. A waiter for UNKNOWN is told
	// when the session ends, though nothing writes the Workspace.
	unknown := ctrlv1.WorkspaceState_WORKSPACE_STATE_UNKNOWN
	waited := make(chan *ctrlv1.WaitWorkspaceResponse, 1)
	go func() {
		res, err := c.Workspaces.WaitWorkspace(ctx, connect.NewRequest(&ctrlv1.WaitWorkspaceRequest{
			WorkspaceId: id, States: []ctrlv1.WorkspaceState{unknown}, Timeout: durationpb.New(time.Minute)}))
		if err != nil {
			t.Error(err)
		}
		waited <- res.Msg
	}()
	incarnation := c.Registration(t, "node-a").GetIncarnation()
	n.Stop(t)
	if testenv.VMProcess(runDir) == 0 {
		t.Fatal("the VM ended with its node agent")
	}
	c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	// Its Workspace reads UNKNOWN: ctrl cannot observe its execution. And
	// there is no sample to take without a live session.
	if got := <-waited; !got.GetReached() || got.GetWorkspace().GetState() != unknown {
		t.Errorf("a wait for UNKNOWN across the session's end: reached %t, %v", got.GetReached(), got.GetWorkspace().GetState())
	}
	if got := e.workspace(id).GetState(); got != unknown {
		t.Errorf("a Workspace whose node has no live session: %v, want UNKNOWN", got)
	}
	metrics := ctrlv1connect.NewMetricsServiceClient(http.DefaultClient, c.Ctrl.Client.WorkspaceEndpoint, connect.WithInterceptors(auth.Bearer(c.Ctrl.Client.Token)))
	_, err = metrics.GetWorkspaceMetrics(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceMetricsRequest{WorkspaceId: id}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "no live control session") {
		t.Errorf("metrics of a Workspace whose node has no live session: %v", err)
	}
	if _, err := e.isolate("iso-1", "node-a", incarnation); err != nil {
		t.Fatal(err)
	}
	isolated := e.workspace(id)
	if isolated.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED {
		t.Fatalf("Workspace after the isolation: %v", isolated.GetState())
	}

	// The node comes back, re-attaches the VM and is told to stop it.
	c.StartNode(t, "node-a", n.StateDir, n.PoolDir)
	waitLong(t, "the VM of the old incarnation to be stopped", func() bool { return testenv.VMProcess(runDir) == 0 })
	opID := fleet.StrayStopOperationID("node-a", incarnation+1, instance)
	var op *storev1.NodeOperation
	waitLong(t, "node-a to answer the stop", func() bool {
		mustTx(t, c.Ctrl.Store(), func(tx *store.Tx) error {
			var err error
			op, err = tx.GetNodeOperation(opID, false)
			return err
		})
		return op.GetState() != storev1.NodeOperationState_NODE_OPERATION_STATE_PENDING
	})
	if op.GetState() != storev1.NodeOperationState_NODE_OPERATION_STATE_SUCCEEDED || op.GetCommandId() != "" {
		t.Errorf("the stop of the stray execution: %v", op)
	}

	// Nothing else changed: the Workspace is as the isolation left it, its
	// Volume is available and its block files are where they were.
	after := e.workspace(id)
	if after.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED || after.GetLastStop() != nil ||
		after.GetFailure().GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE || after.GetGeneration() != isolated.GetGeneration() {
		t.Errorf("Workspace after the stray's stop: %v, failure %v, last stop %v, generation %d (was %d)",
			after.GetState(), after.GetFailure(), after.GetLastStop(), after.GetGeneration(), isolated.GetGeneration())
	}
	if got := e.volume(volumeID).GetState(); got != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
		t.Errorf("Volume after the stray's stop: %v, want AVAILABLE", got)
	}
	for _, path := range []string{n.PoolFile(volumeID), filepath.Join(n.PoolDir, "layers", id+".img")} {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("block file after the stray's stop: %v", err)
		}
	}

	// It starts again on the node, from the layer the stray left.
	e.start("start-1", id)
	restarted := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	for _, tier := range restarted.GetRetentionTiers() {
		if tier.GetKind() == ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_BEST_EFFORT && tier.GetContinuity() != ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_CONTINUED {
			t.Errorf("writable layer after the restart: %v, want CONTINUED", tier)
		}
	}
}
