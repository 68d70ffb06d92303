package blockfile_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kibotos/kibotos/internal/node/blockfile"
)

// volumeWithData makes a 64 MiB Volume in pool and writes payload at
// offset 32 MiB, past the filesystem's metadata.
func volumeWithData(t *testing.T, m *blockfile.Manager, pool string, payload []byte) blockfile.Ref {
	t.Helper()
	ref := blockfile.Ref{PoolDir: pool, Kind: blockfile.Volume, ObjectID: "vol-1"}
	if _, err := m.Ensure(context.Background(), ref, 64*MiB); err != nil {
		t.Fatal(err)
	}
	path, _ := ref.Path()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(payload, 32*MiB); err != nil {
		t.Fatal(err)
	}
	return ref
}

func payload() []byte {
	p := make([]byte, 3*MiB)
	for i := range p {
		p[i] = byte(i*7 + 1)
	}
	// A run of zeros inside the data stays a hole in the copy.
	clear(p[MiB : 2*MiB])
	return p
}

func readFile(t *testing.T, ref blockfile.Ref) []byte {
	t.Helper()
	path, _ := ref.Path()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCopyCopiesOnlyBlocksInUseAndStaysSparse(t *testing.T) {
	m := manager(t)
	src := volumeWithData(t, m, t.TempDir(), payload())
	dst := blockfile.Ref{PoolDir: t.TempDir(), Kind: blockfile.Volume, ObjectID: "vol-1"}
	srcPath, _ := src.Path()
	srcSt, _ := blockfile.Stat(srcPath)

	var last, total uint64
	calls := 0
	res, err := m.Copy(context.Background(), src, dst, func(c, tot uint64) {
		if c < last {
			t.Errorf("progress went back from %d to %d", last, c)
		}
		last, total = c, tot
		calls++
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, src), readFile(t, dst)) {
		t.Fatal("the copy's content differs from the source's")
	}
	if res.CapacityBytes != 64*MiB || !res.Exists {
		t.Fatalf("status %+v", res.Status)
	}
	// Only the data extents were read: far less than the file's size.
	if res.CopiedBytes == 0 || res.CopiedBytes > srcSt.AllocatedBytes || res.CopiedBytes >= 32*MiB {
		t.Fatalf("copied %d bytes of a 64 MiB file using %d", res.CopiedBytes, srcSt.AllocatedBytes)
	}
	if last != total || total != res.CopiedBytes || calls < 2 {
		t.Fatalf("progress ended at %d/%d after %d calls, copied %d", last, total, calls, res.CopiedBytes)
	}
	// The zero MiB inside the payload was not written.
	if res.AllocatedBytes > srcSt.AllocatedBytes-MiB {
		t.Fatalf("copy allocates %d bytes, source %d: want the zeros left as a hole", res.AllocatedBytes, srcSt.AllocatedBytes)
	}
	if got := fsBytes(t, mustPath(t, dst)); got != 64*MiB {
		t.Fatalf("copied filesystem is %d bytes", got)
	}
	if res.Digest == "" {
		t.Fatal("no digest")
	}
}

func mustPath(t *testing.T, ref blockfile.Ref) string {
	t.Helper()
	p, err := ref.Path()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCopyIsIdempotent(t *testing.T) {
	m := manager(t)
	src := volumeWithData(t, m, t.TempDir(), payload())
	dst := blockfile.Ref{PoolDir: t.TempDir(), Kind: blockfile.Volume, ObjectID: "vol-1"}
	first, err := m.Copy(context.Background(), src, dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	info1, _ := os.Stat(mustPath(t, dst))
	again, err := m.Copy(context.Background(), src, dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	info2, _ := os.Stat(mustPath(t, dst))
	if again.Digest != first.Digest || !os.SameFile(info1, info2) {
		t.Fatalf("a repeat copied again (digest %s vs %s)", again.Digest, first.Digest)
	}
}

func TestCopyRestartsAfterACrash(t *testing.T) {
	m := manager(t)
	src := volumeWithData(t, m, t.TempDir(), payload())
	dstPool := t.TempDir()
	dst := blockfile.Ref{PoolDir: dstPool, Kind: blockfile.Volume, ObjectID: "vol-1"}
	// A crash mid-copy leaves a partial temporary file and no real name.
	dir := filepath.Join(dstPool, "volumes")
	if err := os.Mkdir(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".vol-1.img.tmp"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Copy(context.Background(), src, dst, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, src), readFile(t, dst)) {
		t.Fatal("the copy's content differs from the source's")
	}
	if _, err := os.Lstat(filepath.Join(dir, ".vol-1.img.tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left: %v", err)
	}
}

func TestCopyReplacesADestinationThatDiffers(t *testing.T) {
	m := manager(t)
	src := volumeWithData(t, m, t.TempDir(), payload())
	dst := blockfile.Ref{PoolDir: t.TempDir(), Kind: blockfile.Volume, ObjectID: "vol-1"}
	if _, err := m.Copy(context.Background(), src, dst, nil); err != nil {
		t.Fatal(err)
	}
	// Bytes in a hole of the source make the destination differ.
	f, err := os.OpenFile(mustPath(t, dst), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("stray"), 60*MiB); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := m.Copy(context.Background(), src, dst, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readFile(t, src), readFile(t, dst)) {
		t.Fatal("the stale destination was kept")
	}
}

func TestCopyRefusals(t *testing.T) {
	m := manager(t)
	srcPool := t.TempDir()
	src := volumeWithData(t, m, srcPool, payload())
	missing := blockfile.Ref{PoolDir: srcPool, Kind: blockfile.Volume, ObjectID: "vol-2"}
	dstPool := t.TempDir()
	for name, tc := range map[string]struct {
		src, dst blockfile.Ref
		want     error
	}{
		"missing source": {missing, blockfile.Ref{PoolDir: dstPool, Kind: blockfile.Volume, ObjectID: "vol-2"}, blockfile.ErrMissing},
		"same file":      {src, src, blockfile.ErrInvalid},
		"bad id":         {src, blockfile.Ref{PoolDir: dstPool, Kind: blockfile.Volume, ObjectID: "../x"}, blockfile.ErrInvalid},
		"no pool dir":    {src, blockfile.Ref{PoolDir: filepath.Join(dstPool, "gone"), Kind: blockfile.Volume, ObjectID: "vol-1"}, blockfile.ErrPoolUnavailable},
	} {
		if _, err := m.Copy(context.Background(), tc.src, tc.dst, nil); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	// Nothing was made in the destination pool.
	if entries, _ := os.ReadDir(dstPool); len(entries) != 0 {
		t.Fatalf("refusals left %v", entries)
	}
}

func TestCopyCanceledLeavesNoDestination(t *testing.T) {
	m := manager(t)
	src := volumeWithData(t, m, t.TempDir(), payload())
	dstPool := t.TempDir()
	dst := blockfile.Ref{PoolDir: dstPool, Kind: blockfile.Volume, ObjectID: "vol-1"}
	ctx, cancel := context.WithCancel(context.Background())
	_, err := m.Copy(ctx, src, dst, func(c, _ uint64) {
		if c > 0 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want canceled", err)
	}
	entries, _ := os.ReadDir(filepath.Join(dstPool, "volumes"))
	if len(entries) != 0 {
		t.Fatalf("a canceled copy left %v", entries)
	}
}
