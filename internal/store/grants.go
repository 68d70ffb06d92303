package store

import (
	"database/sql"
	"fmt"

	"google.golang.org/protobuf/proto"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
)

// A grant's enrolled nodes are rows of grant_enrollments, not part of its
// body (migration 16): enrolling appends a row rather than rewriting a
// list that grows with the fleet.

// GetGrant reads one enrollment grant with the nodes it enrolled.
func (t *Tx) GetGrant(id string, lock bool) (*operatorv1.EnrollmentGrant, error) {
	g := &operatorv1.EnrollmentGrant{}
	if err := t.getBody("enrollment_grants", "grant_id", id, lock, g); err != nil {
		return g, err
	}
	return g, t.readEnrolled([]*operatorv1.EnrollmentGrant{g})
}

// GrantBySecretHash finds the grant a secret belongs to, WITHOUT the nodes
// it enrolled (enrolled_node_ids is empty): enrolling, its only use, needs
// none of them, and a reusable grant's list grows with the fleet.
func (t *Tx) GrantBySecretHash(hash string, lock bool) (*operatorv1.EnrollmentGrant, error) {
	g := &operatorv1.EnrollmentGrant{}
	return g, t.getBody("enrollment_grants", "secret_hash", hash, lock, g)
}

// PutGrant writes a grant with the hash of its secret. Its
// enrolled_node_ids are not written: AddGrantEnrollment records each.
func (t *Tx) PutGrant(g *operatorv1.EnrollmentGrant, secretHash string) error {
	return t.upsert("enrollment_grants", []string{"grant_id", "secret_hash", "body"}, g.GetGrantId(), secretHash, grantBody(g))
}

// AddGrantEnrollment records that nodeID enrolled with the grant, after
// the nodes that did before it. The caller holds the grant's row lock
// (GrantBySecretHash with lock), which orders two enrollments with one
// grant.
func (t *Tx) AddGrantEnrollment(grantID, nodeID string) error {
	_, err := t.exec(`INSERT INTO grant_enrollments (grant_id, seq, node_id)
		SELECT ?, COALESCE(MAX(seq), 0) + 1, ? FROM grant_enrollments WHERE grant_id = ?`, grantID, nodeID, grantID)
	return err
}

// ListGrants pages enrollment grants by grant_id, each with the nodes it
// enrolled.
func (t *Tx) ListGrants(after string, limit int) ([]*operatorv1.EnrollmentGrant, error) {
	grants, err := listBodies(t, "enrollment_grants", "grant_id", after, "", limit, func() *operatorv1.EnrollmentGrant { return &operatorv1.EnrollmentGrant{} })
	if err != nil {
		return nil, err
	}
	return grants, t.readEnrolled(grants)
}

// readEnrolled fills the enrolled_node_ids of grants, which are in
// grant_id order, with one read of the range they span.
func (t *Tx) readEnrolled(grants []*operatorv1.EnrollmentGrant) error {
	if len(grants) == 0 {
		return nil
	}
	byID := make(map[string]*operatorv1.EnrollmentGrant, len(grants))
	for _, g := range grants {
		byID[g.GetGrantId()] = g
	}
	rows, err := t.query(`SELECT grant_id, node_id FROM grant_enrollments
		WHERE grant_id >= ? AND grant_id <= ? ORDER BY grant_id, seq`, grants[0].GetGrantId(), grants[len(grants)-1].GetGrantId())
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var grantID, nodeID string
		if err := rows.Scan(&grantID, &nodeID); err != nil {
			return err
		}
		if g := byID[grantID]; g != nil {
			g.EnrolledNodeIds = append(g.EnrolledNodeIds, nodeID)
		}
	}
	return rows.Err()
}

// grantBody is g's body without its enrolled nodes.
func grantBody(g *operatorv1.EnrollmentGrant) []byte {
	body := proto.CloneOf(g)
	body.EnrolledNodeIds = nil
	return marshal(body)
}

// backfillGrantEnrollments is migration 16's Go step: the nodes each
// grant's body lists become its rows of grant_enrollments, in their order,
// and the body is written without them.
func backfillGrantEnrollments(tx *sql.Tx, d dialect) error {
	rows, err := tx.Query("SELECT body FROM enrollment_grants")
	if err != nil {
		return err
	}
	grants, err := scanBodies(rows, func() *operatorv1.EnrollmentGrant { return &operatorv1.EnrollmentGrant{} })
	if err != nil {
		return err
	}
	insert := d.rebind("INSERT INTO grant_enrollments (grant_id, seq, node_id) VALUES (?, ?, ?)")
	update := d.rebind("UPDATE enrollment_grants SET body = ? WHERE grant_id = ?")
	for _, g := range grants {
		if len(g.GetEnrolledNodeIds()) == 0 {
			continue
		}
		for i, id := range g.GetEnrolledNodeIds() {
			if _, err := tx.Exec(insert, g.GetGrantId(), i+1, id); err != nil {
				return fmt.Errorf("grant %s: %w", g.GetGrantId(), err)
			}
		}
		if _, err := tx.Exec(update, grantBody(g), g.GetGrantId()); err != nil {
			return fmt.Errorf("grant %s: %w", g.GetGrantId(), err)
		}
	}
	return nil
}
