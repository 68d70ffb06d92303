package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
)

// StoragePool is what ctrl keeps of one pool beside what nodes declare
// about it (their registrations hold the attachments).
type StoragePool struct {
	Name string
	// CapacityBytes is what placement admits against; 0 while the operator
	// has set none (a set capacity is greater than zero).
	CapacityBytes uint64
	// Version advances only when the capacity changes.
	Version uint64
	// LostAt is when the pool was declared lost; zero while it is not.
	LostAt          time.Time
	FirstDeclaredAt time.Time
}

// Lost reports whether the pool was declared lost.
func (p *StoragePool) Lost() bool { return !p.LostAt.IsZero() }

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// declarePools records the pools a registration names; a pool once known
// stays known.
func (t *Tx) declarePools(n *operatorv1.NodeRegistration) error {
	for _, a := range n.GetStoragePools() {
		at := a.GetObservedAt().AsTime()
		if a.GetObservedAt() == nil {
			at = time.Now()
		}
		if _, err := t.exec("INSERT INTO storage_pools (storage_pool, first_declared_at) VALUES (?, ?) ON CONFLICT (storage_pool) DO NOTHING",
			a.GetStoragePool(), at.UnixNano()); err != nil {
			return err
		}
	}
	return nil
}

const (
	poolFields  = "storage_pool, capacity_bytes, version, lost_at, first_declared_at"
	poolColumns = "SELECT " + poolFields + " FROM storage_pools"
)

// scanPool scans a row of poolFields, then of more (columns after them).
func scanPool(row interface{ Scan(...any) error }, more ...any) (*StoragePool, error) {
	p := &StoragePool{}
	var capacity, version, lost, first int64
	if err := row.Scan(append([]any{&p.Name, &capacity, &version, &lost, &first}, more...)...); err != nil {
		return nil, err
	}
	p.CapacityBytes, p.Version = uint64(capacity), uint64(version)
	p.LostAt, p.FirstDeclaredAt = fromNanos(lost), fromNanos(first)
	return p, nil
}

// GetStoragePool reads one pool; lock takes its row lock (PostgreSQL), which
// serialises the reservations made in it.
func (t *Tx) GetStoragePool(name string, lock bool) (*StoragePool, error) {
	q := poolColumns + " WHERE storage_pool = ?"
	if lock {
		q += t.d.lock
	}
	p, err := scanPool(t.queryRow(q, name))
	return p, noRows(err)
}

