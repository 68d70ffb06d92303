// Package template builds Template root filesystems: read-only ext4 images
// made from a directory or a tar archive, without mounting anything (and so
// without root), with `mkfs.ext4 -d`.
package template

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
	used, err := diskUsage(dir)
	if err != nil {
		return nil, err
	}
	// ext4 metadata and a margin: 30% more, at least 16 MiB more.
	size := max(used*13/10, used+16<<20)
	size = (size + 1<<20 - 1) &^ (1<<20 - 1)
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
		return nil, fmt.Errorf("mkfs.ext4 -d %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
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

// FromTar builds an image from a tar archive (optionally gzip-compressed).
func FromTar(ctx context.Context, archive, out string) (*Image, error) {
	dir, err := os.MkdirTemp("", "kibotos-template")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := extractTar(archive, dir); err != nil {
		return nil, err
	}
	return FromDir(ctx, dir, out)
}

// extractTar unpacks archive into dir, refusing any entry that would land
// outside it.
func extractTar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = f
	if gz, err := gzip.NewReader(f); err == nil {
		r = gz
	} else if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", archive, err)
		}
		if err := extractEntry(tr, h, dir); err != nil {
			return err
		}
	}
}

func extractEntry(tr *tar.Reader, h *tar.Header, dir string) error {
	name := filepath.Clean("/" + h.Name)
	target := filepath.Join(dir, name)
	if !strings.HasPrefix(target, filepath.Clean(dir)+string(os.PathSeparator)) && target != filepath.Clean(dir) {
		return fmt.Errorf("tar entry %q leaves the archive's root", h.Name)
	}
	mode := os.FileMode(h.Mode).Perm()
	switch h.Typeflag {
	case tar.TypeDir:
		return os.MkdirAll(target, mode|0o700)
	case tar.TypeReg:
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	case tar.TypeSymlink:
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		_ = os.Remove(target)
		return os.Symlink(h.Linkname, target)
	case tar.TypeLink:
		src := filepath.Join(dir, filepath.Clean("/"+h.Linkname))
		_ = os.Remove(target)
		return os.Link(src, target)
	}
	return nil // devices, fifos: a root filesystem gets them from devtmpfs
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
