package storetest

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// RunNodeLifecycle runs the store tests of the node lifecycle (drain,
// executions by node, what nodes' artifact caches hold) against databases
// from b.
func RunNodeLifecycle(t *testing.T, b Backend) {
	for name, fn := range map[string]func(*testing.T, string){
		"NodeDraining":           testNodeDraining,
		"ExecutionsByNode":       testExecutionsByNode,
		"RuntimeNodesBackfilled": testRuntimeNodesBackfilled,
		"NodeArtifacts":          testNodeArtifacts,
		"OperationAnsweredOnce":  testOperationAnsweredOnce,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.DSN(t))
		})
	}
}

func testNodeDraining(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		for _, id := range []string{"node-a", "node-b"} {
			if err := tx.PutNode(&operatorv1.NodeRegistration{NodeId: id}); err != nil {
				return err
			}
		}
		if err := tx.SetNodeDraining("node-b", true); err != nil {
			return err
		}
		if err := tx.SetNodeDraining("node-none", true); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("draining an unknown node: %v, want not found", err)
		}
		n, err := tx.GetNode("node-b", false)
		if err != nil {
			return err
		}
		if err := tx.PutNode(n); err != nil { // writing the registration keeps the drain
			return err
		}
		return nil
	})
	draining := func() map[string]bool {
		var got map[string]bool
		mustTx(t, s, func(tx *store.Tx) error {
			var err error
			got, err = tx.DrainingNodes()
			return err
		})
		return got
	}
	if got := draining(); len(got) != 1 || !got["node-b"] {
		t.Errorf("draining nodes %v, want node-b", got)
	}
	mustTx(t, s, func(tx *store.Tx) error { return tx.SetNodeDraining("node-b", false) })
	if got := draining(); len(got) != 0 {
		t.Errorf("draining nodes after the drain was cancelled: %v", got)
	}
}

func runtimeOn(workspaceID, nodeID string) *storev1.WorkspaceRuntime {
	r := &storev1.WorkspaceRuntime{WorkspaceId: workspaceID, LayerPool: "pool-a"}
	if nodeID != "" {
		r.NodeId, r.InstanceId = nodeID, workspaceID+".1"
	}
	return r
}

func testExecutionsByNode(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		for _, r := range []*storev1.WorkspaceRuntime{
			runtimeOn("ws-b", "node-a"), runtimeOn("ws-a", "node-a"), runtimeOn("ws-c", "node-b"), runtimeOn("ws-d", ""),
		} {
			if err := tx.PutRuntime(r); err != nil {
				return err
			}
		}
		// An execution that ended no longer counts on its node.
		return tx.PutRuntime(runtimeOn("ws-c", ""))
	})
	mustTx(t, s, func(tx *store.Tx) error {
		on, err := tx.NodeExecutions("node-a")
		if err != nil {
			return err
		}
		if len(on) != 2 || on[0].GetWorkspaceId() != "ws-a" || on[1].GetWorkspaceId() != "ws-b" {
			t.Errorf("executions on node-a: %v, want ws-a and ws-b", on)
		}
		if on, err := tx.NodeExecutions("node-b"); err != nil || len(on) != 0 {
			t.Errorf("executions on node-b after it ended: %v %v", on, err)
		}
		return nil
	})
}

// testRuntimeNodesBackfilled takes a database back to before migration 4
// (its column and index dropped, the migration forgotten) with runtime rows
// whose node only the body names; opening it again finds their executions.
func testRuntimeNodesBackfilled(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.PutRuntime(runtimeOn("ws-a", "node-a")); err != nil {
			return err
		}
		return tx.PutRuntime(runtimeOn("ws-b", ""))
	})
	s.Close()
	db, _ := openRaw(t, dsn)
	execRaw(t, db,
		"DROP INDEX workspace_runtime_node",
		"ALTER TABLE workspace_runtime DROP COLUMN node_id",
		"ALTER TABLE nodes DROP COLUMN draining",
		"DELETE FROM schema_migrations WHERE version = 4")
	db.Close()
	again := Open(t, dsn)
	mustTx(t, again, func(tx *store.Tx) error {
		on, err := tx.NodeExecutions("node-a")
		if err != nil || len(on) != 1 || on[0].GetWorkspaceId() != "ws-a" {
			t.Errorf("executions on node-a after the backfill: %v %v", on, err)
		}
		return err
	})
}

// testOperationAnsweredOnce records an operation and answers it without
// reading it (AnswerOperation): only its node's answer to it while it is
// PENDING is written, once; the pending list loses it then.
func testOperationAnsweredOnce(t *testing.T, dsn string) {
	s := Open(t, dsn)
	op := &storev1.NodeOperation{OperationId: "cmd-1/start", NodeId: "node-1", CommandId: "cmd-1",
		State: storev1.NodeOperationState_NODE_OPERATION_STATE_PENDING, CreatedAt: timestamppb.Now()}
	mustTx(t, s, func(tx *store.Tx) error {
		_, err := tx.InsertNodeOperation(op)
		return err
	})
	answered := func(op *storev1.NodeOperation) bool {
		var ok bool
		mustTx(t, s, func(tx *store.Tx) error {
			var err error
			ok, err = tx.AnswerOperation(op)
			return err
		})
		return ok
	}
	elsewhere := proto.CloneOf(op)
	elsewhere.NodeId, elsewhere.State = "node-2", storev1.NodeOperationState_NODE_OPERATION_STATE_FAILED
	if answered(elsewhere) {
		t.Error("another node's answer was written")
	}
	done := proto.CloneOf(op)
	done.State, done.Message = storev1.NodeOperationState_NODE_OPERATION_STATE_SUCCEEDED, "first"
	if !answered(done) {
		t.Fatal("the node's answer to its PENDING operation was not written")
	}
	again := proto.CloneOf(done)
	again.State, again.Message = storev1.NodeOperationState_NODE_OPERATION_STATE_FAILED, "second"
	if answered(again) {
		t.Error("an answered operation was answered again")
	}
	mustTx(t, s, func(tx *store.Tx) error {
		stored, err := tx.GetNodeOperation("cmd-1/start", false)
		if err != nil {
			return err
		}
		if stored.GetState() != storev1.NodeOperationState_NODE_OPERATION_STATE_SUCCEEDED || stored.GetMessage() != "first" {
			t.Errorf("stored %v %q, want the first answer", stored.GetState(), stored.GetMessage())
		}
		pending, err := tx.PendingNodeOperations("node-1", 10)
		if err != nil {
			return err
		}
		if len(pending) != 0 {
			t.Errorf("still pending after its answer: %v", pending)
		}
		return nil
	})
}