// ListStoragePools pages pools by name after the one given.
func (t *Tx) ListStoragePools(after string, limit int) ([]*StoragePool, error) {
	rows, err := t.query(poolColumns+" WHERE storage_pool > ? ORDER BY storage_pool LIMIT ?", after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*StoragePool
	for rows.Next() {
		p, err := scanPool(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// SetStoragePoolCapacity sets a pool's capacity and advances its version.
func (t *Tx) SetStoragePoolCapacity(name string, capacity uint64) error {
	return t.updatePool("UPDATE storage_pools SET capacity_bytes = ?, version = version + 1 WHERE storage_pool = ?", int64(capacity), name)
}

// SetStoragePoolLost records when a pool was declared lost.
func (t *Tx) SetStoragePoolLost(name string, at time.Time) error {
	return t.updatePool("UPDATE storage_pools SET lost_at = ? WHERE storage_pool = ?", at.UnixNano(), name)
}

func (t *Tx) updatePool(q string, args ...any) error {
	res, err := t.exec(q, args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// LostPools is the set of pools declared lost.
func (t *Tx) LostPools() (map[string]bool, error) {
	rows, err := t.queryDrained("SELECT storage_pool FROM storage_pools WHERE lost_at <> 0")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		out[name] = true
	}
	return out, rows.Err()
}

// An object lives in a pool from its creation until its deletion is
// admitted. From then (Volume DELETING, Workspace DELETING) until a node
// removed its block file it is a removal waiting on the pool: it takes space
// there but reserves nothing.
const (
	volumeLives     = "state NOT IN ('VOLUME_STATE_DELETING', 'VOLUME_STATE_DELETED')"
	volumeRemoving  = "state = 'VOLUME_STATE_DELETING'"
	layersJoin      = "FROM workspace_runtime r JOIN workspaces w ON w.workspace_id = r.workspace_id WHERE r.layer_pool = ?"
	workspaceLives  = "w.state NOT IN ('WORKSPACE_STATE_DELETING', 'WORKSPACE_STATE_DELETED')"
	workspaceRemove = "w.state = 'WORKSPACE_STATE_DELETING'"
)

// PoolUsage is what lives in a pool and what waits on it.
type PoolUsage struct {
	// Volumes and Layers count the objects that live in the pool, and
	// ReservedBytes sums their declared capacities and those of the
	// objects moving into the pool.
	Volumes, Layers, ReservedBytes uint64
	// Removals counts the block files waiting for a node to remove them:
	// deletions, and the copies moves left (pool_cleanups).
	Removals uint64
}

// StoragePoolUsage sums what lives in a pool and counts its removals.
func (t *Tx) StoragePoolUsage(name string) (PoolUsage, error) {
	var u PoolUsage
	l, err := t.living(name)
	if err != nil {
		return u, err
	}
	var volRemovals, layerRemovals int64
	if err := t.queryRow("SELECT COUNT(*) FROM volumes WHERE storage_pool = ? AND "+volumeRemoving, name).Scan(&volRemovals); err != nil {
		return u, err
	}
	if err := t.queryRow("SELECT COUNT(*) "+layersJoin+" AND "+workspaceRemove, name).Scan(&layerRemovals); err != nil {
		return u, err
	}
	moving, err := t.movingIn(name)
	if err != nil {
		return u, err
	}
	left, err := t.cleanups(name)
	if err != nil {
		return u, err
	}
	u.Volumes, u.Layers, u.ReservedBytes = uint64(l.volumes), uint64(l.layers), uint64(l.volumeBytes+l.layerBytes)+moving
	u.Removals = uint64(volRemovals+layerRemovals) + left
	return u, nil
}

// StoragePoolReserved sums the declared capacities of what lives in a pool
// and of what moves into it: what a new object is admitted against.
// It reads the pool's counter (pool_reserved), so it costs the same however
// many objects the pool holds.
func (t *Tx) StoragePoolReserved(name string) (uint64, error) {
	var n int64
	err := t.queryRow("SELECT "+reservedSum, name, name).Scan(&n)
	return uint64(n), err
}

// reservedSum is StoragePoolReserved's sum, one statement for what lives
// in the pool (its counter, pool_reserved) and what moves into it; its
// arguments are the pool twice.
const reservedSum = "COALESCE((SELECT bytes FROM pool_reserved WHERE storage_pool = ?), 0) + " +
	"(SELECT CAST(COALESCE(SUM(capacity_bytes), 0) AS BIGINT) FROM pool_moves WHERE target_pool = ?)"

// StoragePoolForReservation is GetStoragePool(name, true) and
// StoragePoolReserved(name) together: what a reservation in the pool
// reads. On SQLite, whose one writer nothing can change under, one
// statement reads both. On PostgreSQL the sum is read after the pool's
// row lock was taken, by a statement of its own: one statement would
// take its snapshot before waiting for the lock, and sum what the
// reservations committed meanwhile left out.
//
// A transaction that read the pool before is answered from its count of
// what it reserved there since (ReservedInPool, ledger.go).
func (t *Tx) StoragePoolForReservation(name string) (*StoragePool, uint64, error) {
	if p, reserved, ok := t.ledgerRead(name); ok {
		return p, reserved, nil
	}
	p, reserved, err := t.readPoolForReservation(name)
	if err == nil {
		t.ledgerKeep(p, reserved)
	}
	return p, reserved, err
}

func (t *Tx) readPoolForReservation(name string) (*StoragePool, uint64, error) {
	if t.d.lock != "" {
		p, err := t.GetStoragePool(name, true)
		if err != nil {
			return nil, 0, err
		}
		reserved, err := t.StoragePoolReserved(name)
		return p, reserved, err
	}
	var reserved int64
	p, err := scanPool(t.queryRow("SELECT "+poolFields+", "+reservedSum+" FROM storage_pools WHERE storage_pool = ?", name, name, name), &reserved)
	return p, uint64(reserved), noRows(err)
}

type living struct{ volumes, volumeBytes, layers, layerBytes int64 }

// living counts the Volumes and writable layers living in a pool and sums
// their declared capacities.
func (t *Tx) living(name string) (living, error) {
	var l living
	if err := t.queryRow("SELECT COUNT(*), CAST(COALESCE(SUM(capacity_bytes), 0) AS BIGINT) FROM volumes WHERE storage_pool = ? AND "+volumeLives,
		name).Scan(&l.volumes, &l.volumeBytes); err != nil {
		return l, err
	}
	err := t.queryRow("SELECT COUNT(*), CAST(COALESCE(SUM(r.layer_capacity_bytes), 0) AS BIGINT) "+layersJoin+" AND "+workspaceLives,
		name).Scan(&l.layers, &l.layerBytes)
	return l, err
}

// PoolVolumes pages the Volumes that live in a pool (removing false) or
// wait on it for removal (removing true), by volume_id.
func (t *Tx) PoolVolumes(pool, after string, limit int, removing bool) ([]*ctrlv1.Volume, error) {
	where := volumeLives
	if removing {
		where = volumeRemoving
	}
	return listBodies(t, "volumes", "volume_id", after, "storage_pool = ? AND "+where, limit, func() *ctrlv1.Volume { return &ctrlv1.Volume{} }, pool)
}

// PoolLayers pages the runtime records of the Workspaces whose writable
// layer lives in a pool (removing false) or waits on it for removal
// (removing true), by workspace_id.
func (t *Tx) PoolLayers(pool, after string, limit int, removing bool) ([]*storev1.WorkspaceRuntime, error) {
	where := workspaceLives
	if removing {
		where = workspaceRemove
	}
	rows, err := t.query("SELECT r.body "+layersJoin+" AND "+where+" AND r.workspace_id > ? ORDER BY r.workspace_id LIMIT ?", pool, after, limit)
	if err != nil {
		return nil, err
	}
	return scanBodies(rows, func() *storev1.WorkspaceRuntime { return &storev1.WorkspaceRuntime{} })
}

// backfillPools (migration 7) fills the columns pools are summed from, and
// records every pool a registration already names, from the bodies written
// before they existed.
func backfillPools(tx *sql.Tx, d dialect) error {
	if err := backfill(tx, "SELECT volume_id, body FROM volumes", func() *ctrlv1.Volume { return &ctrlv1.Volume{} },
		func(id string, v *ctrlv1.Volume) error {
			_, err := tx.Exec(d.rebind("UPDATE volumes SET capacity_bytes = ? WHERE volume_id = ?"), int64(v.GetSpec().GetCapacityBytes()), id)
			return err
		}); err != nil {
		return err
	}
	if err := backfill(tx, "SELECT workspace_id, body FROM workspace_runtime", func() *storev1.WorkspaceRuntime { return &storev1.WorkspaceRuntime{} },
		func(id string, r *storev1.WorkspaceRuntime) error {
			_, err := tx.Exec(d.rebind("UPDATE workspace_runtime SET layer_pool = ?, layer_capacity_bytes = ? WHERE workspace_id = ?"),
				r.GetLayerPool(), int64(r.GetLayerCapacityBytes()), id)
			return err
		}); err != nil {
		return err
	}
	return backfill(tx, "SELECT node_id, body FROM nodes", func() *operatorv1.NodeRegistration { return &operatorv1.NodeRegistration{} },
		func(_ string, n *operatorv1.NodeRegistration) error {
			return (&Tx{ctx: context.Background(), tx: tx, d: d}).declarePools(n)
		})
}

// backfill reads every (id, body) row of query, then calls fn on each: the
// rows are all read before any is written (one connection on SQLite).
func backfill[M proto.Message](tx *sql.Tx, query string, newMsg func() M, fn func(id string, m M) error) error {
	rows, err := tx.Query(query)
	if err != nil {
		return err
	}
	ids := []string{}
	msgs := []M{}
	for rows.Next() {
		var id string
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			rows.Close()
			return err
		}
		m := newMsg()
		if err := proto.Unmarshal(body, m); err != nil {
			rows.Close()
			return fmt.Errorf("%s: %w", id, err)
		}
		ids, msgs = append(ids, id), append(msgs, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	for i, id := range ids {
		if err := fn(id, msgs[i]); err != nil {
			return err
		}
	}
	return nil
}
