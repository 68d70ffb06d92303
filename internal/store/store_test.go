package store_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
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

// The database holds secrets (docs/RELIABILITY.md, "Secrets at rest"): its
// file, WAL and shared-memory index are 0600 whatever the umask lets
// through, and files an earlier version left 0644 are made 0600 at open.
func TestSQLiteFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0o022) // the usual one, which lets 0644 through
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "ctrl.db")
	check := func(when string) {
		t.Helper()
		for _, suffix := range []string{"", "-wal", "-shm"} {
			st, err := os.Stat(path + suffix)
			if err != nil {
				t.Errorf("%s: %v", when, err)
				continue
			}
			if perm := st.Mode().Perm(); perm != 0o600 {
				t.Errorf("%s: %s is %#o, want 0600", when, filepath.Base(path+suffix), perm)
			}
		}
	}
	write := func(s *store.Store, name string) {
		t.Helper()
		if err := s.Tx(context.Background(), func(tx *store.Tx) error {
			_, err := tx.InitSetting(name, []byte("value"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}

	s, err := store.Open(context.Background(), "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	write(s, "first")
	check("a new database")
	// What an earlier version left: every file 0644, while it was open.
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Chmod(path+suffix, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Closing the last connection checkpoints and removes the WAL: copy
	// the loose files aside and put them back, as a crash leaves them.
	saved := map[string][]byte{}
	for _, suffix := range []string{"-wal", "-shm"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		saved[suffix] = b
	}
	s.Close()
	for suffix, b := range saved {
		if err := os.WriteFile(path+suffix, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path+suffix, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err = store.Open(context.Background(), "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write(s, "second")
	check("a database an earlier version left 0644")
}
