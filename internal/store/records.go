package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
)

// getBody reads the body of one row into m. lock takes a row lock on
// PostgreSQL (SQLite transactions are serial already).
func (t *Tx) getBody(table, key, id string, lock bool, m proto.Message) error {
	if body, ok := t.keptBody(table, id); ok {
		return proto.Unmarshal(body, m)
	}
	if body, ok := t.prefetchedBody(table, id); ok {
		return proto.Unmarshal(body, m)
	}
	hot := t.hot != nil && isHot(table)
	var gen uint64
	if hot {
		body, g, ok := t.hot.get(table, id)
		if ok {
			return proto.Unmarshal(body, m)
		}
		gen = g
	}
	suffix := ""
	if lock {
		suffix = t.d.lock
	}
	q := queryText("get", table, key, suffix, func() string {
		return "SELECT body FROM " + table + " WHERE " + key + " = ?" + suffix
	})
	var body []byte
	if err := t.pointRow(q, id).Scan(&body); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		return err
	}
	if hot {
		t.hot.keep(table, id, body, gen)
	}
	return proto.Unmarshal(body, m)
}

// putRow writes one row of table: cols are its key, then indexed of
// its indexed columns, then the others, and vals their values. When this
// transaction knows the indexed columns hold these values already (it
// read the row locked, or on SQLite at all, or wrote it: noteIndexed), it
// updates the others alone: SQLite rewrites the index entries of every
// column an UPDATE sets, to the same value or not, and each is a page
// more that the commit writes (docs/PERFORMANCE.md). Otherwise, or when
// the row is gone, it upserts every column.
func (t *Tx) putRow(table string, cols []string, indexed int, vals ...any) error {
	id, ok := vals[0].(string)
	if !ok {
		id = fmt.Sprint(vals[0])
	}
	if t.hot == nil || !isHot(table) {
		return t.writeRow(table, cols, indexed, id, vals...)
	}
	// Kept as written: the body is the last column (hotRows).
	t.hotKeyed = true
	err := t.writeRow(table, cols, indexed, id, vals...)
	t.hotKeyed = false
	key := hotKey(table, id)
	t.hotWritten = append(t.hotWritten, key)
	if err != nil {
		t.hot.forget([]string{key})
		return err
	}
	t.hot.wrote(table, id, vals[len(vals)-1].([]byte))
	return nil
}

// writeRow is putRow's write.
func (t *Tx) writeRow(table string, cols []string, indexed int, id string, vals ...any) error {
	known, ok := t.indexed[table+"\x00"+id]
	unchanged := ok && known == indexedValues(vals[1:1+indexed])
	set := cols[1:]
	if unchanged {
		set = cols[1+indexed:]
	}
	if t.keep(table, cols, set, vals...) {
		t.noteIndexed(table, id, vals[1:1+indexed]...)
		return nil
	}
	if unchanged {
		q := queryText("update", table, strings.Join(cols, ","), strconv.Itoa(indexed), func() string {
			var sets []string
			for _, c := range cols[1+indexed:] {
				sets = append(sets, c+" = ?")
			}
			return "UPDATE " + table + " SET " + strings.Join(sets, ", ") + " WHERE " + cols[0] + " = ?"
		})
		res, err := t.exec(q, append(slices.Clone(vals[1+indexed:]), vals[0])...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
	}
	if err := t.upsert(table, cols, vals...); err != nil {
		return err
	}
	t.noteIndexed(table, id, vals[1:1+indexed]...)
	return nil
}

// noteIndexed notes that row id of table holds the indexed column values
// vals until this transaction ends (putRow).
func (t *Tx) noteIndexed(table, id string, vals ...any) {
	if t.indexed == nil {
		t.indexed = map[string]string{}
	}
	t.indexed[table+"\x00"+id] = indexedValues(vals)
}

// indexedValues encodes column values for noteIndexed, each with its
// type and length: ("a", "") and ("", "a") differ, as do "1" and 1.
func indexedValues(vals []any) string {
	var b strings.Builder
	for _, v := range vals {
		switch v := v.(type) {
		case string:
			b.WriteString("s")
			b.WriteString(strconv.Itoa(len(v)))
			b.WriteString(":")
			b.WriteString(v)
		case int64:
			b.WriteString("i")
			b.WriteString(strconv.FormatInt(v, 10))
			b.WriteString(";")
		default:
			fmt.Fprintf(&b, "%#v;", v)
		}
	}
	return b.String()
}

// upsert writes one row whose first column is the key.
func (t *Tx) upsert(table string, cols []string, vals ...any) error {
	q := queryText("upsert", table, strings.Join(cols, ","), "", func() string {
		var sets []string
		for _, c := range cols[1:] {
			sets = append(sets, c+" = excluded."+c)
		}
		return "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES (" + marks(len(cols)) + ") ON CONFLICT (" + cols[0] + ") DO UPDATE SET " + strings.Join(sets, ", ")
	})
	_, err := t.exec(q, vals...)
	return err
}

// queryTexts keeps the texts of the statements the row functions build
// from a table's name and columns, so that each is built once, not at
// every read and write (formatting them was 2% of ctrl's CPU a
// placement, all of it on SQLite's one writer).
var queryTexts sync.Map // queryTextKey → string

type queryTextKey struct{ kind, table, cols, variant string }

// queryText is the text build makes for (kind, table, cols, variant),
// built at its first use.
func queryText(kind, table, cols, variant string, build func() string) string {
	k := queryTextKey{kind, table, cols, variant}
	if q, ok := queryTexts.Load(k); ok {
		return q.(string)
	}
	q := build()
	queryTexts.Store(k, q)
	return q
}

// listBodies pages rows ordered by key, after the key given, decoding each
// with newMsg. where narrows the rows (with its args) and may be empty.
func listBodies[M proto.Message](t *Tx, table, key, after, where string, limit int, newMsg func() M, args ...any) ([]M, error) {
	q := fmt.Sprintf("SELECT body FROM %s WHERE %s > ?", table, key)
	if where != "" {
		q += " AND " + where
	}
	q += fmt.Sprintf(" ORDER BY %s LIMIT %d", key, limit)
	rows, err := t.query(q, append([]any{after}, args...)...)
	if err != nil {
		return nil, err
	}
	return scanBodies(rows, newMsg)
}

func marshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		// Only an invalid message (e.g. bad UTF-8 in a string) fails, and
		// every record is validated before it is stored.
		panic(fmt.Sprintf("store: marshal %T: %v", m, err))
	}
	return b
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// GetVolume reads one Volume.
func (t *Tx) GetVolume(id string, lock bool) (*ctrlv1.Volume, error) {
	v := &ctrlv1.Volume{}
	return v, t.getBody("volumes", "volume_id", id, lock, v)
}

