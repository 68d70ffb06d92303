package store_test

import (
	"context"
	"testing"

	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// The conformance suite, once per database kind.
func TestStore(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			storetest.Run(t, b)
			storetest.RunNodeLifecycle(t, b)
			storetest.RunDataPlaneSessions(t, b)
			storetest.RunStoragePools(t, b)
			storetest.RunPlacement(t, b)
			storetest.RunEgresses(t, b)
			storetest.RunTransfers(t, b)
		})
	}
}

func TestSQLiteFileServesOneProcessOnly(t *testing.T) {
	dsn := storetest.SQLiteDSN(t)
	first := storetest.Open(t, dsn)
	if !first.Exclusive() {
		t.Error("a SQLite store is its file's only user")
	}
	if s, err := store.Open(context.Background(), dsn); err == nil {
		s.Close()
		t.Fatal("a second store opened the same SQLite file")
	}
}
