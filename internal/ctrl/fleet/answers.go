package fleet

import (
	"sync"
	"time"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
)

// answerWait is the longest a command step waits in memory for a node's
// answer to the operation it handed out (Await), within its lease. The
// simulated nodes and a warm node answer in milliseconds; a VM that boots
// longer, or a node another replica holds, is waited for the durable way:
// the step ends, and the answer wakes the command.
const answerWait = 10 * time.Second

// answerWaiters hands a node's answer to the command step waiting for it
// in this replica. Before it, every answer ended one step and woke the
// command, which was claimed again, re-read its plan and then read the
// answer: three transactions of the fourteen a placement took (issue 15).
//
// A step that records the answer itself, in the transaction that acts on
// it (AwaitDecided's), is handed the node's message before anything is
// written (offer); any other is handed the operation once the transaction
// that records the answer and wakes the command committed (answered).
type answerWaiters struct {
	mu sync.Mutex
	m  map[string]*answerWaiter
}

// answerWaiter is one step waiting for the answer to an operation; raw
// says it records the answer itself.
type answerWaiter struct {
	ch  chan arrival
	raw bool
}

// arrival is an answer handed to a waiting step: the operation as
// committed with its answer, or the message of node from, recorded
// nowhere yet.
type arrival struct {
	op   *storev1.NodeOperation
	raw  *nodev1.CommandResult
	from string
	// forgetReport undoes what the raw answer's report noted
	// (session.noteStartReport).
	forgetReport func()
}

// expect registers a waiter for operationID, before the operation is
// recorded, so that no answer can come first. raw asks for the node's
// message before anything records it.
func (a *answerWaiters) expect(operationID string, raw bool) <-chan arrival {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]*answerWaiter{}
	}
	w := &answerWaiter{ch: make(chan arrival, 1), raw: raw}
	a.m[operationID] = w
	return w.ch
}

// forget drops the waiter of operationID. An answer handed over before it
// is in the channel once forget returned, and none after.
func (a *answerWaiters) forget(operationID string) {
	a.mu.Lock()
	delete(a.m, operationID)
	a.mu.Unlock()
}

// offer hands node's message r to a step that records the answer itself,
// and reports whether one took it; if none did, the caller records it.
// note runs first, only when a step waits for r: it notes what r reports
// and answers how to forget it, which the step is handed.
func (a *answerWaiters) offer(node string, r *nodev1.CommandResult, note func() (forget func())) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.m[r.GetOperationId()]
	if w == nil || !w.raw {
		return false
	}
	delete(a.m, r.GetOperationId())
	w.ch <- arrival{raw: r, from: node, forgetReport: note()}
	return true
}

// answered hands op, answered and committed, to its waiter, and reports
// whether one took it.
func (a *answerWaiters) answered(op *storev1.NodeOperation) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.m[op.GetOperationId()]
	if w == nil {
		return false
	}
	delete(a.m, op.GetOperationId())
	w.ch <- arrival{op: op}
	return true
}
