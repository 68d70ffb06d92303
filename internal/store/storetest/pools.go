package storetest

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// RunStoragePools runs the store tests of storage pools (declaration,
// capacity, loss, what lives in a pool) against databases from b.
func RunStoragePools(t *testing.T, b Backend) {
	for name, fn := range map[string]func(*testing.T, string){
		"PoolsDeclaredByRegistrations":  testPoolsDeclaredByRegistrations,
		"PoolCapacityAndLoss":           testPoolCapacityAndLoss,
		"PoolUsageAndObjects":           testPoolUsageAndObjects,
		"PoolsBackfilled":               testPoolsBackfilled,
		"PoolMovesAndCleanups":          testPoolMovesAndCleanups,
		"PoolReservedFollowsEveryWrite": testPoolReservedFollowsEveryWrite,
		"ReservationsCountedInMemory":   testReservationsCountedInMemory,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.DSN(t))
		})
	}
}

func nodeDeclaring(id string, at time.Time, pools ...string) *operatorv1.NodeRegistration {
	n := &operatorv1.NodeRegistration{NodeId: id, Admission: operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED}
	for _, p := range pools {
		n.StoragePools = append(n.StoragePools, &operatorv1.StoragePoolAttachment{NodeId: id, StoragePool: p, Available: true, ObservedAt: timestamppb.New(at)})
	}
	return n
}

func getPool(t *testing.T, s *store.Store, name string) *store.StoragePool {
	t.Helper()
	var p *store.StoragePool
	mustTx(t, s, func(tx *store.Tx) error {
		var err error
		p, err = tx.GetStoragePool(name, false)
		return err
	})
	return p
}

func testPoolsDeclaredByRegistrations(t *testing.T, dsn string) {
	s := Open(t, dsn)
	first := time.Unix(1700000000, 0).UTC()
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.PutNode(nodeDeclaring("node-a", first, "pool-b", "pool-a")); err != nil {
			return err
		}
		// A later declaration by another node keeps the first time; a node
		// that stops declaring a pool does not make it unknown.
		if err := tx.PutNode(nodeDeclaring("node-b", first.Add(time.Hour), "pool-a", "pool-c")); err != nil {
			return err
		}
		return tx.PutNode(nodeDeclaring("node-a", first.Add(2*time.Hour)))
	})
	p := getPool(t, s, "pool-a")
	if !p.FirstDeclaredAt.Equal(first) || p.CapacityBytes != 0 || p.Version != 1 || p.Lost() {
		t.Errorf("pool-a = %+v, want first declared at %v, no capacity, version 1, not lost", p, first)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		if _, err := tx.GetStoragePool("pool-z", false); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("an undeclared pool: %v, want not found", err)
		}
		page, err := tx.ListStoragePools("", 2)
		if err != nil {
			return err
		}
		next, err := tx.ListStoragePools("pool-b", 2)
		if err != nil {
			return err
		}
		if len(page) != 2 || page[0].Name != "pool-a" || page[1].Name != "pool-b" || len(next) != 1 || next[0].Name != "pool-c" {
			t.Errorf("pages %v then %v, want pool-a, pool-b then pool-c", page, next)
		}
		return nil
	})
}

func testPoolCapacityAndLoss(t *testing.T, dsn string) {
	s := Open(t, dsn)
	lostAt := time.Unix(1700000100, 5).UTC()
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.PutNode(nodeDeclaring("node-a", time.Now(), "pool-a", "pool-b")); err != nil {
			return err
		}
		if err := tx.SetStoragePoolCapacity("pool-a", 10<<30); err != nil {
			return err
		}
		if err := tx.SetStoragePoolCapacity("pool-a", 20<<30); err != nil {
			return err
		}
		if err := tx.SetStoragePoolCapacity("pool-z", 1); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("capacity of an undeclared pool: %v, want not found", err)
		}
		return tx.SetStoragePoolLost("pool-b", lostAt)
	})
	if p := getPool(t, s, "pool-a"); p.CapacityBytes != 20<<30 || p.Version != 3 || p.Lost() {
		t.Errorf("pool-a = %+v, want 20 GiB at version 3, not lost", p)
	}
	if p := getPool(t, s, "pool-b"); !p.LostAt.Equal(lostAt) || p.Version != 1 {
		t.Errorf("pool-b = %+v, want lost at %v, version 1", p, lostAt)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		lost, err := tx.LostPools()
		if len(lost) != 1 || !lost["pool-b"] {
			t.Errorf("lost pools %v, want pool-b", lost)
		}
		return err
	})
}

