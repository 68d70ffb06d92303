package template

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// decompress detects gzip and zstd by their magic bytes; anything else is
// read as it is.
func decompress(r io.Reader) (io.Reader, func(), error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		gz, err := gzip.NewReader(br)
		return gz, func() {}, err
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, nil, err
		}
		return zr, zr.Close, nil
	}
	return br, func() {}, nil
}

// unpackFile unpacks a (possibly compressed) tar file into dir.
func unpackFile(archive, dir string, progress func(done int64)) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	r, done, err := decompress(&countingReader{r: f, report: progress})
	if err != nil {
		return fmt.Errorf("%s: %w", archive, err)
	}
	defer done()
	if err := unpack(r, dir); err != nil {
		return fmt.Errorf("%s: %w", archive, err)
	}
	return nil
}

// countingReader reports the bytes read so far.
type countingReader struct {
	r      io.Reader
	n      int64
	report func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.report != nil && n > 0 {
		c.report(c.n)
	}
	return n, err
}

// unpack extracts a tar stream into dir. Every entry lands inside dir: a
// name is cleaned against "/", and an entry whose parent inside dir is a
// symbolic link is refused rather than followed. Owners are kept when this
// runs as root; directory modes are set last, so a read-only directory can
// still be filled.
func unpack(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	dirModes := map[string]os.FileMode{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if err := extractEntry(tr, h, dir, dirModes); err != nil {
			return err
		}
	}
	for path, mode := range dirModes {
		if err := os.Chmod(path, mode); err != nil {
			return err
		}
	}
	return nil
}

func fileMode(h *tar.Header) os.FileMode {
	m := h.FileInfo().Mode()
	return m & (os.ModePerm | os.ModeSetuid | os.ModeSetgid | os.ModeSticky)
}

func extractEntry(tr *tar.Reader, h *tar.Header, dir string, dirModes map[string]os.FileMode) error {
	root := filepath.Clean(dir)
	target := filepath.Join(root, filepath.Clean("/"+h.Name))
	if target == root {
		if h.Typeflag == tar.TypeDir {
			dirModes[target] = fileMode(h)
		}
		return nil
	}
	if err := checkParents(root, target, h.Name); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
			_ = os.Remove(target)
		}
		if err := os.MkdirAll(target, 0o700); err != nil {
			return err
		}
		dirModes[target] = fileMode(h)
	case tar.TypeReg:
		replace(target, dirModes, false)
		f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(target, fileMode(h))
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		replace(target, dirModes, true)
		if err := os.Symlink(h.Linkname, target); err != nil {
			return err
		}
	case tar.TypeLink:
		src := filepath.Join(root, filepath.Clean("/"+h.Linkname))
		if err := checkParents(root, src, h.Linkname); err != nil {
			return err
		}
		replace(target, dirModes, true)
		if err := os.Link(src, target); err != nil {
			return err
		}
		return nil
	default:
		return nil // devices, fifos: a root filesystem gets them from devtmpfs
	}
	if os.Geteuid() == 0 {
		return os.Lchown(target, h.Uid, h.Gid)
	}
	return nil
}

// replace removes what target holds for a new entry (a directory only when
// all is set, or when it is empty). The modes deferred for the directory it
// was and those below it are dropped: the directories are gone, and a
// chmod of their paths at the end would follow a link that took their
// place, outside the root.
func replace(target string, dirModes map[string]os.FileMode, all bool) {
	if fi, err := os.Lstat(target); err == nil && fi.IsDir() {
		for p := range dirModes {
			if p == target || strings.HasPrefix(p, target+"/") {
				delete(dirModes, p)
			}
		}
	}
	if all {
		_ = os.RemoveAll(target)
	} else {
		_ = os.Remove(target)
	}
}

// checkParents refuses a path whose parent directories inside root include
// a symbolic link, which could lead a write outside root.
func checkParents(root, target, name string) error {
	rel, err := filepath.Rel(root, filepath.Dir(target))
	if err != nil || rel == "." {
		return err
	}
	p := root
	for _, part := range strings.Split(rel, string(os.PathSeparator)) {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("tar entry %q goes through the symbolic link /%s", name, strings.TrimPrefix(p, root+"/"))
		}
	}
	return nil
}
