package store

import (
	"database/sql"
	"errors"

	"google.golang.org/protobuf/proto"

	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
)

// InsertNodeOperation records a new operation; an existing operation_id is
// left as it is (inserted false). In a transaction that coalesces its
// writes (Coalesce) the operation is kept and inserted at its end, and
// inserted is true: an existing operation_id fails the transaction there
// (keepInsert).
func (t *Tx) InsertNodeOperation(op *storev1.NodeOperation) (inserted bool, err error) {
	if kept, err := t.keepInsert("node_operations", nodeOperationColumns, op.GetOperationId(), op.GetNodeId(), op.GetCommandId(),
		op.GetState().String(), op.GetCreatedAt().AsTime().UnixNano(), marshal(op)); kept || err != nil {
		return err == nil, err
	}
	res, err := t.exec(`INSERT INTO node_operations (operation_id, node_id, command_id, state, created_at, body)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (operation_id) DO NOTHING`,
		op.GetOperationId(), op.GetNodeId(), op.GetCommandId(), op.GetState().String(),
		op.GetCreatedAt().AsTime().UnixNano(), marshal(op))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

var nodeOperationColumns = []string{"operation_id", "node_id", "command_id", "state", "created_at", "body"}

// GetNodeOperation reads one operation.
func (t *Tx) GetNodeOperation(id string, lock bool) (*storev1.NodeOperation, error) {
	op := &storev1.NodeOperation{}
	return op, t.getBody("node_operations", "operation_id", id, lock, op)
}

// PutNodeOperation writes an operation's state and answer.
func (t *Tx) PutNodeOperation(op *storev1.NodeOperation) error {
	res, err := t.exec("UPDATE node_operations SET state = ?, body = ? WHERE operation_id = ?",
		op.GetState().String(), marshal(op), op.GetOperationId())
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// AnswerOperation writes op, answered, over its record when that is still
// PENDING and addressed to op's node: the one write a PENDING operation
// gets (an answer, or a failure when the node goes), so its body is the
// one recorded with the answer set. answered is false, and nothing
// written, otherwise.
func (t *Tx) AnswerOperation(op *storev1.NodeOperation) (answered bool, err error) {
	res, err := t.exec(`UPDATE node_operations SET state = ?, body = ? WHERE operation_id = ? AND node_id = ?
		AND state = 'NODE_OPERATION_STATE_PENDING'`, op.GetState().String(), marshal(op), op.GetOperationId(), op.GetNodeId())
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// NodesWithPendingOperations lists the nodes that have operations not
// answered yet, for the one poll that finds operations another ctrl
// replica recorded.
func (t *Tx) NodesWithPendingOperations() ([]string, error) {
	return t.queryStrings(`SELECT DISTINCT node_id FROM node_operations WHERE state = 'NODE_OPERATION_STATE_PENDING'`)
}

// PendingNodeOperations lists a node's unanswered operations, oldest first.
func (t *Tx) PendingNodeOperations(nodeID string, limit int) ([]*storev1.NodeOperation, error) {
	rows, err := t.queryDrained(`SELECT body FROM node_operations WHERE node_id = ? AND state = 'NODE_OPERATION_STATE_PENDING'
		ORDER BY created_at, operation_id LIMIT ?`, nodeID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*storev1.NodeOperation
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		op := &storev1.NodeOperation{}
		if err := proto.Unmarshal(body, op); err != nil {
			return nil, err
		}
		out = append(out, op)
	}
	if err := rows.Err(); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	return out, nil
}