// checkForReservation checks that StoragePoolForReservation reads pool
// as GetStoragePool does (not found for a pool never declared), with
// reserved bytes in it.
func checkForReservation(t *testing.T, tx *store.Tx, pool string, reserved uint64) {
	t.Helper()
	want, wantErr := tx.GetStoragePool(pool, false)
	got, gotReserved, err := tx.StoragePoolForReservation(pool)
	switch {
	case errors.Is(wantErr, store.ErrNotFound):
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s for a reservation: %+v, %v; want not found", pool, got, err)
		}
	case wantErr != nil || err != nil:
		t.Errorf("%s for a reservation: %v (GetStoragePool: %v)", pool, err, wantErr)
	case *got != *want || gotReserved != reserved:
		t.Errorf("%s for a reservation: %+v reserving %d, want %+v reserving %d", pool, got, gotReserved, want, reserved)
	}
}

func poolVolume(id, pool string, state ctrlv1.VolumeState, capacity uint64) *ctrlv1.Volume {
	return &ctrlv1.Volume{VolumeId: id, State: state, Spec: &ctrlv1.VolumeSpec{StoragePool: pool, CapacityBytes: capacity}}
}

// putLayer stores a Workspace in state with its writable layer in pool.
func putLayer(tx *store.Tx, id, pool string, state ctrlv1.WorkspaceState, capacity uint64) error {
	if err := tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: id, State: state}); err != nil {
		return err
	}
	return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: id, LayerPool: pool, LayerCapacityBytes: capacity})
}

func testPoolUsageAndObjects(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		for _, v := range []*ctrlv1.Volume{
			poolVolume("vol-a", "pool-a", ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE, 1<<30),
			poolVolume("vol-b", "pool-a", ctrlv1.VolumeState_VOLUME_STATE_CREATING, 2<<30),
			poolVolume("vol-c", "pool-a", ctrlv1.VolumeState_VOLUME_STATE_DELETING, 4<<30),
			poolVolume("vol-d", "pool-a", ctrlv1.VolumeState_VOLUME_STATE_DELETED, 8<<30),
			poolVolume("vol-e", "pool-b", ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE, 16<<30),
		} {
			if err := tx.PutVolume(v); err != nil {
				return err
			}
		}
		for _, l := range []struct {
			id, pool string
			state    ctrlv1.WorkspaceState
		}{
			{"ws-a", "pool-a", ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED},
			{"ws-b", "pool-a", ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETING},
			{"ws-c", "pool-a", ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED},
			{"ws-d", "pool-b", ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE},
			{"ws-e", "", ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING},
		} {
			if err := putLayer(tx, l.id, l.pool, l.state, 32<<30); err != nil {
				return err
			}
		}
		return nil
	})
	mustTx(t, s, func(tx *store.Tx) error {
		u, err := tx.StoragePoolUsage("pool-a")
		if err != nil {
			return err
		}
		want := store.PoolUsage{Volumes: 2, Layers: 1, ReservedBytes: 1<<30 + 2<<30 + 32<<30, Removals: 2}
		if u != want {
			t.Errorf("usage of pool-a = %+v, want %+v", u, want)
		}
		vols, err := tx.PoolVolumes("pool-a", "", 10, false)
		if err != nil {
			return err
		}
		after, err := tx.PoolVolumes("pool-a", "vol-a", 10, false)
		if err != nil {
			return err
		}
		removing, err := tx.PoolVolumes("pool-a", "", 10, true)
		if err != nil {
			return err
		}
		if ids(vols) != "vol-a,vol-b" || ids(after) != "vol-b" || ids(removing) != "vol-c" {
			t.Errorf("volumes %s, after vol-a %s, removing %s", ids(vols), ids(after), ids(removing))
		}
		layers, err := tx.PoolLayers("pool-a", "", 10, false)
		if err != nil {
			return err
		}
		layerRemovals, err := tx.PoolLayers("pool-a", "", 10, true)
		if err != nil {
			return err
		}
		if len(layers) != 1 || layers[0].GetWorkspaceId() != "ws-a" || len(layerRemovals) != 1 || layerRemovals[0].GetWorkspaceId() != "ws-b" {
			t.Errorf("layers %v, removing %v; want ws-a, ws-b", layers, layerRemovals)
		}
		return nil
	})
}

// testPoolsBackfilled undoes migration 7 on a database with records and
// applies it again: the columns and pools come from the bodies.
func testPoolsBackfilled(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.PutNode(nodeDeclaring("node-a", time.Now(), "pool-a")); err != nil {
			return err
		}
		if err := tx.PutVolume(poolVolume("vol-a", "pool-a", ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE, 1<<30)); err != nil {
			return err
		}
		return putLayer(tx, "ws-a", "pool-a", ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED, 4<<30)
	})
	s.Close()
	db, postgres := openRaw(t, dsn)
	undoPoolReserved(t, db, postgres)
	execRaw(t, db,
		"DROP TABLE storage_pools",
		"DROP INDEX workspace_runtime_layer_pool",
		"ALTER TABLE workspace_runtime DROP COLUMN layer_pool",
		"ALTER TABLE workspace_runtime DROP COLUMN layer_capacity_bytes",
		"ALTER TABLE volumes DROP COLUMN capacity_bytes",
		"DELETE FROM schema_migrations WHERE version = 7")
	db.Close()
	again := Open(t, dsn)
	mustTx(t, again, func(tx *store.Tx) error {
		u, err := tx.StoragePoolUsage("pool-a")
		if err != nil {
			return err
		}
		if want := (store.PoolUsage{Volumes: 1, Layers: 1, ReservedBytes: 5 << 30}); u != want {
			t.Errorf("usage after the backfill %+v, want %+v", u, want)
		}
		if reserved, err := tx.StoragePoolReserved("pool-a"); err != nil || reserved != 5<<30 {
			t.Errorf("reserved after the backfill %d (%v), want %d", reserved, err, 5<<30)
		}
		_, err = tx.GetStoragePool("pool-a", false)
		return err
	})
}

// testPoolMovesAndCleanups: an object moving reserves in its target pool
// too until its move ends; the copy a move leaves counts as a removal and
// reserves nothing.
func testPoolMovesAndCleanups(t *testing.T, dsn string) {
	s := Open(t, dsn)
	key := store.VolumeKey("vol-a")
	mustTx(t, s, func(tx *store.Tx) error {
		// pool-c stays undeclared.
		if err := tx.PutNode(nodeDeclaring("node-a", time.Now(), "pool-a", "pool-b")); err != nil {
			return err
		}
		if err := tx.SetStoragePoolCapacity("pool-b", 8<<30); err != nil {
			return err
		}
		if err := tx.PutVolume(poolVolume("vol-a", "pool-a", ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE, 1<<30)); err != nil {
			return err
		}
		return tx.PutPoolMove(store.PoolMove{ObjectKey: key, CommandID: "cmd-1", SourcePool: "pool-a", TargetPool: "pool-b", CapacityBytes: 1 << 30})
	})
	// A second move of the same object is refused by the store.
	err := s.Tx(t.Context(), func(tx *store.Tx) error {
		return tx.PutPoolMove(store.PoolMove{ObjectKey: key, CommandID: "cmd-2", SourcePool: "pool-a", TargetPool: "pool-c", CapacityBytes: 1 << 30})
	})
	if err == nil {
		t.Fatal("a second move of one object was stored")
	}
	mustTx(t, s, func(tx *store.Tx) error {
		m, err := tx.GetPoolMove(key)
		if err != nil {
			return err
		}
		if *m != (store.PoolMove{ObjectKey: key, CommandID: "cmd-1", SourcePool: "pool-a", TargetPool: "pool-b", CapacityBytes: 1 << 30}) {
			t.Errorf("move %+v", m)
		}
		for pool, want := range map[string]uint64{"pool-a": 1 << 30, "pool-b": 1 << 30, "pool-c": 0} {
			if got, err := tx.StoragePoolReserved(pool); err != nil || got != want {
				t.Errorf("%s reserves %d (%v), want %d", pool, got, err, want)
			}
			checkForReservation(t, tx, pool, want)
		}
		// The move settles: the Volume lives in pool-b, pool-a keeps a copy.
		if err := tx.PutVolume(poolVolume("vol-a", "pool-b", ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE, 1<<30)); err != nil {
			return err
		}
		if err := tx.DeletePoolMove(key); err != nil {
			return err
		}
		if err := tx.AddPoolCleanup("pool-a", key, "cmd-1"); err != nil {
			return err
		}
		return tx.AddPoolCleanup("pool-a", key, "cmd-1") // a replay changes nothing
	})
	mustTx(t, s, func(tx *store.Tx) error {
		if _, err := tx.GetPoolMove(key); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("settled move still read: %v", err)
		}
		a, err := tx.StoragePoolUsage("pool-a")
		if err != nil {
			return err
		}
		b, err := tx.StoragePoolUsage("pool-b")
		if err != nil {
			return err
		}
		if a != (store.PoolUsage{Removals: 1}) || b != (store.PoolUsage{Volumes: 1, ReservedBytes: 1 << 30}) {
			t.Errorf("usage pool-a %+v, pool-b %+v", a, b)
		}
		if has, err := tx.HasPoolCleanup("pool-a", key); err != nil || !has {
			t.Errorf("pool-a keeps no copy (%v)", err)
		}
		return tx.DeletePoolCleanup("pool-a", key)
	})
	mustTx(t, s, func(tx *store.Tx) error {
		if has, err := tx.HasPoolCleanup("pool-a", key); err != nil || has {
			t.Errorf("removed copy still kept (%v)", err)
		}
		u, err := tx.StoragePoolUsage("pool-a")
		if u != (store.PoolUsage{}) {
			t.Errorf("usage of pool-a after the removal %+v", u)
		}
		return err
	})
}

// undoPoolReserved undoes migration 14 (the pool_reserved counters and
// their triggers), which the columns of migration 7 cannot be dropped under.
func undoPoolReserved(t *testing.T, db *sql.DB, postgres bool) {
	t.Helper()
	stmts := []string{"DROP FUNCTION volumes_reserved, runtime_reserved, workspaces_reserved CASCADE", "DROP FUNCTION pool_reserved_add"}
	if !postgres {
		stmts = nil
		for _, table := range []string{"volumes", "runtime", "workspaces"} {
			for _, op := range []string{"insert", "update", "delete"} {
				stmts = append(stmts, "DROP TRIGGER "+table+"_reserved_"+op)
			}
		}
	}
	execRaw(t, db, append(stmts, "DROP TABLE pool_reserved", "DELETE FROM schema_migrations WHERE version = 14")...)
}

