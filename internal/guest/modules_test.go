package guest_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/guest"
)

func TestParseModuleOrder(t *testing.T) {
	got, err := guest.ParseModuleOrder(strings.NewReader(`# virtio first
kernel/drivers/virtio/virtio_mmio.ko

  kernel/drivers/block/virtio_blk.ko  
kernel/fs/overlayfs/overlay.ko.xz
`))
	want := []string{"kernel/drivers/virtio/virtio_mmio.ko", "kernel/drivers/block/virtio_blk.ko", "kernel/fs/overlayfs/overlay.ko.xz"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%q, %v", got, err)
	}
}

func TestModuleName(t *testing.T) {
	for path, want := range map[string]string{
		"kernel/drivers/block/virtio_blk.ko":     "virtio_blk",
		"kernel/fs/overlayfs/overlay.ko.xz":      "overlay",
		"kernel/arch/x86/crypto/crc32c-intel.ko": "crc32c_intel",
		"/abs/ext4.ko.zst":                       "ext4",
	} {
		if got := guest.ModuleName(path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

func TestReleaseDir(t *testing.T) {
	dir := t.TempDir()
	if _, err := guest.ReleaseDir(dir, "6.1.0-48-amd64"); err == nil {
		t.Error("no release directory: want an error")
	}
	mustMkdir(t, filepath.Join(dir, "6.1.0-48-amd64"))
	mustWrite(t, filepath.Join(dir, guest.ModuleOrderFile), "")
	for _, release := range []string{"6.1.0-48-amd64", "other", ""} {
		if got, err := guest.ReleaseDir(dir, release); err != nil || got != filepath.Join(dir, "6.1.0-48-amd64") {
			t.Errorf("release %q: %q, %v", release, got, err)
		}
	}
	mustMkdir(t, filepath.Join(dir, "6.12.0-1-amd64"))
	if got, err := guest.ReleaseDir(dir, "6.12.0-1-amd64"); err != nil || filepath.Base(got) != "6.12.0-1-amd64" {
		t.Errorf("the running release wins: %q, %v", got, err)
	}
	if _, err := guest.ReleaseDir(dir, "other"); err == nil {
		t.Error("two release directories, neither running: want an error")
	}
}

// A module that cannot be loaded is reported by name and the others are
// still tried. (The files do not exist, so no module reaches the kernel.)
func TestLoadModulesGoesOnAfterAFailure(t *testing.T) {
	dir := t.TempDir()
	mustMkdir(t, filepath.Join(dir, "6.1.0-48-amd64"))
	mustWrite(t, filepath.Join(dir, guest.ModuleOrderFile), "kernel/a/missing_one.ko\nkernel/b/missing-two.ko.xz\n")
	results, err := guest.LoadModules(dir, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d results, want 2", len(results))
	}
	for i, want := range []string{"missing_one", "missing_two"} {
		r := results[i]
		if r.Name != want || r.Loaded || r.Err == nil || !os.IsNotExist(r.Err) {
			t.Errorf("result %d: %+v", i, r)
		}
		if !strings.HasPrefix(r.Path, filepath.Join(dir, "6.1.0-48-amd64", "kernel")) {
			t.Errorf("path %s", r.Path)
		}
	}
}

func TestLoadModulesWithoutAList(t *testing.T) {
	if _, err := guest.LoadModules(t.TempDir(), "", nil); !os.IsNotExist(err) {
		t.Fatalf("want a not-exist error, got %v", err)
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	mustMkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
