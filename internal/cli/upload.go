package cli

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"

	"connectrpc.com/connect"

	"github.com/kibotos/kibotos/internal/ctrl/catalog"
	"github.com/kibotos/kibotos/internal/platform"
)

// uploadHTTP carries uploads over HTTP/2 (cleartext for http://): ctrl
// answers an upload of content it holds at once, and over HTTP/1.1 that
// early answer races the rest of the request body on one connection.
var uploadHTTP = &http.Client{Transport: func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP2(true)
	t.Protocols.SetUnencryptedHTTP2(true)
	return t
}()}

// onOperatorForUploads is onOperator with uploadHTTP.
func onOperatorForUploads[C any](newClient func(connect.HTTPClient, string, ...connect.ClientOption) C) (C, error) {
	var zero C
	c, err := loadClients()
	if err != nil {
		return zero, err
	}
	_, url, opt, err := c.operator()
	if err != nil {
		return zero, err
	}
	return newClient(uploadHTTP, url, opt), nil
}

// fileDigest is the sha256 digest and size of a file.
func fileDigest(path string) (string, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), uint64(n), err
}

// sendFile streams a file in chunks after its header, reporting progress.
// send reports an error once ctrl answered (content it holds already);
// the caller's CloseAndReceive then says how.
func sendFile(path string, size uint64, progress platform.Progress, sendChunk func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, catalog.MaxChunk)
	var done int64
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if sendChunk(buf[:n]) != nil {
				return nil
			}
			done += int64(n)
			progress("upload", done, int64(size))
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// tarDir writes a tar of dir's content (paths relative to dir) to out.
func tarDir(ctx context.Context, dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
