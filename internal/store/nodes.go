package store

import (
	"database/sql"
	"fmt"

	"google.golang.org/protobuf/proto"

	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
)

// SetNodeDraining records whether a node is draining (DrainNode sets it,
// CancelNodeDrain clears it). The registration's status is derived from it.
func (t *Tx) SetNodeDraining(id string, draining bool) error {
	res, err := t.exec("UPDATE nodes SET draining = ? WHERE node_id = ?", boolInt(draining), id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	// Placement reads the drain beside the node's other placement fields.
	if _, err := t.exec("UPDATE node_placement SET draining = ? WHERE node_id = ?", boolInt(draining), id); err != nil {
		return err
	}
	t.patchNode(id, func(p *NodePlacement) { p.Draining = draining })
	return nil
}

// DrainingNodes is the set of draining nodes.
func (t *Tx) DrainingNodes() (map[string]bool, error) {
	rows, err := t.query("SELECT node_id FROM nodes WHERE draining = 1")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// NodeExecutions lists the runtime records of the Workspaces whose current
// execution runs on node, by workspace_id.
func (t *Tx) NodeExecutions(nodeID string) ([]*storev1.WorkspaceRuntime, error) {
	rows, err := t.query("SELECT body FROM workspace_runtime WHERE node_id = ? ORDER BY workspace_id", nodeID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*storev1.WorkspaceRuntime
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		r := &storev1.WorkspaceRuntime{}
		if err := proto.Unmarshal(body, r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// backfillRuntimeNodes fills workspace_runtime.node_id (migration 4) from
// the bodies written before the column existed.
func backfillRuntimeNodes(tx *sql.Tx, d dialect) error {
	rows, err := tx.Query("SELECT workspace_id, body FROM workspace_runtime")
	if err != nil {
		return err
	}
	nodes := map[string]string{}
	for rows.Next() {
		var id string
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			rows.Close()
			return err
		}
		r := &storev1.WorkspaceRuntime{}
		if err := proto.Unmarshal(body, r); err != nil {
			rows.Close()
			return fmt.Errorf("workspace_runtime %s: %w", id, err)
		}
		if r.GetNodeId() != "" {
			nodes[id] = r.GetNodeId()
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for id, node := range nodes {
		if _, err := tx.Exec(d.rebind("UPDATE workspace_runtime SET node_id = ? WHERE workspace_id = ?"), node, id); err != nil {
			return err
		}
	}
	return nil
}
