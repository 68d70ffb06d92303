package store

// PoolMove is an object moving between storage pools.
type PoolMove struct {
	// ObjectKey is VolumeKey or LayerKey of the object.
	ObjectKey     string
	CommandID     string
	SourcePool    string
	TargetPool    string
	CapacityBytes uint64
}

// VolumeKey and LayerKey name a Volume and a Workspace's writable layer in
// pool_moves and pool_cleanups.
func VolumeKey(volumeID string) string   { return "volume/" + volumeID }
func LayerKey(workspaceID string) string { return "layer/" + workspaceID }

// PutPoolMove records a move; an object moves at most once at a time.
func (t *Tx) PutPoolMove(m PoolMove) error {
	_, err := t.exec("INSERT INTO pool_moves (object_key, command_id, source_pool, target_pool, capacity_bytes) VALUES (?, ?, ?, ?, ?)",
		m.ObjectKey, m.CommandID, m.SourcePool, m.TargetPool, int64(m.CapacityBytes))
	return err
}

// GetPoolMove reads the move of an object, or ErrNotFound.
func (t *Tx) GetPoolMove(objectKey string) (*PoolMove, error) {
	m := &PoolMove{}
	var capacity int64
	err := t.queryRow("SELECT object_key, command_id, source_pool, target_pool, capacity_bytes FROM pool_moves WHERE object_key = ?", objectKey).
		Scan(&m.ObjectKey, &m.CommandID, &m.SourcePool, &m.TargetPool, &capacity)
	if err != nil {
		return nil, noRows(err)
	}
	m.CapacityBytes = uint64(capacity)
	return m, nil
}

// DeletePoolMove ends an object's move (settled or failed).
func (t *Tx) DeletePoolMove(objectKey string) error {
	_, err := t.exec("DELETE FROM pool_moves WHERE object_key = ?", objectKey)
	return err
}

// AddPoolCleanup records a block file pool keeps of an object that no
// longer lives there.
func (t *Tx) AddPoolCleanup(pool, objectKey, commandID string) error {
	_, err := t.exec("INSERT INTO pool_cleanups (storage_pool, object_key, command_id) VALUES (?, ?, ?) ON CONFLICT (storage_pool, object_key) DO NOTHING",
		pool, objectKey, commandID)
	return err
}

// DeletePoolCleanup forgets a block file a node removed.
func (t *Tx) DeletePoolCleanup(pool, objectKey string) error {
	_, err := t.exec("DELETE FROM pool_cleanups WHERE storage_pool = ? AND object_key = ?", pool, objectKey)
	return err
}

// HasPoolCleanup reports whether pool still keeps a copy of the object.
func (t *Tx) HasPoolCleanup(pool, objectKey string) (bool, error) {
	var n int64
	err := t.queryRow("SELECT COUNT(*) FROM pool_cleanups WHERE storage_pool = ? AND object_key = ?", pool, objectKey).Scan(&n)
	return n > 0, err
}

// movingIn sums the capacity of the objects moving into a pool.
func (t *Tx) movingIn(pool string) (uint64, error) {
	var n int64
	err := t.queryRow("SELECT CAST(COALESCE(SUM(capacity_bytes), 0) AS BIGINT) FROM pool_moves WHERE target_pool = ?", pool).Scan(&n)
	return uint64(n), err
}

// cleanups counts the block files waiting in a pool for removal after a
// move.
func (t *Tx) cleanups(pool string) (uint64, error) {
	var n int64
	err := t.queryRow("SELECT COUNT(*) FROM pool_cleanups WHERE storage_pool = ?", pool).Scan(&n)
	return uint64(n), err
}

// PoolCleanupOf is the pool keeping the copy of an object that command
// left, or ErrNotFound.
func (t *Tx) PoolCleanupOf(objectKey, commandID string) (string, error) {
	var pool string
	err := t.queryRow("SELECT storage_pool FROM pool_cleanups WHERE object_key = ? AND command_id = ?", objectKey, commandID).Scan(&pool)
	return pool, noRows(err)
}
