// Package template builds Template root filesystems: read-only ext4 images
// made from a directory or a tar archive, without mounting anything (and so
// without root), with `mkfs.ext4 -d`.
package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Image is a built root filesystem image.
type Image struct {
	Path   string `json:"path"`
	Digest string `json:"digest"` // "sha256:<hex>" of the image file
	Size   int64  `json:"size"`
}

// FromDir builds an ext4 image of dir at out, sized to its content with
// room to spare. Files keep their modes; every file is owned by root.
func FromDir(ctx context.Context, dir, out string) (*Image, error) {
	return FromDirSize(ctx, dir, out, 0)
}

// FromDirSize is FromDir with the image's size in bytes (a whole number of
// MiB); zero sizes it to the content with room to spare. A size too small
// for the content fails.
func FromDirSize(ctx context.Context, dir, out string, size int64) (*Image, error) {
	if size == 0 {
		used, err := diskUsage(dir)
		if err != nil {
			return nil, err
		}
		// ext4 metadata and a margin: 30% more, at least 16 MiB more.
		size = max(used*13/10, used+16<<20)
		size = (size + 1<<20 - 1) &^ (1<<20 - 1)
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, err
	}
	f.Close()
	cmd := exec.CommandContext(ctx, mkfs(), "-q", "-F", "-b", "4096", "-L", "kibotos-root",
		"-E", "root_owner=0:0,lazy_itable_init=1,lazy_journal_init=1,nodiscard", "-d", dir, tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("mkfs.ext4 -d %s (image of %d MiB): %v: %s", dir, size>>20, err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, out); err != nil {
		return nil, err
	}
	return describe(out)
}

// mkfs finds mkfs.ext4, which is in /sbin on Debian and not always in PATH.
func mkfs() string {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "mkfs.ext4"
}

func diskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		total += max(info.Size(), 4096)
		return nil
	})
	return total, err
}

func describe(path string) (*Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, err
	}
	return &Image{Path: path, Digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

// FromTar builds an image from a tar archive (uncompressed, gzip or zstd).
func FromTar(ctx context.Context, archive, out string) (*Image, error) {
	dir, err := os.MkdirTemp("", "kibotos-template")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := unpackFile(archive, dir, nil); err != nil {
		return nil, err
	}
	return FromDir(ctx, dir, out)
}

// BusyboxDir lays out a minimal root in dir from a static busybox binary:
// the binary, a link for each applet, and the files a shell expects.
func BusyboxDir(busybox, dir string) error {
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "root", "tmp", "run", "proc", "sys", "dev", "home", "var/tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		return err
	}
	data, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755); err != nil {
		return err
	}
	list, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("%s --list-full: %w", busybox, err)
	}
	for _, applet := range strings.Fields(string(list)) {
		link := filepath.Join(dir, applet)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return err
		}
		if err := os.Symlink("/bin/busybox", link); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd":     "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":      "root:x:0:\nnogroup:x:65534:\n",
		"etc/hostname":   "workspace\n",
		"etc/hosts":      "127.0.0.1 localhost workspace\n::1 localhost\n",
		"etc/os-release": "NAME=\"Kibotos busybox\"\nID=kibotos-busybox\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}
