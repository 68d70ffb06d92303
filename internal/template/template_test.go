package template_test

import (
	"archive/tar"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/template"
)

// debugfs reads an ext4 image without mounting it.
func debugfs(t *testing.T, image, request string) string {
	t.Helper()
	bin := "/sbin/debugfs"
	if p, err := exec.LookPath("debugfs"); err == nil {
		bin = p
	}
	out, err := exec.Command(bin, "-R", request, image).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs %s: %v: %s", request, err, out)
	}
	return string(out)
}

func TestFromDirMakesAnExt4ImageOwnedByRoot(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "greeting"), []byte("hello\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "root.img")
	img, err := template.FromDir(context.Background(), dir, out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(img.Digest, "sha256:") || img.Size < 16<<20 {
		t.Errorf("image %+v", img)
	}
	if got := debugfs(t, out, "cat /etc/greeting"); !strings.Contains(got, "hello") {
		t.Errorf("file content in the image: %q", got)
	}
	if got := debugfs(t, out, "stat /etc/greeting"); !strings.Contains(got, "User:     0") || !strings.Contains(got, "Mode:  0640") {
		t.Errorf("owner and mode in the image: %s", got)
	}
}

func TestFromTarKeepsEveryEntryInsideItsRoot(t *testing.T) {
	archive := filepath.Join(t.TempDir(), "evil.tar")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for _, name := range []string{"ok", "../../escape"} {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte("x\n"))
	}
	tw.Close()
	f.Close()
	// "../../escape" is cleaned to /escape inside the root, never outside.
	img, err := template.FromTar(context.Background(), archive, filepath.Join(t.TempDir(), "root.img"))
	if err != nil {
		t.Fatal(err)
	}
	if got := debugfs(t, img.Path, "ls -l /"); !strings.Contains(got, "escape") {
		t.Errorf("the entry is not inside the image root: %s", got)
	}
}
