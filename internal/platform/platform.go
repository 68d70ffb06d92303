// Package platform builds a platform, what a Workspace boots: an
// uncompressed kernel (vmlinux, booted directly through its PVH entry) and
// an initramfs whose /init is the guest agent and which carries the kernel
// modules the guest needs, from Debian's kernel package.
package platform

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// DefaultModules are the kernel modules every platform carries, in addition
// to their dependencies: Debian builds these as modules, and the guest needs
// them for its disks, its channel to the node, its network and its root.
var DefaultModules = []string{"virtio_mmio", "virtio_blk", "virtio_console", "virtio_net", "ext4", "overlay"}

// Progress is called as work advances: step is "download" (bytes),
// "extract" (bytes of the package's data read), "vmlinux" (compressed bytes
// read), "modules" (modules resolved) or "initramfs" (entries written);
// total <= 0 means not known yet. Calls never overlap, but may come from
// different goroutines.
type Progress func(step string, done, total int64)

func (p Progress) report(step string, done, total int64) {
	if p != nil {
		p(step, done, total)
	}
}

// BuildInput is what a platform is built from.
type BuildInput struct {
	KernelDeb   string   // path to a linux-image-*.deb (not the metapackage)
	GuestBinary string   // path to the static kibotos-guest binary; becomes /init in the initramfs
	Modules     []string // module names; nil = DefaultModules
	Progress    Progress // may be nil
}

// Manifest describes a built platform; it is written as platform.json.
type Manifest struct {
	KernelVersion   string   `json:"kernel_version"` // e.g. 6.1.0-48-amd64
	Vmlinux         string   `json:"vmlinux"`        // file name in the output directory
	VmlinuxSHA256   string   `json:"vmlinux_sha256"` // hex
	Initramfs       string   `json:"initramfs"`      // file name in the output directory
	InitramfsSHA256 string   `json:"initramfs_sha256"`
	Modules         []string `json:"modules"` // load order, relative to /lib/modules/<ver>/
	Digest          string   `json:"digest"`  // the platform's identity, see Digest
}

// Output file names.
const (
	VmlinuxFile   = "vmlinux"
	InitramfsFile = "initramfs.cpio.gz"
	ManifestFile  = "platform.json"
)

// Digest is a platform's identity, "sha256:<hex>" of
// "vmlinux sha256:<v>\ninitramfs sha256:<i>\n" where v and i are the hex
// SHA-256 of the two artifacts. Everything else a platform carries (kernel
// version, modules) is inside them.
func Digest(vmlinuxSHA256, initramfsSHA256 string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "vmlinux sha256:%s\ninitramfs sha256:%s\n", vmlinuxSHA256, initramfsSHA256))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Build writes vmlinux, initramfs.cpio.gz and platform.json into outDir.
// The same inputs give the same bytes, hence the same Digest. platform.json
// is written last: once it is there, the artifacts it names are complete.
func Build(ctx context.Context, in BuildInput, outDir string) (*Manifest, error) {
	if in.KernelDeb == "" || in.GuestBinary == "" {
		return nil, errors.New("platform: KernelDeb and GuestBinary are required")
	}
	if st, err := os.Stat(in.GuestBinary); err != nil {
		return nil, fmt.Errorf("platform: guest binary: %w", err)
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("platform: guest binary %s is not a regular file", in.GuestBinary)
	}
	modules := in.Modules
	if modules == nil {
		modules = DefaultModules
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	// Unpack next to the output (same file system, so results are renamed
	// into place); the module tree is ~400 MB, too much for a tmpfs /tmp.
	work, err := os.MkdirTemp(outDir, ".build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	m, err := build(ctx, in, modules, work)
	if err != nil {
		return nil, fmt.Errorf("platform: %w", err)
	}
	return m, publish(work, outDir, m)
}

func build(ctx context.Context, in BuildInput, modules []string, work string) (*Manifest, error) {
	root := filepath.Join(work, "root")
	if err := extractDeb(ctx, in.KernelDeb, root, in.Progress); err != nil {
		return nil, err
	}
	ver, err := kernelVersion(root)
	if err != nil {
		return nil, err
	}
	m := &Manifest{KernelVersion: ver, Vmlinux: VmlinuxFile, Initramfs: InitramfsFile}
	bz := filepath.Join(root, "boot", "vmlinuz-"+ver)
	if err := extractVmlinux(ctx, bz, filepath.Join(work, VmlinuxFile), in.Progress); err != nil {
		return nil, err
	}
	if m.VmlinuxSHA256, err = fileSHA256(filepath.Join(work, VmlinuxFile)); err != nil {
		return nil, err
	}
	modDir := filepath.Join(root, "lib", "modules", ver)
	tree, err := openModuleTree(modDir, ver)
	if err != nil {
		return nil, err
	}
	if m.Modules, err = tree.resolve(modules, in.Progress); err != nil {
		return nil, err
	}
	files, err := initramfsEntries(initramfsInput{version: ver, guest: in.GuestBinary, modDir: modDir, modules: m.Modules})
	if err != nil {
		return nil, err
	}
	if m.InitramfsSHA256, err = writeHashed(filepath.Join(work, InitramfsFile), func(w io.Writer) error {
		return writeInitramfs(w, files, in.Progress)
	}); err != nil {
		return nil, err
	}
	m.Digest = Digest(m.VmlinuxSHA256, m.InitramfsSHA256)
	return m, nil
}

// kernelVersion finds the one kernel in an unpacked linux-image package.
func kernelVersion(root string) (string, error) {
	ents, err := os.ReadDir(filepath.Join(root, "lib", "modules"))
	if err != nil || len(ents) != 1 || !ents[0].IsDir() {
		return "", fmt.Errorf("expected one lib/modules/<version> in the package (a linux-image-<version> package, not the metapackage): %v", err)
	}
	ver := ents[0].Name()
	if _, err := os.Stat(filepath.Join(root, "boot", "vmlinuz-"+ver)); err != nil {
		return "", fmt.Errorf("no boot/vmlinuz-%s in the package", ver)
	}
	return ver, nil
}

// publish moves the artifacts into outDir, the manifest last.
func publish(work, outDir string, m *Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, ManifestFile), append(data, '\n'), 0o644); err != nil {
		return err
	}
	// An old manifest must not describe new artifacts, even briefly.
	if err := os.Remove(filepath.Join(outDir, ManifestFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("platform: %w", err)
	}
	for _, name := range []string{VmlinuxFile, InitramfsFile, ManifestFile} {
		if err := os.Rename(filepath.Join(work, name), filepath.Join(outDir, name)); err != nil {
			return fmt.Errorf("platform: %w", err)
		}
	}
	return nil
}

// writeHashed creates name with what write writes and returns its SHA-256.
func writeHashed(name string, write func(io.Writer) error) (string, error) {
	f, err := os.Create(name)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	err = write(io.MultiWriter(f, h))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return hex.EncodeToString(h.Sum(nil)), err
}

func fileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
