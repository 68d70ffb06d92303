package fsutil_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kibotos/kibotos/internal/node/fsutil"
)

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{"first", "second, longer"} {
		if err := fsutil.WriteFileAtomic(dir, "f", []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, "f"))
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %v, want only f", entries)
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, "missing"), "f", nil, 0o600); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}
