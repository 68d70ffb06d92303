package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
)

// MaxChunk is the largest chunk an upload message may carry.
const MaxChunk = 4 << 20

// uploadRetention is how long an upload nothing references is kept.
const uploadRetention = 24 * time.Hour

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Chunks returns the next chunk of an upload, io.EOF after the last.
type Chunks func() ([]byte, error)

// ArtifactPath is the file of an artifact nodes fetch, or an error when
// ctrl has none with that digest.
func (c *Catalog) ArtifactPath(digest string) (string, error) {
	if !digestPattern.MatchString(digest) {
		return "", fmt.Errorf("%q is not a sha256 digest", digest)
	}
	path := filepath.Join(c.dir, strings.TrimPrefix(digest, "sha256:"))
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no artifact %s: %w", digest, err)
	}
	return path, nil
}

// uploadHeader is what both upload headers say.
type uploadHeader interface {
	proto.Message
	GetCommand() *ctrlv1.CommandMetadata
	GetDigest() string
	GetSizeBytes() uint64
}

// fileOf is where an upload of kind with digest is kept.
func (c *Catalog) fileOf(kind, digest string) string {
	dir := c.dir
	if kind == store.UploadTemplateSource {
		dir = c.sources
	}
	return filepath.Join(dir, strings.TrimPrefix(digest, "sha256:"))
}

// errNeedContent makes an admission that found no content read the stream
// first and admit again.
var errNeedContent = errors.New("upload content not held yet")

// UploadPlatformArtifact receives a kernel or initramfs.
func (c *Catalog) UploadPlatformArtifact(ctx context.Context, h *operatorv1.PlatformArtifactUploadHeader, chunks Chunks) (*operatorv1.UploadPlatformArtifactResponse, error) {
	size, err := c.upload(ctx, store.UploadPlatformArtifact, "UploadPlatformArtifact", h, chunks)
	if err != nil {
		return nil, err
	}
	return &operatorv1.UploadPlatformArtifactResponse{Artifact: &operatorv1.PlatformArtifact{Digest: h.GetDigest(), SizeBytes: size}}, nil
}

// UploadTemplateSource receives a root filesystem tar or an OCI image
// archive.
func (c *Catalog) UploadTemplateSource(ctx context.Context, h *operatorv1.TemplateSourceUploadHeader, chunks Chunks) (*operatorv1.UploadTemplateSourceResponse, error) {
	size, err := c.upload(ctx, store.UploadTemplateSource, "UploadTemplateSource", h, chunks)
	if err != nil {
		return nil, err
	}
	return &operatorv1.UploadTemplateSourceResponse{Digest: h.GetDigest(), SizeBytes: size}, nil
}

// upload admits an upload command. Content ctrl holds already (or a
// replay) answers without reading the stream; otherwise the stream is read
// into a temporary file, checked against the header and kept under its
// digest before the command is admitted. Content that does not match keeps
// nothing.
func (c *Catalog) upload(ctx context.Context, kind, commandKind string, h uploadHeader, chunks Chunks) (uint64, error) {
	if h == nil || !h.ProtoReflect().IsValid() {
		return 0, apierr.Invalid("header", "is required in the first message of the stream")
	}
	if err := command.ValidateID("header.command.command_id", h.GetCommand()); err != nil {
		return 0, err
	}
	if !digestPattern.MatchString(h.GetDigest()) {
		return 0, apierr.Invalid("header.digest", "must be \"sha256:\" and 64 lowercase hex digits")
	}
	size, err := c.admitUpload(ctx, kind, commandKind, h, false)
	if !errors.Is(err, errNeedContent) {
		return size, err
	}
	if err := c.receive(kind, h, chunks); err != nil {
		return 0, err
	}
	return c.admitUpload(ctx, kind, commandKind, h, true)
}

