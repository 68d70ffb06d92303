package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/kibotos/kibotos/internal/ctrl/catalog"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/template"
)

// Catalog names of the simulation's placeholders.
const (
	PlatformKey = "sim"
	Template    = "sim"
)

// RegisterCatalog registers, in an in-process ctrl's catalog, a platform
// (key "sim") and a template ("sim") whose artifacts are placeholder files
// that say they are a simulation, and makes them the deployment's
// defaults, so Workspaces can be created on a ctrl whose only nodes are
// simulated (which never fetch artifacts). dir receives the files. For
// tests and benchmarks only.
func RegisterCatalog(ctx context.Context, cat *catalog.Catalog, dir string) error {
	files := map[string]string{
		platform.VmlinuxFile:   "kibotos sim: a placeholder kernel for simulated nodes; it boots nothing\n",
		platform.InitramfsFile: "kibotos sim: a placeholder initramfs for simulated nodes\n",
		"root.img":             "kibotos sim: a placeholder root image for simulated nodes\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	m := &platform.Manifest{
		KernelVersion: "sim", Vmlinux: platform.VmlinuxFile, Initramfs: platform.InitramfsFile,
		VmlinuxSHA256: sha(files[platform.VmlinuxFile]), InitramfsSHA256: sha(files[platform.InitramfsFile]),
	}
	m.Digest = platform.Digest(m.VmlinuxSHA256, m.InitramfsSHA256)
	if _, err := cat.RegisterPlatform(ctx, PlatformKey, m, dir, true); err != nil {
		return err
	}
	img := &template.Image{Path: filepath.Join(dir, "root.img"), Digest: "sha256:" + sha(files["root.img"]), Size: int64(len(files["root.img"]))}
	_, err := cat.RegisterTemplate(ctx, Template, img, true)
	return err
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
