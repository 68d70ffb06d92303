package archive_test

import (
	"bytes"
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"

	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// FuzzArchiveReader: the reader never panics, never writes outside its
// target directory, and accepts only an archive that is internally
// consistent — its trailer digest is the sha256 of what precedes it, and
// it leaves exactly the manifest's parts, each of its logical size.
func FuzzArchiveReader(f *testing.F) {
	good := valid().encode(f)
	f.Add(good)
	f.Add(good[:len(good)/2])
	r := valid()
	r.bodies = r.bodies[:1]
	f.Add(r.encode(f))
	r = valid()
	r.version = 2
	f.Add(r.encode(f))
	lim := archive.Limits{MaxManifestBytes: 64 << 10, MaxParts: 8, MaxExtents: 64, MaxLogicalSize: 16 << 20}
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		target := filepath.Join(base, "target")
		if err := os.Mkdir(target, 0o700); err != nil {
			t.Fatal(err)
		}
		m, err := archive.Extract(bytes.NewReader(data), target, lim)
		if entries, _ := os.ReadDir(base); len(entries) != 1 {
			t.Fatalf("the reader wrote beside its target: %v", entries)
		}
		left, _ := os.ReadDir(target)
		if err != nil {
			if len(left) != 0 {
				t.Fatalf("refused (%v) but left %d files", err, len(left))
			}
			return
		}
		if len(data) < sha256.Size {
			t.Fatal("accepted an archive shorter than its trailer digest")
		}
		if sum := sha256.Sum256(data[:len(data)-sha256.Size]); !bytes.Equal(sum[:], data[len(data)-sha256.Size:]) {
			t.Fatal("accepted an archive whose trailer digest does not match")
		}
		if len(left) != len(m.Parts) {
			t.Fatalf("accepted %d parts, left %d files", len(m.Parts), len(left))
		}
		for _, p := range m.Parts {
			fi, err := os.Stat(filepath.Join(target, p.Name))
			if err != nil || uint64(fi.Size()) != p.LogicalSize {
				t.Fatalf("part %s: %v, size %v, want %d", p.Name, err, fi, p.LogicalSize)
			}
		}
	})
}
