package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
)

// Answer is a node's answer to an operation: a result, or a failure. A
// failure may carry a result too, saying what the failed operation left
// (StartExecution's StartFailure).
type Answer struct {
	Result  *anypb.Any
	Failure *ctrlv1.WorkspaceFailure
	// unrecorded is the node's message when it reached the step before
	// any transaction recorded it (AwaitDecided): Record writes it.
	unrecorded *unrecorded
}

// unrecorded is a node's answer no transaction recorded yet.
type unrecorded struct {
	f *Fleet
	// from is the node that sent r; op is the operation with r's answer.
	from string
	r    *nodev1.CommandResult
	op   *storev1.NodeOperation
	// forgetReport undoes what r's report noted (session.noteStartReport).
	forgetReport func()
}

// errAnswerChanged rolls back a transaction that acted on a node's answer
// the operation's record no longer agrees with (another copy of it was
// recorded meanwhile with another outcome, or the node was isolated and
// the operation failed): the step is tried again, and reads the record.
var errAnswerChanged = errors.New("the operation's record no longer agrees with the answer the step acted on")

// Record writes the answer to its operation in tx, when it reached the
// step before any transaction recorded it: the step calls it in the
// transaction that acts on the answer, so that the answer and what it
// caused commit together (a crash before leaves the operation PENDING,
// and the node answers it again when it is sent again). It changes
// nothing for an answer already recorded.
func (a *Answer) Record(tx *store.Tx) error {
	u := a.unrecorded
	if u == nil {
		return nil
	}
	if u.op.GetNodeId() != u.from {
		return errAnswerChanged // another node's message: never recorded (recordAnswer neither)
	}
	// u.op is the operation as the step recorded it, with the answer set:
	// written over the record while it is PENDING, without reading it.
	answered, err := tx.AnswerOperation(u.op)
	if answered || err != nil {
		return err
	}
	stored, err := tx.GetNodeOperation(u.op.GetOperationId(), false)
	if err != nil {
		return err
	}
	if stored.GetState() != u.op.GetState() {
		return errAnswerChanged
	}
	return nil // recorded already, with this outcome
}

// ForgetReport is for a start's answer whose report the step did not
// record as the execution's first observation (its end failed, or the
// report is not of the execution it started): the node's next
// observation is then applied as any other.
func (a *Answer) ForgetReport() {
	if u := a.unrecorded; u != nil && u.forgetReport != nil {
		u.forgetReport()
	}
}

// Keep records the answer in a transaction of its own and wakes the
// command, when the transaction that was to Record it failed: the step
// that acted on it ends with that error, and the command, tried again,
// reads the answer instead of waiting for the node to send it again.
func (a *Answer) Keep(ctx context.Context) {
	u := a.unrecorded
	if u == nil {
		return
	}
	_ = u.f.store.Tx(context.WithoutCancel(ctx), func(tx *store.Tx) error {
		_, err := u.f.recordAnswer(tx, u.from, u.r, true)
		return err
	})
}

// Await hands the operation name of the command w drives to nodeID (once)
// and returns the node's answer when there is one. While there is none it
// ends the step (the command continues when the answer arrives) and returns
// nil: the caller then returns nil too. Commands of several operations
// await them one after the other, each under its own name.
//
// When this replica holds the node's session, the step records the
// operation keeping its lease and waits for the answer in memory (handOver):
// the answer usually comes within answerWait, and the step goes on at once.
func (f *Fleet) Await(ctx context.Context, w *command.Work, name, nodeID string, body proto.Message, stage ctrlv1.FailureStage) (*Answer, error) {
	return f.await(ctx, w, name, nodeID, body, stage, false)
}

// AwaitUnrecorded is Await for a step that records the answer itself
// (Answer.Record) in the transaction that acts on it: an answer that
// reaches it in memory is handed over before any transaction records it,
// saving one (and the command's wake) per operation.
func (f *Fleet) AwaitUnrecorded(ctx context.Context, w *command.Work, name, nodeID string, body proto.Message, stage ctrlv1.FailureStage) (*Answer, error) {
	return f.await(ctx, w, name, nodeID, body, stage, true)
}

// OperationID is the node operation a step of command commandID sends
// under name (Await).
func OperationID(commandID, name string) string { return commandID + "/" + name }

