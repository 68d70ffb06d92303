package archive_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// stage streams b into a staging file in dir, as ctrl stores what a node
// sends, and returns it staged.
func stage(t *testing.T, dir string, b *archive.Body) archive.Staged {
	t.Helper()
	f, err := os.CreateTemp(dir, b.Part.Name+".*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	d, err := b.Stream(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	if d != b.Part.Digest {
		t.Fatalf("Stream returned %s, set Part.Digest %s", d, b.Part.Digest)
	}
	return archive.Staged{Part: b.Part, File: f}
}

func newBody(t *testing.T, in archive.Input) *archive.Body {
	t.Helper()
	b, err := archive.NewBody(in)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Parts encoded one by one (as nodes do), staged and then framed make the
// archive Write makes of the same files, and it restores them.
func TestAssembleMatchesWrite(t *testing.T) {
	dir := t.TempDir()
	src := sparseFile(t, filepath.Join(dir, "src"), gib, map[int64]int64{0: mib, 300 * mib: 2 * mib, gib - 64*kib: 64 * kib})
	blob := sparseFile(t, filepath.Join(dir, "image"), 10*kib+3, map[int64]int64{0: 10*kib + 3})
	in := []archive.Input{{Name: "rootfs", Kind: archive.KindBlock, File: src}, {Name: "template-image", Kind: archive.KindBlob, File: blob}}

	rootfs, image := newBody(t, in[0]), newBody(t, in[1])
	used := usedBytes(t, src)
	if p := rootfs.Part; p.Extents != 3 || p.Size != uint64(used)+3*16 || p.LogicalSize != uint64(gib) || p.Digest != "" {
		t.Fatalf("rootfs planned as %+v: want 3 extents, size %d, logical size 1 GiB, no digest yet", p, used+3*16)
	}
	if p := image.Part; p.Size != uint64(10*kib+3) || p.LogicalSize != p.Size || p.Extents != 0 {
		t.Fatalf("image planned as %+v", p)
	}
	staging := t.TempDir()
	var assembled bytes.Buffer
	got, err := archive.Assemble(context.Background(), &assembled, workspaceManifest(),
		[]archive.Staged{stage(t, staging, rootfs), stage(t, staging, image)})
	if err != nil {
		t.Fatal(err)
	}
	var written bytes.Buffer
	want, err := archive.Write(context.Background(), &written, workspaceManifest(), in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(assembled.Bytes(), written.Bytes()) || got.Digest != want.Digest || got.Size != want.Size {
		t.Fatalf("Assemble wrote %d bytes (%s), Write %d (%s)", assembled.Len(), got.Digest, written.Len(), want.Digest)
	}

	out := t.TempDir()
	if _, err := archive.Extract(&assembled, out, archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	sameRestored(t, out, src, blob)
}

// A staged body that is not what its entry says stops the archive there.
func TestAssembleRefusesChangedStagedBody(t *testing.T) {
	cases := map[string]func(t *testing.T, f *os.File, size int64){
		"one byte flipped": func(t *testing.T, f *os.File, size int64) {
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, size-1); err != nil {
				t.Fatal(err)
			}
			b[0] ^= 1
			if _, err := f.WriteAt(b, size-1); err != nil {
				t.Fatal(err)
			}
		},
		"truncated": func(t *testing.T, f *os.File, size int64) {
			if err := f.Truncate(size - 1); err != nil {
				t.Fatal(err)
			}
		},
		"longer": func(t *testing.T, f *os.File, size int64) {
			if _, err := f.WriteAt([]byte{0}, size); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			src := sparseFile(t, filepath.Join(dir, "src"), 16*mib, map[int64]int64{0: 4 * kib, 8 * mib: 64 * kib})
			s := stage(t, dir, newBody(t, archive.Input{Name: "disk", Kind: archive.KindBlock, File: src}))
			change(t, s.File, int64(s.Part.Size))
			var buf bytes.Buffer
			_, err := archive.Assemble(context.Background(), &buf, workspaceManifest(), []archive.Staged{s})
			if !errors.Is(err, archive.ErrSourceChanged) {
				t.Fatalf("got %v, want ErrSourceChanged", err)
			}
			if _, err := archive.Verify(&buf, archive.Limits{}); err == nil {
				t.Fatal("what Assemble wrote before it failed is a valid archive")
			}
		})
	}
}

// A Workspace with no Volume and no layer exports as an archive of no part.
func TestAssembleZeroParts(t *testing.T) {
	var buf bytes.Buffer
	w, err := archive.Assemble(context.Background(), &buf, workspaceManifest(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	if w.Size != uint64(buf.Len()) || w.Digest != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("Written %+v does not describe the %d bytes written", w, buf.Len())
	}
	m, err := archive.Verify(&buf, archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Parts) != 0 || m.Source.ID != "ws-1" {
		t.Fatalf("manifest read back as %+v", m)
	}
}

// A block file that changes between NewBody and Stream is refused, whether
// it grew, shrank or had a hole filled at the same size.
func TestStreamRefusesChangedSource(t *testing.T) {
	cases := map[string]func(t *testing.T, f *os.File){
		"grew": func(t *testing.T, f *os.File) {
			if _, err := f.WriteAt(bytes.Repeat([]byte{7}, 4096), 16*mib); err != nil {
				t.Fatal(err)
			}
		},
		"shrank": func(t *testing.T, f *os.File) {
			if err := f.Truncate(8 * mib); err != nil {
				t.Fatal(err)
			}
		},
		"hole filled": func(t *testing.T, f *os.File) {
			if _, err := f.WriteAt(bytes.Repeat([]byte{7}, 4096), 4*mib); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			src := sparseFile(t, filepath.Join(t.TempDir(), "src"), 16*mib, map[int64]int64{0: 4 * kib, 12 * mib: 64 * kib})
			b := newBody(t, archive.Input{Name: "disk", Kind: archive.KindBlock, File: src})
			change(t, src)
			if _, err := b.Stream(context.Background(), io.Discard); !errors.Is(err, archive.ErrSourceChanged) {
				t.Fatalf("got %v, want ErrSourceChanged", err)
			}
			if b.Part.Digest != "" {
				t.Fatalf("a refused Stream set the digest %s", b.Part.Digest)
			}
		})
	}
}

func TestNewBodyRefuses(t *testing.T) {
	dir := t.TempDir()
	f := sparseFile(t, filepath.Join(dir, "f"), 4*kib, nil)
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for name, in := range map[string]archive.Input{
		"unknown kind": {Name: "f", Kind: "tar", File: f},
		"a directory":  {Name: "d", Kind: archive.KindBlob, File: d},
	} {
		if _, err := archive.NewBody(in); err == nil {
			t.Errorf("%s: NewBody accepted it", name)
		}
	}
}
