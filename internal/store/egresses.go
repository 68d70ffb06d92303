package store

import (
	"database/sql"
	"errors"
	"slices"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// Kinds of policy_references rows.
const (
	RefEgress   = "egress"
	RefResolver = "resolver"
)

// EgressRecord is a stored Egress, password included, with the
// drain_seconds of the update that made its current revision (0 for the
// first): how long a node keeps connections of the revision before.
type EgressRecord struct {
	Egress       *ctrlv1.Egress
	DrainSeconds uint32
}

// GetEgress reads one Egress.
func (t *Tx) GetEgress(id string, lock bool) (*EgressRecord, error) {
	q := "SELECT drain_seconds, body FROM egresses WHERE egress_id = ?"
	if lock {
		q += t.d.lock
	}
	var drain int64
	var body []byte
	if err := t.queryRow(q, id).Scan(&drain, &body); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	r := &EgressRecord{Egress: &ctrlv1.Egress{}, DrainSeconds: uint32(drain)}
	return r, unmarshal(body, r.Egress)
}

// PutEgress writes an Egress.
func (t *Tx) PutEgress(r *EgressRecord) error {
	return t.upsert("egresses", []string{"egress_id", "deleted", "drain_seconds", "body"},
		r.Egress.GetEgressId(), boolInt(r.Egress.GetDeleted()), int64(r.DrainSeconds), marshal(r.Egress))
}

// ListEgresses pages undeleted Egresses by egress_id after the one given.
func (t *Tx) ListEgresses(after string, limit int) ([]*ctrlv1.Egress, error) {
	return listBodies(t, "egresses", "egress_id", after, "deleted = 0", limit, func() *ctrlv1.Egress { return &ctrlv1.Egress{} })
}

// GetResolver reads one Resolver.
func (t *Tx) GetResolver(id string, lock bool) (*ctrlv1.Resolver, error) {
	r := &ctrlv1.Resolver{}
	return r, t.getBody("resolvers", "resolver_id", id, lock, r)
}

// PutResolver writes a Resolver.
func (t *Tx) PutResolver(r *ctrlv1.Resolver) error {
	return t.upsert("resolvers", []string{"resolver_id", "deleted", "body"}, r.GetResolverId(), boolInt(r.GetDeleted()), marshal(r))
}

// ListResolvers pages undeleted Resolvers by resolver_id after the one given.
func (t *Tx) ListResolvers(after string, limit int) ([]*ctrlv1.Resolver, error) {
	return listBodies(t, "resolvers", "resolver_id", after, "deleted = 0", limit, func() *ctrlv1.Resolver { return &ctrlv1.Resolver{} })
}

// PolicyReferrers lists, in workspace_id order, at most limit undeleted
// Workspaces whose network policy names the Egress or Resolver (kind
// RefEgress or RefResolver) id.
func (t *Tx) PolicyReferrers(kind, id string, limit int) ([]string, error) {
	rows, err := t.query("SELECT workspace_id FROM policy_references WHERE kind = ? AND ref_id = ? ORDER BY workspace_id LIMIT ?", kind, id, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var w string
		if err := rows.Scan(&w); err != nil {
			return nil, err
		}
		ids = append(ids, w)
	}
	return ids, rows.Err()
}

// putPolicyReferences rewrites the references of w's network policy: none
// once it is deleted. A write of a Workspace this transaction read locked
// (or wrote) with the same references leaves the rows as they are: most
// writes (state, progress, runtime) change none, and the delete was four
// statements of every placement.
func (t *Tx) putPolicyReferences(w *ctrlv1.Workspace) error {
	refs := storedReferences(w)
	if prev, ok := t.refs[w.GetWorkspaceId()]; ok && slices.Equal(prev, refs) {
		return nil
	}
	if _, err := t.exec("DELETE FROM policy_references WHERE workspace_id = ?", w.GetWorkspaceId()); err != nil {
		return err
	}
	t.noteRefs(w.GetWorkspaceId(), refs)
	for _, ref := range refs {
		if _, err := t.exec("INSERT INTO policy_references (kind, ref_id, workspace_id) VALUES (?, ?, ?)",
			ref[0], ref[1], w.GetWorkspaceId()); err != nil {
			return err
		}
	}
	return nil
}

// storedReferences are the policy_references rows of w as stored.
func storedReferences(w *ctrlv1.Workspace) [][2]string {
	if w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED {
		return nil
	}
	return policyReferences(w.GetSpec().GetNetworkPolicy())
}

// noteRefs notes that the policy_references rows of Workspace id are
// refs, as this transaction reads or writes them.
func (t *Tx) noteRefs(id string, refs [][2]string) {
	if t.refs == nil {
		t.refs = map[string][][2]string{}
	}
	t.refs[id] = refs
}

// policyReferences is every (kind, id) p names, without repeats: Egresses
// in egresses and in resolver paths, Resolvers in resolvers.
func policyReferences(p *ctrlv1.NetworkPolicy) [][2]string {
	var refs [][2]string
	add := func(kind, id string) {
		if ref := [2]string{kind, id}; id != "" && !slices.Contains(refs, ref) {
			refs = append(refs, ref)
		}
	}
	for _, e := range p.GetEgresses() {
		add(RefEgress, e.GetEgressId())
	}
	for _, r := range p.GetResolvers() {
		add(RefResolver, r.GetResolverId())
		add(RefEgress, r.GetPath().GetEgressId())
	}
	return refs
}
