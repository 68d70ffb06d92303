package fleet

import (
	"sync"
	"time"

	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
)

// answerWait is the longest a command step waits in memory for a node's
// answer to the operation it handed out (Await), within its lease. The
// simulated nodes and a warm node answer in milliseconds; a VM that boots
// longer, or a node another replica holds, is waited for the durable way:
// the step ends, and the answer wakes the command.
const answerWait = 10 * time.Second

// answerWaiters hands a node's answer, once committed, to the command step
// waiting for it in this replica. Before it, every answer ended one step
// and woke the command, which was claimed again, re-read its plan and then
// read the answer: three transactions of the fourteen a placement took
// (issue 15).
type answerWaiters struct {
	mu sync.Mutex
	m  map[string]chan *storev1.NodeOperation
}

// expect registers a waiter for operationID, before the operation is
// recorded, so that no answer can come first.
func (a *answerWaiters) expect(operationID string) <-chan *storev1.NodeOperation {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[string]chan *storev1.NodeOperation{}
	}
	ch := make(chan *storev1.NodeOperation, 1)
	a.m[operationID] = ch
	return ch
}

// forget drops the waiter of operationID.
func (a *answerWaiters) forget(operationID string) {
	a.mu.Lock()
	delete(a.m, operationID)
	a.mu.Unlock()
}

// answered hands op, answered and committed, to its waiter, and reports
// whether one took it.
func (a *answerWaiters) answered(op *storev1.NodeOperation) bool {
	a.mu.Lock()
	ch := a.m[op.GetOperationId()]
	delete(a.m, op.GetOperationId())
	a.mu.Unlock()
	if ch == nil {
		return false
	}
	ch <- op
	return true
}
