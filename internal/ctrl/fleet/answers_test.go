package fleet_test

import (
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/testenv"
)

// A node's answer to a create's StartExecution reaches the step waiting
// for it in memory before anything records it, and the step records it in
// the transaction that ends the command: no read ever sees the command
// ended with its operation still unanswered (the node's failure here: the
// catalog's kernel does not boot). The first create makes its NEW Volume
// first and so goes the long way (AwaitUnrecorded); the second, without a
// Volume, is placed and started in one step (AwaitDecided).
func TestAStartsAnswerIsRecordedWithTheCommandsEnd(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c := testenv.New(t, db, fastFleet())
		c.StartNode(t, "node-a", "", "")
		c.UnbootableCatalog(t)
		for id, volume := range map[string]ctrlv1.WorkspaceVolumeMode{
			"create-1": ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW, "create-2": ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE,
		} {
			if _, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
				Command: cmd(id), Spec: &ctrlv1.WorkspaceCreateSpec{
					Resources: &ctrlv1.ResourceRequest{CpuMillis: 100, MemoryBytes: 128 << 20}, Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: volume},
				},
			})); err != nil {
				t.Fatal(err)
			}
			var op *storev1.NodeOperation
			var failure *ctrlv1.WorkspaceFailure
			testenv.WaitFor(t, id+" to end", func() bool {
				ended := false
				mustTx(t, c.Ctrl.Store(), func(tx *store.Tx) error {
					command, err := tx.GetCommand(id, false)
					if err != nil || !command.Final() {
						return err
					}
					ended, failure = true, command.GetFailure()
					op, err = tx.GetNodeOperation(id+"/start", false)
					return err
				})
				return ended
			})
			if op.GetState() != storev1.NodeOperationState_NODE_OPERATION_STATE_FAILED || op.GetAnsweredAt() == nil || op.GetMessage() == "" {
				t.Errorf("StartExecution once %s ended: %v, want the node's failure recorded", id, op)
			}
			// The VM was launched and its guest never became ready.
			if failure.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_WAITING_FOR_READINESS {
				t.Errorf("%s failed %v, want at FAILURE_STAGE_WAITING_FOR_READINESS", id, failure)
			}
		}
	})
}