func (f *Fleet) await(ctx context.Context, w *command.Work, name, nodeID string, body proto.Message, stage ctrlv1.FailureStage, raw bool) (*Answer, error) {
	opID := OperationID(w.Command().GetCommandId(), name)
	anyBody, err := anypb.New(body)
	if err != nil {
		return nil, err
	}
	if f.holds(nodeID) {
		answer, err := f.handOver(ctx, w, name, opID, nodeID, startedInstance(body), anyBody, stage, raw)
		if !errors.Is(err, ErrNotNew) {
			return answer, err
		}
	}
	var op *storev1.NodeOperation
	var gone string
	err = f.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		op, err = tx.GetNodeOperation(opID, false)
		if errors.Is(err, store.ErrNotFound) {
			op = nil
			gone, err = f.cannotServe(tx, nodeID)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if op == nil && gone != "" {
		// A node isolated or retired since an earlier step chose it never
		// answers: the command fails, and a retry is placed elsewhere.
		return &Answer{Failure: &ctrlv1.WorkspaceFailure{
			Stage: stage, Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Retryable: true, Message: gone,
		}}, nil
	}
	if op == nil {
		err := w.Continue(ctx, sentTo(name, nodeID), 30*time.Second, func(tx *store.Tx, c *storev1.Command) error {
			c.NodeId = nodeID
			_, err := StartOperation(tx, w.Now(), opID, nodeID, c.GetCommandId(), anyBody)
			return err
		})
		if err == nil {
			f.Notify(nodeID)
		}
		return nil, err
	}
	if answer := answerOf(op, stage); answer != nil {
		return answer, nil
	}
	return nil, w.Continue(ctx, waitingFor(name, op.GetNodeId()), 30*time.Second, nil)
}

// ErrNotNew rolls back handOver's (or AwaitDecided's) transaction: the
// operation was recorded by an earlier step, or the node can serve none.
// Await's reads take it.
var ErrNotNew = errors.New("the operation is not new")

// startNew is StartOperation for an operation that must be new: ErrNotNew
// when an earlier step recorded it already. The insert is the check (no
// read before it): the transaction's other writes are rolled back with it.
func startNew(tx *store.Tx, now time.Time, operationID, nodeID, commandID string, body *anypb.Any) (*storev1.NodeOperation, error) {
	op, inserted, err := startOperation(tx, now, operationID, nodeID, commandID, body)
	if err == nil && !inserted {
		err = ErrNotNew
	}
	return op, err
}

// handOver records a new operation for nodeID, whose session this replica
// holds, keeping the step's lease (Hold), in the transaction that checks
// it is new; hands it to the session; and waits for the answer in memory.
// When none comes within answerWait it ends the step as Await does.
func (f *Fleet) handOver(ctx context.Context, w *command.Work, name, opID, nodeID, instance string, body *anypb.Any, stage ctrlv1.FailureStage, raw bool) (*Answer, error) {
	answered := f.answers.expect(opID, raw)
	defer f.forgetExpected(opID, answered)
	var recorded *storev1.NodeOperation
	err := w.Hold(ctx, sentTo(name, nodeID), func(tx *store.Tx, c *storev1.Command) error {
		if gone, err := f.cannotServe(tx, nodeID); gone != "" || err != nil {
			return cmp.Or(err, ErrNotNew)
		}
		c.NodeId = nodeID
		var err error
		recorded, err = startNew(tx, w.Now(), opID, nodeID, c.GetCommandId(), body)
		return err
	})
	if err != nil {
		return nil, err
	}
	return f.waitAnswer(ctx, w, name, nodeID, instance, recorded, answered, stage)
}

// AwaitDecided is Await for a first operation the step decides (a
// placement: which node, and what to tell it) in the transaction that
// records it, keeping the step's lease (Hold): decide answers the node
// and the operation's body, or an error that rolls everything back and is
// returned as it is. An operation an earlier step recorded is ErrNotNew,
// found by its insert after decide ran (decide's writes go with the
// rollback), unless decide failed first. When this replica holds the
// chosen node's session, the operation is handed to it and the answer
// waited for in memory, as Await does; otherwise the step ends waiting
// for the answer.
func (f *Fleet) AwaitDecided(ctx context.Context, w *command.Work, name string, stage ctrlv1.FailureStage,
	decide func(tx *store.Tx) (nodeID string, body proto.Message, err error),
) (string, *Answer, error) {
	d := f.Expect(w.Command().GetCommandId(), name)
	defer d.Forget()
	err := w.Hold(ctx, "", func(tx *store.Tx, c *storev1.Command) error {
		nodeID, body, err := decide(tx)
		if err != nil {
			return err
		}
		return d.Record(tx, w.Now(), c, nodeID, body)
	})
	if err != nil {
		return "", nil, err
	}
	answer, err := f.AwaitDecision(ctx, w, d, stage)
	return d.nodeID, answer, err
}

// Decision is a first operation of a command decided and recorded in a
// transaction that also writes the command (AwaitDecided's, or the
// command's admission: command.Effect.Begin), awaited once it committed
// (AwaitDecision). Its answer is expected from the start (Expect), so
// that none can come before the step waits for it; Forget drops the
// expectation when the step will not wait (its transaction failed).
type Decision struct {
	f        *Fleet
	name     string
	opID     string
	answered <-chan arrival
	// nodeID and recorded are set by Record, in the transaction's last
	// run, and instance when it records a start (startedInstance).
	nodeID   string
	recorded *storev1.NodeOperation
	instance string
}

// Expect begins the Decision of operation name of command commandID: its
// answer, raw (Answer.Record writes it), is expected from now on.
func (f *Fleet) Expect(commandID, name string) *Decision {
	opID := commandID + "/" + name
	return &Decision{f: f, name: name, opID: opID, answered: f.answers.expect(opID, true)}
}

// Record records the operation, body for nodeID, in tx, the transaction
// that writes c (the command, whose node and progress it sets). An
// operation an earlier step recorded is ErrNotNew (its insert is the
// check): tx's other writes go with the rollback.
func (d *Decision) Record(tx *store.Tx, now time.Time, c *storev1.Command, nodeID string, body proto.Message) error {
	anyBody, err := anypb.New(body)
	if err != nil {
		return err
	}
	c.NodeId, c.Progress = nodeID, sentTo(d.name, nodeID)
	d.nodeID, d.instance = nodeID, startedInstance(body)
	d.recorded, err = startNew(tx, now, d.opID, nodeID, c.GetCommandId(), anyBody)
	return err
}

// Node is the node the operation was recorded for.
func (d *Decision) Node() string { return d.nodeID }

// Forget drops the expectation of the answer. AwaitDecision forgets it
// itself.
func (d *Decision) Forget() { d.f.forgetExpected(d.opID, d.answered) }

// forgetExpected drops the expectation of operation opID, whose answers
// come on answered, once no step will wait for it, and records an answer
// handed to it that no step took. A node's answer is handed to the
// waiter before anything records it (answerWaiters.offer), and the node
// does not send it again until the operation is sent again at its next
// connection: dropped with its waiter, it was lost, and its command
// waited for ever. That happened when an operation recorded before
// (PENDING, sent to the node again at its session's start) was expected
// again by a transaction that then failed: a replay of the command after
// a crash, whose admission ran its Begin before its insert found the
// command (the commit-point walk CreateWorkspace, on PostgreSQL, once).
func (f *Fleet) forgetExpected(opID string, answered <-chan arrival) {
	got, ok := f.answers.forgetHanded(opID, answered)
	if !ok {
		return
	}
	if got.forgetReport != nil {
		got.forgetReport() // no step records it as the execution's first report
	}
	if got.raw == nil {
		f.waker.Kick() // committed with the command's wake; no step took it
		return
	}
	// The caller may be in a transaction (an admission's run forgets the
	// run before it first): on SQLite's one writer, one of its own would
	// wait for it.
	go func() {
		if err := f.recordAndHand(context.Background(), got.from, got.raw); err != nil {
			f.log.Warn("record a node's answer no step took", "operation_id", got.raw.GetOperationId(), "err", err)
		}
	}()
}

// AwaitDecision waits for the answer to d, once the transaction that
// recorded it committed: when this replica holds the node's session, the
// operation is handed to it and the answer waited for in memory, as Await
// does; otherwise the step ends waiting for the answer (nil, nil).
func (f *Fleet) AwaitDecision(ctx context.Context, w *command.Work, d *Decision, stage ctrlv1.FailureStage) (*Answer, error) {
	defer d.Forget()
	if !f.holds(d.nodeID) {
		f.Notify(d.nodeID)
		return nil, w.Continue(ctx, waitingFor(d.name, d.nodeID), 30*time.Second, nil)
	}
	return f.waitAnswer(ctx, w, d.name, d.nodeID, d.instance, d.recorded, d.answered, stage)
}

// waitAnswer hands recorded to nodeID's session, which this replica holds,
// and waits in memory for its answer (answered) for at most answerWait;
// without one it ends the step waiting for it. instance is the execution
// recorded starts, if it is a start.
func (f *Fleet) waitAnswer(ctx context.Context, w *command.Work, name, nodeID, instance string, recorded *storev1.NodeOperation,
	answered <-chan arrival, stage ctrlv1.FailureStage,
) (*Answer, error) {
	f.answers.awaitStart(recorded.GetOperationId(), instance)
	f.deliver(recorded)
	var got arrival
	w.Idle(func() {
		t := time.NewTimer(w.HoldFor(answerWait))
		defer t.Stop()
		select {
		case got = <-answered:
		case <-t.C:
		case <-ctx.Done():
		}
	})
	if got.op == nil && got.raw == nil {
		// An answer handed over as the wait ended is in the channel
		// once the waiter is gone: the step must not drop it unrecorded.
		got, _ = f.answers.forgetHanded(recorded.GetOperationId(), answered)
	}
	if got.raw != nil {
		op := proto.CloneOf(recorded)
		answerIn(op, got.raw, f.now())
		answer := answerOf(op, stage)
		answer.unrecorded = &unrecorded{f: f, from: got.from, r: got.raw, op: op, forgetReport: got.forgetReport}
		return answer, nil
	}
	if answer := answerOf(got.op, stage); answer != nil {
		return answer, nil
	}
	return nil, w.Continue(ctx, waitingFor(name, nodeID), 30*time.Second, nil)
}

func sentTo(name, nodeID string) string { return fmt.Sprintf("%s: sent to node %s", name, nodeID) }

func waitingFor(name, nodeID string) string {
	return fmt.Sprintf("%s: waiting for node %s to answer", name, nodeID)
}

// answerOf is the answer op holds, nil while it has none.
func answerOf(op *storev1.NodeOperation, stage ctrlv1.FailureStage) *Answer {
	switch op.GetState() {
	case storev1.NodeOperationState_NODE_OPERATION_STATE_SUCCEEDED:
		return &Answer{Result: op.GetResult()}
	case storev1.NodeOperationState_NODE_OPERATION_STATE_FAILED:
		code := connect.Code(op.GetCode())
		return &Answer{Result: op.GetResult(), Failure: &ctrlv1.WorkspaceFailure{
			Stage: stage, Reason: apierr.ReasonOf(code), Retryable: code == connect.CodeUnavailable,
			Message: fmt.Sprintf("node %s: %s", op.GetNodeId(), op.GetMessage()),
		}}
	}
	return nil
}

// holds reports whether this replica holds nodeID's session: only then
// does its answer reach a step waiting here.
func (f *Fleet) holds(nodeID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions[nodeID] != nil
}

// sessionsHeld is how many sessions this replica holds.
func (f *Fleet) sessionsHeld() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sessions)
}

