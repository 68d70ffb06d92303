package platform

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// A .deb is an ar archive holding debian-binary, control.tar.* and
// data.tar.*. Reading it in Go (rather than dpkg-deb -x) lets us report
// progress and extract only what a platform needs.

// arMember is one member of an ar archive.
type arMember struct {
	name string
	off  int64 // of the content in the archive
	size int64
}

// findDataMember returns the data.tar.* member of a .deb.
func findDataMember(f io.ReaderAt) (arMember, error) {
	magic := make([]byte, 8)
	if _, err := f.ReadAt(magic, 0); err != nil || string(magic) != "!<arch>\n" {
		return arMember{}, errors.New("not a .deb (ar) archive")
	}
	hdr := make([]byte, 60)
	for off := int64(8); ; {
		if _, err := f.ReadAt(hdr, off); err != nil {
			return arMember{}, errors.New("no data.tar member in the .deb")
		}
		name := strings.TrimSuffix(strings.TrimSpace(string(hdr[:16])), "/")
		size, err := strconv.ParseInt(strings.TrimSpace(string(hdr[48:58])), 10, 64)
		if err != nil || string(hdr[58:60]) != "`\n" {
			return arMember{}, fmt.Errorf("corrupt ar header at offset %d", off)
		}
		if strings.HasPrefix(name, "data.tar") {
			return arMember{name: name, off: off + 60, size: size}, nil
		}
		off += 60 + size + size%2 // members are 2-byte aligned
	}
}

// wantedPath reports whether a path of the package's file system is needed
// to build a platform: the compressed kernel and the module tree.
func wantedPath(name string) bool {
	return strings.HasPrefix(name, "boot/vmlinuz-") || strings.HasPrefix(name, "lib/modules/")
}

// extractDeb unpacks the kernel and modules of a kernel .deb into dir.
func extractDeb(ctx context.Context, deb, dir string, progress Progress) error {
	f, err := os.Open(deb)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := findDataMember(f)
	if err != nil {
		return fmt.Errorf("%s: %w", deb, err)
	}
	src := &countingReader{r: io.NewSectionReader(f, m.off, m.size), total: m.size,
		report: func(done, total int64) { progress.report("extract", done, total) }}
	if err := extractTar(ctx, m.name, bufio.NewReaderSize(src, 1<<20), dir); err != nil {
		return fmt.Errorf("%s: %w", deb, err)
	}
	progress.report("extract", m.size, m.size)
	return nil
}

// extractTar unpacks the wanted files of a compressed tar stream.
func extractTar(ctx context.Context, name string, r io.Reader, dir string) error {
	tr, wait, err := decompress(ctx, name, r)
	if err != nil {
		return err
	}
	err = untar(ctx, tr, dir)
	if err == nil {
		// Drain the tar's end padding so that the decompressor can finish.
		_, err = io.Copy(io.Discard, tr)
	}
	tr.Close() // a decompressor we gave up reading gets EPIPE and exits
	if werr := wait(); werr != nil {
		return errors.Join(err, fmt.Errorf("decompress %s: %w", name, werr))
	}
	return err
}

// decompress returns the tar stream inside a data.tar.* member; wait reports
// the decompressor's failure once the stream has been read.
func decompress(ctx context.Context, name string, r io.Reader) (io.ReadCloser, func() error, error) {
	noWait := func() error { return nil }
	switch name {
	case "data.tar":
		return io.NopCloser(r), noWait, nil
	case "data.tar.gz":
		zr, err := gzip.NewReader(r)
		return zr, noWait, err
	case "data.tar.xz":
		return startFilter(ctx, r, "xz", "-dc", "-T0")
	case "data.tar.zst":
		return startFilter(ctx, r, "zstd", "-dc")
	}
	return nil, nil, fmt.Errorf("unsupported compression of %s", name)
}

// startFilter runs a command from r to the returned reader.
func startFilter(ctx context.Context, r io.Reader, name string, args ...string) (io.ReadCloser, func() error, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = r
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	wait := func() error {
		if err := cmd.Wait(); err != nil {
			return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
		}
		return nil
	}
	return out, wait, nil
}

// untar writes the wanted regular files and directories of a tar stream
// under dir. Links and devices are skipped: a kernel package's boot/ and
// lib/modules/ hold neither, and skipping them means no entry can point
// outside dir.
func untar(ctx context.Context, r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read data tar: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if !wantedPath(name) || !filepath.IsLocal(name) {
			continue
		}
		if err := writeTarEntry(h, tr, filepath.Join(dir, filepath.FromSlash(name))); err != nil {
			return err
		}
	}
}

func writeTarEntry(h *tar.Header, r io.Reader, dst string) error {
	switch h.Typeflag {
	case tar.TypeDir:
		return os.MkdirAll(dst, 0o755)
	case tar.TypeReg:
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	return nil
}

// countingReader reports how much of a known total has been read.
type countingReader struct {
	r      io.Reader
	done   int64
	total  int64
	next   int64 // report again once done reaches next, not on every read
	report func(done, total int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.done += int64(n)
	if c.done >= c.next {
		c.report(c.done, c.total)
		c.next = c.done + c.total/100 + 1
	}
	return n, err
}