// PutVolume writes a Volume.
func (t *Tx) PutVolume(v *ctrlv1.Volume) error {
	return t.upsert("volumes", []string{"volume_id", "state", "storage_pool", "bound_workspace_id", "deleted", "capacity_bytes", "body"},
		v.GetVolumeId(), v.GetState().String(), v.GetSpec().GetStoragePool(), v.GetBoundWorkspaceId(),
		boolInt(v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_DELETED), int64(v.GetSpec().GetCapacityBytes()), marshal(v))
}

// ListVolumes pages Volumes by volume_id after the one given.
func (t *Tx) ListVolumes(after string, limit int, includeDeleted bool) ([]*ctrlv1.Volume, error) {
	where := ""
	if !includeDeleted {
		where = "deleted = 0"
	}
	return listBodies(t, "volumes", "volume_id", after, where, limit, func() *ctrlv1.Volume { return &ctrlv1.Volume{} })
}

// GetWorkspace reads one Workspace.
func (t *Tx) GetWorkspace(id string, lock bool) (*ctrlv1.Workspace, error) {
	w := &ctrlv1.Workspace{}
	if err := t.getBody("workspaces", "workspace_id", id, lock, w); err != nil {
		return w, err
	}
	if lock || t.d.name != postgres.name {
		// Nobody changes the row, or its references, before this
		// transaction ends (SQLite runs one at a time).
		t.noteRefs(id, storedReferences(w))
		t.noteIndexed("workspaces", id, workspaceIndexed(w)...)
	}
	return w, nil
}

// workspaceIndexed are the values of the indexed columns of w's row
// (workspaces_expiration), in workspaceCols' order.
func workspaceIndexed(w *ctrlv1.Workspace) []any {
	var deadline int64
	if p := w.GetExpiration().GetPolicy(); p != nil {
		deadline = p.GetDeadline().AsTime().UnixNano()
	}
	return []any{boolInt(w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED), deadline}
}

// workspaceCols are the columns of workspaces: the key, the indexed
// ones, the others.
var workspaceCols = []string{"workspace_id", "deleted", "expiration_deadline", "state", "body"}

// PutWorkspace writes a Workspace and the Egresses and Resolvers its
// network policy names (policy_references).
func (t *Tx) PutWorkspace(w *ctrlv1.Workspace) error {
	t.wrote(w.GetWorkspaceId())
	vals := append(append([]any{w.GetWorkspaceId()}, workspaceIndexed(w)...), w.GetState().String(), marshal(w))
	if err := t.putRow("workspaces", workspaceCols, 2, vals...); err != nil {
		return err
	}
	return t.putPolicyReferences(w)
}

