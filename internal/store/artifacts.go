package store

import (
	"strings"
	"time"
)

// NodeArtifact is one artifact a node's cache holds complete or is
// fetching, as the node last reported it (table node_artifacts).
type NodeArtifact struct {
	NodeID   string
	Digest   string
	Complete bool
	// DeliveredBytes are on the node; TotalBytes is the artifact's size, 0
	// while the node does not know it.
	DeliveredBytes, TotalBytes uint64
	// StartedAt is when ctrl first saw the artifact arriving on the node;
	// zero for one first reported complete.
	StartedAt time.Time
}

// SetNodeArtifacts replaces what nodeID's cache holds with held, the
// node's latest report. An artifact still held keeps its StartedAt; one
// newly arriving starts at now.
func (t *Tx) SetNodeArtifacts(nodeID string, held []NodeArtifact, now time.Time) error {
	before, err := t.nodeArtifactDigests(nodeID)
	if err != nil {
		return err
	}
	kept := map[string]bool{}
	for _, a := range held {
		kept[a.Digest] = true
		var started int64
		if !a.Complete {
			started = nanos(now)
		}
		if _, err := t.exec(`INSERT INTO node_artifacts (node_id, digest, complete, delivered_bytes, total_bytes, started_at)
			VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (node_id, digest) DO UPDATE SET complete = excluded.complete,
			delivered_bytes = excluded.delivered_bytes, total_bytes = excluded.total_bytes`,
			nodeID, a.Digest, boolInt(a.Complete), int64(a.DeliveredBytes), int64(a.TotalBytes), started); err != nil {
			return err
		}
	}
	for _, d := range before {
		if kept[d] {
			continue
		}
		if _, err := t.exec("DELETE FROM node_artifacts WHERE node_id = ? AND digest = ?", nodeID, d); err != nil {
			return err
		}
	}
	return nil
}

func (t *Tx) nodeArtifactDigests(nodeID string) ([]string, error) {
	return t.queryStrings("SELECT digest FROM node_artifacts WHERE node_id = ?", nodeID)
}

// ArtifactOnNodes reads the rows of digest of the nodes from first to last
// (one page of nodes). complete IN (0, 1) lets the range use the index
// on (digest, complete, node_id) once for each value.
func (t *Tx) ArtifactOnNodes(digest, first, last string) (map[string]NodeArtifact, error) {
	rows, err := t.query(`SELECT node_id, digest, complete, delivered_bytes, total_bytes, started_at FROM node_artifacts
		WHERE digest = ? AND complete IN (0, 1) AND node_id >= ? AND node_id <= ?`, digest, first, last)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]NodeArtifact{}
	for rows.Next() {
		var a NodeArtifact
		var complete, delivered, total, started int64
		if err := rows.Scan(&a.NodeID, &a.Digest, &complete, &delivered, &total, &started); err != nil {
			return nil, err
		}
		a.Complete, a.DeliveredBytes, a.TotalBytes, a.StartedAt = complete == 1, uint64(delivered), uint64(total), fromNanos(started)
		out[a.NodeID] = a
	}
	return out, rows.Err()
}

// ArtifactReadiness counts the admitted nodes, and among them those ready
// to use digest: holding it complete, with a session live at liveAt
// (CandidateQuery.LiveAt), advertising one of capabilities. One aggregate, not a read of
// every node.
func (t *Tx) ArtifactReadiness(digest string, liveAt time.Time, capabilities []string) (ready, admitted int, err error) {
	args := []any{nanos(liveAt)}
	caps := []string{"1 = 0"}
	for _, c := range capabilities {
		caps = append(caps, t.d.listHas("p.capabilities"))
		args = append(args, listItem(c))
	}
	args = append(args, digest)
	var r, n int64
	err = t.queryRow(`SELECT CAST(COALESCE(SUM(CASE WHEN a.complete = 1 AND p.live = 1 AND p.live_until >= ? AND (`+
		strings.Join(caps, " OR ")+`) THEN 1 ELSE 0 END), 0) AS BIGINT), COUNT(*)
		FROM node_placement p LEFT JOIN node_artifacts a ON a.node_id = p.node_id AND a.digest = ?
		WHERE p.admitted = 1`, args...).Scan(&r, &n)
	return int(r), int(n), err
}
