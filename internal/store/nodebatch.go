package store

import (
	"strings"

	"google.golang.org/protobuf/proto"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
)

// The statements here take many nodes at once, so that a batch of
// observations costs a few round trips to PostgreSQL rather than a few per
// node. Their text varies with the number of nodes, so they are not kept
// prepared.

// LockNodes reads the registrations of ids that exist, by node_id, taking
// their row locks (PostgreSQL) in node_id order.
func (t *Tx) LockNodes(ids []string) (map[string]*operatorv1.NodeRegistration, error) {
	out := map[string]*operatorv1.NodeRegistration{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := t.query("SELECT node_id, body FROM nodes WHERE node_id IN ("+marks(len(ids))+") ORDER BY node_id"+t.d.lock, anys(ids)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			return nil, err
		}
		n := &operatorv1.NodeRegistration{}
		if err := proto.Unmarshal(body, n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// UpdateNodes writes registrations that exist and whose declared pools are
// already known (PutNode wrote them before), with their placement rows.
func (t *Tx) UpdateNodes(ns []*operatorv1.NodeRegistration) error {
	if len(ns) == 0 {
		return nil
	}
	bodies := make([]any, 0, 2*len(ns))
	var placements []any
	rows := make([]*NodePlacement, 0, len(ns))
	for _, n := range ns {
		bodies = append(bodies, n.GetNodeId(), marshal(n))
		p := placementOf(n)
		placements = append(placements, placementArgs(p)...)
		rows = append(rows, p)
	}
	values := strings.TrimSuffix(strings.Repeat("(?, ?), ", len(ns)), ", ")
	if _, err := t.execUnprepared("INSERT INTO nodes (node_id, body) VALUES "+values+
		" ON CONFLICT (node_id) DO UPDATE SET body = excluded.body", bodies...); err != nil {
		return err
	}
	if _, err := t.execUnprepared(placementUpsert(len(ns)), placements...); err != nil {
		return err
	}
	for _, p := range rows {
		t.patchRegistration(p)
	}
	return nil
}

// marks is n comma-separated placeholders.
func marks(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }
