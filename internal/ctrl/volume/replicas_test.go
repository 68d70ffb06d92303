package volume_test

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// Two ctrl replicas on one PostgreSQL database, each with its own
// connections, admit at once more Volumes than their pool's capacity
// holds: exactly as many as fit are admitted, the pool's reservations
// never pass its capacity, and the rest are refused as
// resource_exhausted. (SQLite has one ctrl: its file is locked.)
func TestTwoReplicasNeverOverbookAPool(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	const fit, attempts, size = 10, 24, 64 * mib
	setup := storetest.Open(t, dsn)
	storetest.PutNodeWithPool(t, setup, "node-a", "pool-a")
	if err := setup.Tx(ctx, func(tx *store.Tx) error { return tx.SetStoragePoolCapacity("pool-a", fit*size) }); err != nil {
		t.Fatal(err)
	}
	replica := func(name string) *volume.Service {
		st := storetest.Open(t, dsn)
		runner := command.NewRunner(st, name, slog.Default())
		return volume.New(st, fleet.New(st, runner, slog.Default(), fleet.DefaultConfig, fleet.Deps{}), runner, volume.DefaultProfile)
	}
	replicas := []*volume.Service{replica("a"), replica("b")}

	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted, refused := 0, 0
	for i := range attempts {
		wg.Go(func() {
			_, err := replicas[i%2].Create(ctx, create(fmt.Sprintf("c%02d", i), size))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				admitted++
			case connect.CodeOf(err) == connect.CodeResourceExhausted:
				refused++
			default:
				t.Errorf("create c%02d: %v", i, err)
			}
		})
	}
	wg.Wait()

	if admitted != fit || refused != attempts-fit {
		t.Errorf("%d admitted and %d refused of %d, want %d admitted", admitted, refused, attempts, fit)
	}
	if err := setup.Tx(ctx, func(tx *store.Tx) error {
		reserved, err := tx.StoragePoolReserved("pool-a")
		if err == nil && reserved != uint64(admitted)*size {
			t.Errorf("pool-a reserves %d MiB for %d Volumes of %d MiB (capacity %d MiB)", reserved/mib, admitted, size/mib, fit*size/mib)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