// cannotServe says why nodeID will never answer a new operation (it is
// isolated, retired or revoked), or "" when it may.
func (f *Fleet) cannotServe(tx *store.Tx, nodeID string) (string, error) {
	n, err := tx.GetNode(nodeID, false)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Sprintf("node %s is not registered", nodeID), nil
	case err != nil:
		return "", err
	case n.GetAdmission() != operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED:
		return fmt.Sprintf("node %s is %s", nodeID, n.GetAdmission()), nil
	case n.GetIsolated():
		return fmt.Sprintf("node %s is isolated", nodeID), nil
	}
	return "", nil
}

// Operate drives a command step that hands op to a node: it picks a node
// that reaches op.Pool (waiting while there is none), records the operation,
// waits for the node's answer (the node's session sends it, again after any
// reconnect), then ends the command.
func (f *Fleet) Operate(ctx context.Context, w *command.Work, op Operation) error {
	nodeID := w.Command().GetNodeId()
	if nodeID == "" {
		err := f.store.Tx(ctx, func(tx *store.Tx) error {
			var err error
			nodeID, err = f.NodeForPool(tx, op.Pool)
			return err
		})
		if err != nil {
			return err
		}
		if nodeID == "" {
			return w.Wait(ctx, fmt.Sprintf("a connected node that reaches storage pool %q", op.Pool), 30*time.Second)
		}
	}
	answer, err := f.Await(ctx, w, op.Name, nodeID, op.Body, op.Stage)
	if answer == nil || err != nil {
		return err
	}
	if answer.Failure != nil {
		return w.Fail(ctx, answer.Failure, func(tx *store.Tx) error { return op.Failed(tx, answer.Failure) })
	}
	return w.Succeed(ctx, func(tx *store.Tx) error { return op.Succeeded(tx, answer.Result) })
}

// startedInstance is the execution body starts, when it is a
// StartExecution; "" otherwise.
func startedInstance(body proto.Message) string {
	if start, ok := body.(*nodev1.StartExecution); ok {
		return start.GetInstanceId()
	}
	return ""
}
