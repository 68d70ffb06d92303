package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/template"
)

// BootableCatalog registers the default platform and busybox template of
// BuildVMArtifacts: what a Workspace needs to run on a real microVM.
func (c *Cluster) BootableCatalog(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	art := BuildVMArtifacts(t)
	if _, err := c.Ctrl.Catalog().RegisterPlatform(ctx, "default", art.Platform, art.Dir, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ctrl.Catalog().RegisterTemplate(ctx, "busybox", art.Template, true); err != nil {
		t.Fatal(err)
	}
}

// UnbootableCatalog registers a default platform and template no VM can
// boot: a create or start then goes through placement (the layer placed
// and reserved, the execution charged to a node) and fails when the node
// boots it, releasing the execution. For tests of what placement and a
// Workspace without an execution do, without booting a VM.
func (c *Cluster) UnbootableCatalog(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	for _, f := range []string{"vmlinux", "initramfs"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("not a "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Ctrl.Catalog().RegisterPlatform(ctx, "default", &platform.Manifest{Vmlinux: "vmlinux", Initramfs: "initramfs", Digest: "sha256:fake"}, dir, true); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root.img")
	body := []byte("not an ext4 image")
	if err := os.WriteFile(root, body, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	if _, err := c.Ctrl.Catalog().RegisterTemplate(ctx, "busybox", &template.Image{Path: root, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(body))}, true); err != nil {
		t.Fatal(err)
	}
}
