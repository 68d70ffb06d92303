package blockfile_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/node/blockfile"
)

const MiB = 1 << 20

func manager(t *testing.T) *blockfile.Manager {
	t.Helper()
	m, err := blockfile.New()
	if err != nil {
		t.Skipf("e2fsprogs not available: %v", err)
	}
	return m
}

func fsBytes(t *testing.T, path string) uint64 {
	t.Helper()
	n, err := blockfile.FilesystemBytes(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPath(t *testing.T) {
	for _, tc := range []struct {
		ref  blockfile.Ref
		want string
	}{
		{blockfile.Ref{PoolDir: "/p", Kind: blockfile.Volume, ObjectID: "vol-1"}, "/p/volumes/vol-1.img"},
		{blockfile.Ref{PoolDir: "/p", Kind: blockfile.WritableLayer, ObjectID: "ws_1.A"}, "/p/layers/ws_1.A.img"},
	} {
		got, err := tc.ref.Path()
		if err != nil || got != tc.want {
			t.Errorf("%+v: %q, %v; want %q", tc.ref, got, err, tc.want)
		}
	}
	for _, ref := range []blockfile.Ref{
		{PoolDir: "/p", Kind: blockfile.Volume, ObjectID: ""},
		{PoolDir: "/p", Kind: blockfile.Volume, ObjectID: ".hidden"},
		{PoolDir: "/p", Kind: blockfile.Volume, ObjectID: "../x"},
		{PoolDir: "/p", Kind: blockfile.Volume, ObjectID: "a/b"},
		{PoolDir: "/p", Kind: blockfile.Volume, ObjectID: "a b"},
		{PoolDir: "/p", Kind: blockfile.Volume, ObjectID: strings.Repeat("a", 201)},
		{PoolDir: "/p", Kind: 0, ObjectID: "x"},
		{PoolDir: "", Kind: blockfile.Volume, ObjectID: "x"},
	} {
		if _, err := ref.Path(); !errors.Is(err, blockfile.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", ref, err)
		}
	}
}

func TestEnsureCreatesSparseExt4(t *testing.T) {
	m := manager(t)
	pool := t.TempDir()
	ref := blockfile.Ref{PoolDir: pool, Kind: blockfile.Volume, ObjectID: "vol-1"}
	st, err := m.Ensure(context.Background(), ref, 64*MiB)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Exists || st.CapacityBytes != 64*MiB {
		t.Fatalf("status %+v", st)
	}
	if st.AllocatedBytes == 0 || st.AllocatedBytes >= 16*MiB {
		t.Fatalf("allocated %d bytes: want a sparse file", st.AllocatedBytes)
	}
	path := filepath.Join(pool, "volumes", "vol-1.img")
	if got := fsBytes(t, path); got != 64*MiB {
		t.Fatalf("filesystem is %d bytes, want %d", got, 64*MiB)
	}
	entries, err := os.ReadDir(filepath.Join(pool, "volumes"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("volumes holds %v, want only vol-1.img", entries)
	}

	layer, err := m.Ensure(context.Background(), blockfile.Ref{PoolDir: pool, Kind: blockfile.WritableLayer, ObjectID: "ws-1"}, 8*MiB)
	if err != nil || !layer.Exists {
		t.Fatalf("layer: %+v %v", layer, err)
	}
	if _, err := os.Stat(filepath.Join(pool, "layers", "ws-1.img")); err != nil {
		t.Fatal(err)
	}
}

func TestEnsureIsIdempotent(t *testing.T) {
	m := manager(t)
	pool := t.TempDir()
	ref := blockfile.Ref{PoolDir: pool, Kind: blockfile.Volume, ObjectID: "vol-1"}
	if _, err := m.Ensure(context.Background(), ref, 32*MiB); err != nil {
		t.Fatal(err)
	}
	path, _ := ref.Path()
	// A marker byte in the filesystem's free space shows the file is left
	// alone, not rebuilt.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("kept"), 30*MiB); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before, _ := os.Stat(path)

	st, err := m.Ensure(context.Background(), ref, 32*MiB)
	if err != nil || st.CapacityBytes != 32*MiB {
		t.Fatalf("second Ensure: %+v %v", st, err)
	}
	after, _ := os.Stat(path)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("second Ensure modified the file")
	}
	buf := make([]byte, 4)
	f, _ = os.Open(path)
	f.ReadAt(buf, 30*MiB)
	f.Close()
	if string(buf) != "kept" {
		t.Fatal("second Ensure rebuilt the file")
	}
}

func TestEnsureGrowsFileAndFilesystem(t *testing.T) {
	m := manager(t)
	pool := t.TempDir()
	ref := blockfile.Ref{PoolDir: pool, Kind: blockfile.Volume, ObjectID: "vol-1"}
	if _, err := m.Ensure(context.Background(), ref, 16*MiB); err != nil {
		t.Fatal(err)
	}
	st, err := m.Ensure(context.Background(), ref, 256*MiB)
	if err != nil {
		t.Fatal(err)
	}
	if st.CapacityBytes != 256*MiB {
		t.Fatalf("status %+v", st)
	}
	path, _ := ref.Path()
	if got := fsBytes(t, path); got != 256*MiB {
		t.Fatalf("filesystem is %d bytes after grow, want %d", got, 256*MiB)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("directory holds %v after grow, want only the image", entries)
	}
}

func TestEnsureNeverShrinks(t *testing.T) {
	m := manager(t)
	pool := t.TempDir()
	ref := blockfile.Ref{PoolDir: pool, Kind: blockfile.Volume, ObjectID: "vol-1"}
	if _, err := m.Ensure(context.Background(), ref, 32*MiB); err != nil {
		t.Fatal(err)
	}
	st, err := m.Ensure(context.Background(), ref, 16*MiB)
	if !errors.Is(err, blockfile.ErrShrink) {
		t.Fatalf("Ensure smaller: %v, want ErrShrink", err)
	}
	if !st.Exists || st.CapacityBytes != 32*MiB {
		t.Fatalf("status with ErrShrink %+v, want the file's", st)
	}
	path, _ := ref.Path()
	if got := fsBytes(t, path); got != 32*MiB {
		t.Fatalf("filesystem is %d bytes, want it untouched", got)
	}
}

func TestEnsureRejects(t *testing.T) {
	m := manager(t)
	pool := t.TempDir()
	ref := blockfile.Ref{PoolDir: pool, Kind: blockfile.Volume, ObjectID: "vol-1"}
	if _, err := m.Ensure(context.Background(), ref, 1000); !errors.Is(err, blockfile.ErrInvalid) {
		t.Errorf("tiny capacity: %v, want ErrInvalid", err)
	}
	missing := blockfile.Ref{PoolDir: filepath.Join(pool, "not-mounted"), Kind: blockfile.Volume, ObjectID: "vol-1"}
	if _, err := m.Ensure(context.Background(), missing, 8*MiB); !errors.Is(err, blockfile.ErrPoolUnavailable) {
		t.Errorf("missing pool dir: %v, want ErrPoolUnavailable", err)
	}
	if _, err := os.Stat(missing.PoolDir); !os.IsNotExist(err) {
		t.Errorf("Ensure created the pool directory")
	}
	if _, err := m.Remove(missing); !errors.Is(err, blockfile.ErrPoolUnavailable) {
		t.Errorf("Remove in missing pool dir: %v, want ErrPoolUnavailable", err)
	}
	// A file that is not a filesystem is not taken for a block file.
	path, _ := ref.Path()
	os.MkdirAll(filepath.Dir(path), 0o755)
	if err := os.WriteFile(path, make([]byte, 8*MiB), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ensure(context.Background(), ref, 8*MiB); err == nil {
		t.Error("Ensure accepted a file without a filesystem")
	}
}

func TestEnsureRecoversFromCrashes(t *testing.T) {
	m := manager(t)
	pool := t.TempDir()
	ref := blockfile.Ref{PoolDir: pool, Kind: blockfile.Volume, ObjectID: "vol-1"}
	path, _ := ref.Path()
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	// A half-made temporary file from a crashed create.
	if err := os.WriteFile(filepath.Join(dir, ".vol-1.img.tmp"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ensure(context.Background(), ref, 16*MiB); err != nil {
		t.Fatal(err)
	}
	// A grow that crashed after enlarging the file, before resize2fs.
	if err := os.WriteFile(filepath.Join(dir, ".vol-1.img.growing"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 48*MiB); err != nil {
		t.Fatal(err)
	}
	st, err := m.Ensure(context.Background(), ref, 48*MiB)
	if err != nil || st.CapacityBytes != 48*MiB {
		t.Fatalf("Ensure after crashed grow: %+v %v", st, err)
	}
	if got := fsBytes(t, path); got != 48*MiB {
		t.Fatalf("filesystem is %d bytes, want the interrupted grow finished (%d)", got, 48*MiB)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %v, want only the image", entries)
	}
}

func TestRemove(t *testing.T) {
	m := manager(t)
	pool := t.TempDir()
	ref := blockfile.Ref{PoolDir: pool, Kind: blockfile.WritableLayer, ObjectID: "ws-1"}
	// Missing (even its directory) is success.
	st, err := m.Remove(ref)
	if err != nil || st.Exists {
		t.Fatalf("Remove of a missing file: %+v %v", st, err)
	}
	if _, err := m.Ensure(context.Background(), ref, 8*MiB); err != nil {
		t.Fatal(err)
	}
	st, err = m.Remove(ref)
	if err != nil || st != (blockfile.Status{}) {
		t.Fatalf("Remove: %+v %v", st, err)
	}
	path, _ := ref.Path()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("file still there: %v", err)
	}
	if st, err := m.Remove(ref); err != nil || st.Exists {
		t.Fatalf("second Remove: %+v %v", st, err)
	}
}

func TestConcurrentEnsureOfOneFile(t *testing.T) {
	m := manager(t)
	pool := t.TempDir()
	ref := blockfile.Ref{PoolDir: pool, Kind: blockfile.Volume, ObjectID: "vol-1"}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := m.Ensure(context.Background(), ref, 16*MiB)
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	path, _ := ref.Path()
	if got := fsBytes(t, path); got != 16*MiB {
		t.Fatalf("filesystem %d bytes", got)
	}
}