// WorkspaceAndRuntime reads a Workspace and its runtime (empty when it has
// none) in one statement, outside any transaction: one statement reads
// one snapshot on both databases, and on PostgreSQL it is one round trip
// where a Snapshot took four (BEGIN, two reads, COMMIT): a caller
// following a Workspace reads it twice a placement (issue 15). On SQLite
// it runs on a reader connection, as a Snapshot does.
func (s *Store) WorkspaceAndRuntime(ctx context.Context, id string) (*ctrlv1.Workspace, *storev1.WorkspaceRuntime, error) {
	const q = "SELECT w.body, r.body FROM workspaces w LEFT JOIN workspace_runtime r ON r.workspace_id = w.workspace_id WHERE w.workspace_id = ?"
	var row *sql.Row
	if s.readers != nil {
		if st := s.readStmts.get(q); st != nil {
			row = st.QueryRowContext(ctx, id)
		} else {
			defer s.readStmts.prepareWanted(context.WithoutCancel(ctx), s.readers)
			row = s.readers.QueryRowContext(ctx, q, id)
		}
	} else {
		row = s.db.QueryRowContext(ctx, s.d.rebind(q), id)
	}
	var wb, rb []byte
	if err := row.Scan(&wb, &rb); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil, ErrNotFound
		}
		return nil, nil, err
	}
	w, rt := &ctrlv1.Workspace{}, &storev1.WorkspaceRuntime{}
	if err := proto.Unmarshal(wb, w); err != nil {
		return nil, nil, err
	}
	if err := proto.Unmarshal(rb, rt); err != nil {
		return nil, nil, err
	}
	rt.WorkspaceId = id
	return w, rt, nil
}

// PutNewWorkspace is PutWorkspace for a Workspace this transaction made
// under a new id: it has no policy_references rows to replace.
func (t *Tx) PutNewWorkspace(w *ctrlv1.Workspace) error {
	t.noteRefs(w.GetWorkspaceId(), nil)
	return t.PutWorkspace(w)
}

// ListWorkspaces pages Workspaces by workspace_id after the one given.
func (t *Tx) ListWorkspaces(after string, limit int, includeDeleted bool) ([]*ctrlv1.Workspace, error) {
	where := ""
	if !includeDeleted {
		where = "deleted = 0"
	}
	return listBodies(t, "workspaces", "workspace_id", after, where, limit, func() *ctrlv1.Workspace { return &ctrlv1.Workspace{} })
}

// ExpiredWorkspaces lists undeleted Workspaces whose expiration deadline is at
// or before now (Unix nanoseconds).
func (t *Tx) ExpiredWorkspaces(now int64, limit int) ([]*ctrlv1.Workspace, error) {
	return listBodies(t, "workspaces", "workspace_id", "", "deleted = 0 AND expiration_deadline > 0 AND expiration_deadline <= ?",
		limit, func() *ctrlv1.Workspace { return &ctrlv1.Workspace{} }, now)
}

// GetNode reads one node registration.
func (t *Tx) GetNode(id string, lock bool) (*operatorv1.NodeRegistration, error) {
	n := &operatorv1.NodeRegistration{}
	return n, t.getBody("nodes", "node_id", id, lock, n)
}

// PutNode writes a node registration, keeping its credential, and the
// fields placement reads of it (node_placement). Every pool it declares
// becomes known (storage_pools), for good. Its waiters (WatchNode) are
// told: a session's start and end are written here.
func (t *Tx) PutNode(n *operatorv1.NodeRegistration) error {
	if _, err := t.exec(`INSERT INTO nodes (node_id, body) VALUES (?, ?)
		ON CONFLICT (node_id) DO UPDATE SET body = excluded.body`, n.GetNodeId(), marshal(n)); err != nil {
		return err
	}
	t.wrote(nodeChange(n.GetNodeId()))
	if err := t.putPlacement(n); err != nil {
		return err
	}
	return t.declarePools(n)
}

// SetNodeCredential replaces the hash of a node's credential.
func (t *Tx) SetNodeCredential(id, hash string) error {
	_, err := t.exec("UPDATE nodes SET credential_hash = ? WHERE node_id = ?", hash, id)
	return err
}

// NodeCredential reads the hash of a node's credential.
func (t *Tx) NodeCredential(id string) (string, error) {
	var hash string
	err := t.queryRow("SELECT credential_hash FROM nodes WHERE node_id = ?", id).Scan(&hash)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrNotFound
	}
	return hash, err
}

// AllNodes reads every node registration, in pages of 500.
func (t *Tx) AllNodes() ([]*operatorv1.NodeRegistration, error) {
	var out []*operatorv1.NodeRegistration
	after := ""
	for {
		batch, err := t.ListNodes(after, 500)
		if err != nil {
			return nil, err
		}
		out = append(out, batch...)
		if len(batch) < 500 {
			return out, nil
		}
		after = batch[len(batch)-1].GetNodeId()
	}
}

// ListNodes pages node registrations by node_id.
func (t *Tx) ListNodes(after string, limit int) ([]*operatorv1.NodeRegistration, error) {
	return listBodies(t, "nodes", "node_id", after, "", limit, func() *operatorv1.NodeRegistration { return &operatorv1.NodeRegistration{} })
}

// Setting reads a shared setting.
func (t *Tx) Setting(name string) ([]byte, error) {
	var v []byte
	err := t.cachedScan("SELECT value FROM settings WHERE name = ?", []any{name}, &v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	return v, err
}

// InitSetting stores value unless the setting exists, and returns the value
// that is stored: two replicas starting together agree on one.
func (t *Tx) InitSetting(name string, value []byte) ([]byte, error) {
	if _, err := t.exec("INSERT INTO settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", name, value); err != nil {
		return nil, err
	}
	return t.Setting(name)
}

func unmarshal(b []byte, m proto.Message) error { return proto.Unmarshal(b, m) }
