package fleet

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/anypb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// StrayStopOperationID names the one operation that stops a stray
// execution: per node, incarnation and Instance, so an execution reported
// on every observation is told to stop once, and again only by a later
// incarnation of the node (whose earlier operations an isolation may have
// failed unanswered).
func StrayStopOperationID(nodeID string, incarnation uint64, instanceID string) string {
	return fmt.Sprintf("stray-stop/%s/%d/%s", nodeID, incarnation, instanceID)
}

// StopStray records, in tx, a forced StopExecution for an execution nodeID
// reports that is not current there (the caller's judgement): a VM of an
// Instance ctrl released, such as one an isolation failed, or one whose
// Workspace has run elsewhere since. It records it only once per
// incarnation, and reports whether it did: call Notify after the
// transaction commits. The operation belongs to no command; the node
// answers it like any other, after a reconnect too.
//
// A forced stop is a power-off: the node kills the VM and touches none of
// its block files, so the Workspace's data is what it was when the VM
// last wrote it.
func (f *Fleet) StopStray(tx *store.Tx, nodeID, instanceID string) (bool, error) {
	n, err := tx.GetNode(nodeID, false)
	if err != nil {
		return false, err
	}
	opID := StrayStopOperationID(nodeID, n.GetIncarnation(), instanceID)
	if _, err := tx.GetNodeOperation(opID, false); !errors.Is(err, store.ErrNotFound) {
		return false, err // recorded already (or the read failed)
	}
	body, err := anypb.New(&nodev1.StopExecution{InstanceId: instanceID, Force: true})
	if err != nil {
		return false, err
	}
	if _, err := StartOperation(tx, f.now(), opID, nodeID, "", body); err != nil {
		return false, err
	}
	f.log.WarnContext(tx.Context(), "node reports an execution that is not current there: stopping it", "node_id", nodeID, "instance_id", instanceID, "operation_id", opID)
	return true, nil
}