func (c *Catalog) admitUpload(ctx context.Context, kind, commandKind string, h uploadHeader, received bool) (uint64, error) {
	err := command.Do(ctx, c.store, func(tx *store.Tx) error {
		_, err := command.Admit(tx, c.now(), h.GetCommand().GetCommandId(), commandKind, h, func() (command.Effect, error) {
			eff := command.Effect{Target: h.GetDigest(), Result: h}
			held, err := tx.UploadSize(kind, h.GetDigest())
			if err == nil {
				if held != h.GetSizeBytes() {
					return eff, apierr.Invalid("header.size_bytes", "is %d, but the content of digest %s is %d bytes", h.GetSizeBytes(), h.GetDigest(), held)
				}
				if _, serr := os.Stat(c.fileOf(kind, h.GetDigest())); serr == nil {
					return eff, nil
				}
			} else if !errors.Is(err, store.ErrNotFound) {
				return eff, err
			}
			if !received {
				return eff, errNeedContent
			}
			_, err = tx.PutUpload(kind, h.GetDigest(), h.GetSizeBytes(), c.now())
			return eff, err
		})
		return err
	})
	if err != nil {
		return 0, err
	}
	return h.GetSizeBytes(), nil
}

// receive reads the stream into the file of the upload's digest, or keeps
// nothing.
func (c *Catalog) receive(kind string, h uploadHeader, chunks Chunks) error {
	final := c.fileOf(kind, h.GetDigest())
	tmp, err := os.CreateTemp(filepath.Dir(final), ".incoming-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	sum := sha256.New()
	var n uint64
	for {
		chunk, err := chunks()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if len(chunk) > MaxChunk {
			return apierr.Invalid("chunk", "is %d bytes; a chunk is at most %d", len(chunk), MaxChunk)
		}
		if n += uint64(len(chunk)); n > h.GetSizeBytes() {
			return apierr.Invalid("header.size_bytes", "is %d, but the stream carries more", h.GetSizeBytes())
		}
		sum.Write(chunk)
		if _, err := tmp.Write(chunk); err != nil {
			return err
		}
	}
	if n != h.GetSizeBytes() {
		return apierr.Invalid("header.size_bytes", "is %d, but the stream carried %d bytes", h.GetSizeBytes(), n)
	}
	if got := "sha256:" + hex.EncodeToString(sum.Sum(nil)); got != h.GetDigest() {
		return apierr.Invalid("header.digest", "is %s, but the content hashes to %s; nothing was kept", h.GetDigest(), got)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), final)
}

// addFile copies a local file into the files of kind under its digest and
// records it as an upload, as an upload of it would.
func (c *Catalog) addFile(ctx context.Context, kind, path string) (string, uint64, error) {
	digest, n, err := c.copyIn(kind, path)
	if err != nil {
		return "", 0, err
	}
	return digest, n, c.store.Tx(ctx, func(tx *store.Tx) error {
		_, err := tx.PutUpload(kind, digest, n, c.now())
		return err
	})
}

// copyIn copies a local file into the files of kind under its digest.
func (c *Catalog) copyIn(kind, path string) (string, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	sum := sha256.New()
	n, err := io.Copy(sum, f)
	if err != nil {
		return "", 0, err
	}
	digest := "sha256:" + hex.EncodeToString(sum.Sum(nil))
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", 0, err
	}
	buf := make([]byte, 1<<20)
	h := &operatorv1.PlatformArtifactUploadHeader{Digest: digest, SizeBytes: uint64(n)}
	if err := c.receive(kind, h, func() ([]byte, error) {
		k, err := f.Read(buf)
		if k > 0 {
			return buf[:k], nil
		}
		return nil, err
	}); err != nil {
		return "", 0, err
	}
	return digest, uint64(n), nil
}

// Sweep removes the uploads nothing references that completed more than 24
// hours before now, with their files.
func (c *Catalog) Sweep(ctx context.Context, now time.Time) error {
	for _, kind := range []string{store.UploadPlatformArtifact, store.UploadTemplateSource} {
		var digests []string
		err := c.store.Tx(ctx, func(tx *store.Tx) error {
			var err error
			if digests, err = tx.UnreferencedUploads(kind, now.Add(-uploadRetention)); err != nil {
				return err
			}
			for _, d := range digests {
				if err := tx.DeleteUpload(kind, d); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, d := range digests {
			if err := os.Remove(c.fileOf(kind, d)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			c.log.Info("removed an upload nothing references", "sweep", "uploads", "kind", kind, "digest", d)
		}
	}
	return nil
}
