package fleet

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// A node's answer handed to an expectation whose transaction then failed
// is recorded, and its command woken. The case: a ctrl crashed after it
// admitted a create and recorded its StartExecution; the next ctrl sends
// the operation to the node again as its session starts, while the
// client's replay of the create is admitted in a batch whose Begin
// expects the same operation (its id is the command's) before the batch
// finds the command admitted and fails. The node answers once: dropped
// with the expectation, its answer was lost, and the command waited for
// ever.
func TestAnAnswerHandedToAForgottenExpectationIsRecorded(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ctrl.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	waker := &countingWaker{}
	f := New(st, waker, slog.New(slog.DiscardHandler), Config{}, Deps{})
	const opID = "create-1/start"
	now := time.Now()
	err = st.Tx(ctx, func(tx *store.Tx) error {
		if err := tx.PutNode(&operatorv1.NodeRegistration{NodeId: "node-0", Admission: operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED,
			Session: &operatorv1.NodeSessionSummary{Live: true, ConnectedAt: timestamppb.New(now)}}); err != nil {
			return err
		}
		if _, err := tx.InsertCommand(&store.CommandRow{Command: &storev1.Command{CommandId: "create-1", Kind: "CreateWorkspace",
			State: storev1.CommandState_COMMAND_STATE_RUNNING, AdmittedAt: timestamppb.New(now), UpdatedAt: timestamppb.New(now)},
			InputHash: []byte("h"), NextAttemptAt: now.Add(time.Hour), LeaseUntil: now.Add(time.Hour), LeaseOwner: "a ctrl that crashed"}); err != nil {
			return err
		}
		body, err := anypb.New(&nodev1.StartExecution{InstanceId: "ws-1.1"})
		if err != nil {
			return err
		}
		_, err = StartOperation(tx, now, opID, "node-0", "create-1", body)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	d := f.Expect("create-1", "start") // the replay's Begin
	if err := f.operationAnswered(ctx, &session{nodeID: "node-0"}, &nodev1.CommandResult{OperationId: opID}); err != nil {
		t.Fatal(err)
	}
	if op := readOperation(t, st, opID); op.GetState() != storev1.NodeOperationState_NODE_OPERATION_STATE_PENDING {
		t.Fatalf("the answer was recorded before the expectation was forgotten (%v): the test no longer hands it over", op.GetState())
	}
	d.Forget() // the replay's transaction failed

	// Recorded, then the runner kicked, by the goroutine Forget started.
	deadline := time.Now().Add(30 * time.Second)
	for readOperation(t, st, opID).GetState() == storev1.NodeOperationState_NODE_OPERATION_STATE_PENDING || waker.kicks.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the answer handed to the forgotten expectation: operation %v, runner kicked %d times; want it recorded and the runner kicked",
				readOperation(t, st, opID).GetState(), waker.kicks.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if op := readOperation(t, st, opID); op.GetState() != storev1.NodeOperationState_NODE_OPERATION_STATE_SUCCEEDED {
		t.Errorf("the operation recorded %v, want the node's answer (SUCCEEDED)", op.GetState())
	}
	err = st.Tx(ctx, func(tx *store.Tx) error {
		c, err := tx.GetCommand("create-1", false)
		if err == nil && c.NextAttemptAt.After(time.Now()) {
			t.Errorf("the command was not woken with the answer: next attempt at %v", c.NextAttemptAt)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func readOperation(t *testing.T, st *store.Store, id string) *storev1.NodeOperation {
	t.Helper()
	var op *storev1.NodeOperation
	if err := st.Tx(context.Background(), func(tx *store.Tx) error {
		var err error
		op, err = tx.GetNodeOperation(id, false)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return op
}

// countingWaker counts the runner's kicks.
type countingWaker struct{ kicks atomic.Int32 }

func (w *countingWaker) Wake(context.Context, ...string) error { return nil }
func (w *countingWaker) WakeWaiting(context.Context) error     { return nil }
func (w *countingWaker) Kick()                                 { w.kicks.Add(1) }