// testPoolReservedFollowsEveryWrite: the counter a new object is admitted
// against (StoragePoolReserved) equals the sum over the pool's objects
// (StoragePoolUsage) after every kind of write that moves it: Volumes
// created, resized, moved between pools, deleted and removed; layers
// placed, resized, moved; Workspaces deleting and deleted; and writes that
// change none of it.
func testPoolReservedFollowsEveryWrite(t *testing.T, dsn string) {
	s := Open(t, dsn)
	const (
		available = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
		deleting  = ctrlv1.VolumeState_VOLUME_STATE_DELETING
		deleted   = ctrlv1.VolumeState_VOLUME_STATE_DELETED
		stopped   = ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED
		wsGoing   = ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETING
	)
	steps := []struct {
		what string
		fn   func(tx *store.Tx) error
	}{
		{"volumes created", func(tx *store.Tx) error {
			if err := tx.PutVolume(poolVolume("vol-a", "pool-a", available, 1<<30)); err != nil {
				return err
			}
			return tx.PutVolume(poolVolume("vol-b", "pool-a", ctrlv1.VolumeState_VOLUME_STATE_CREATING, 2<<30))
		}},
		{"a volume written unchanged", func(tx *store.Tx) error {
			v := poolVolume("vol-a", "pool-a", available, 1<<30)
			v.Labels = map[string]string{"k": "v"}
			return tx.PutVolume(v)
		}},
		{"a volume resized", func(tx *store.Tx) error { return tx.PutVolume(poolVolume("vol-a", "pool-a", available, 3<<30)) }},
		{"a volume moved", func(tx *store.Tx) error { return tx.PutVolume(poolVolume("vol-b", "pool-b", available, 2<<30)) }},
		{"a layer placed before its workspace", func(tx *store.Tx) error {
			if err := tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: "ws-a", LayerPool: "pool-a", LayerCapacityBytes: 4 << 30}); err != nil {
				return err
			}
			return tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: "ws-a", State: stopped})
		}},
		{"a workspace with its layer", func(tx *store.Tx) error { return putLayer(tx, "ws-b", "pool-b", stopped, 8<<30) }},
		{"a layer resized and a layer moved", func(tx *store.Tx) error {
			if err := tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: "ws-a", LayerPool: "pool-a", LayerCapacityBytes: 5 << 30}); err != nil {
				return err
			}
			return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: "ws-b", LayerPool: "pool-a", LayerCapacityBytes: 8 << 30})
		}},
		{"a workspace deleting, then written again", func(tx *store.Tx) error {
			if err := tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: "ws-b", State: wsGoing}); err != nil {
				return err
			}
			return tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: "ws-b", State: wsGoing, Generation: 2})
		}},
		{"its layer cleared", func(tx *store.Tx) error { return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: "ws-b"}) }},
		{"a volume deleting, another deleted", func(tx *store.Tx) error {
			if err := tx.PutVolume(poolVolume("vol-a", "pool-a", deleting, 3<<30)); err != nil {
				return err
			}
			return tx.PutVolume(poolVolume("vol-b", "pool-b", deleted, 2<<30))
		}},
	}
	for _, step := range steps {
		mustTx(t, s, step.fn)
		mustTx(t, s, func(tx *store.Tx) error {
			for _, pool := range []string{"pool-a", "pool-b"} {
				u, err := tx.StoragePoolUsage(pool)
				if err != nil {
					return err
				}
				reserved, err := tx.StoragePoolReserved(pool)
				if err != nil {
					return err
				}
				if reserved != u.ReservedBytes {
					t.Errorf("after %s: %s reserved %d by its counter, %d by its objects", step.what, pool, reserved, u.ReservedBytes)
				}
			}
			return nil
		})
	}
	mustTx(t, s, func(tx *store.Tx) error {
		a, err := tx.StoragePoolReserved("pool-a")
		if err != nil {
			return err
		}
		b, err := tx.StoragePoolReserved("pool-b")
		if a != 5<<30 || b != 0 {
			t.Errorf("at the end pool-a reserves %d, pool-b %d; want %d and 0", a, b, 5<<30)
		}
		return err
	})
}
