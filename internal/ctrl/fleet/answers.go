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
	// starting are the executions whose start's answer a step waits for
	// raw, by instance id (awaitStart): their report comes with it.
	starting map[string]string
}

// answerWaiter is one step waiting for the answer to an operation; raw
// says it records the answer itself, and instance is the execution it
// starts, if it is a start (awaitStart).
type answerWaiter struct {
	ch       chan arrival
	raw      bool
	instance string
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

// forgetHanded drops the waiter of operationID whose channel is ch (not
// one another step registered for it since), and answers the arrival
// handed to it that no step took, if there is one, which its caller must
// not drop: waitAnswer uses it, Fleet.forgetExpected records it. An
// answer handed over after it returned goes nowhere near ch.
func (a *answerWaiters) forgetHanded(operationID string, ch <-chan arrival) (arrival, bool) {
	a.mu.Lock()
	if w := a.m[operationID]; w != nil && (<-chan arrival)(w.ch) == ch {
		a.drop(operationID)
	}
	a.mu.Unlock()
	select {
	case got := <-ch:
		return got, true
	default:
		return arrival{}, false
	}
}

// drop removes the waiter of operationID. Called with mu held.
func (a *answerWaiters) drop(operationID string) {
	if w := a.m[operationID]; w != nil && w.instance != "" && a.starting[w.instance] == operationID {
		delete(a.starting, w.instance)
	}
	delete(a.m, operationID)
}

// awaitStart notes that the raw waiter of operation opID, a
// StartExecution, waits for the start of instance: the node's answer will
// carry the execution's report (session.noteStartReport), so an
// observation heard before that answer need not apply it (awaitedStarts).
// Nothing is noted for an operation no raw waiter waits for, nor for one
// that starts nothing (instance "").
func (a *answerWaiters) awaitStart(opID, instance string) {
	if instance == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.m[opID]
	if w == nil || !w.raw {
		return
	}
	if a.starting == nil {
		a.starting = map[string]string{}
	}
	w.instance = instance
	a.starting[instance] = opID
}

// awaitedStarts are those of reports whose start's answer a step waits
// for (awaitStart), by instance id; nil when there are none.
func (a *answerWaiters) awaitedStarts(reports []*nodev1.ExecutionReport) map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.starting) == 0 {
		return nil
	}
	var out map[string]bool
	for _, r := range reports {
		if _, ok := a.starting[r.GetInstanceId()]; ok {
			if out == nil {
				out = map[string]bool{}
			}
			out[r.GetInstanceId()] = true
		}
	}
	return out
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
	a.drop(r.GetOperationId())
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
	a.drop(op.GetOperationId())
	w.ch <- arrival{op: op}
	return true
}
