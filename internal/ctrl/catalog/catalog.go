// Package catalog keeps what Workspaces boot from: platform Launch revisions
// (kernel and initramfs) and Template revisions (root images), recorded in
// the store, their files content-addressed in an artifact directory that
// nodes fetch from by digest.
//
// Artifacts live in one ctrl's state directory; ctrl replicas sharing a
// PostgreSQL database must share that directory too (--state-dir on shared
// storage) until artifacts move into object storage.
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
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/template"
)

// Catalog is the platforms and templates of one deployment.
type Catalog struct {
	store *store.Store
	dir   string
}

// New keeps artifacts in dir.
func New(s *store.Store, dir string) (*Catalog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Catalog{store: s, dir: dir}, nil
}

// ArtifactPath is the file of an artifact, or an error when ctrl has none
// with that digest.
func (c *Catalog) ArtifactPath(digest string) (string, error) {
	hexDigest, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexDigest) != 64 || strings.Trim(hexDigest, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%q is not a sha256 digest", digest)
	}
	path := filepath.Join(c.dir, hexDigest)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no artifact %s: %w", digest, err)
	}
	return path, nil
}

// addArtifact copies src into the artifact directory under its digest.
func (c *Catalog) addArtifact(src, name string) (*nodev1.Artifact, error) {
	in, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(c.dir, ".incoming-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), in)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	hexDigest := hex.EncodeToString(h.Sum(nil))
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(c.dir, hexDigest)); err != nil {
		return nil, err
	}
	return &nodev1.Artifact{Digest: "sha256:" + hexDigest, SizeBytes: uint64(n), Name: name}, nil
}

// RegisterPlatform adds a built platform as a Launch revision of key, and
// makes it the key's default (and the key the deployment's default when
// deploymentDefault).
func (c *Catalog) RegisterPlatform(ctx context.Context, key string, m *platform.Manifest, dir string, deploymentDefault bool) (*storev1.Launch, error) {
	kernel, err := c.addArtifact(filepath.Join(dir, m.Vmlinux), "vmlinux")
	if err != nil {
		return nil, err
	}
	initrd, err := c.addArtifact(filepath.Join(dir, m.Initramfs), "initramfs")
	if err != nil {
		return nil, err
	}
	l := &storev1.Launch{
		LaunchRef: "launch-" + strings.TrimPrefix(m.Digest, "sha256:")[:16], PlatformKey: key,
		Kernel: kernel, Initrd: initrd, KernelVersion: m.KernelVersion, CreatedAt: timestamppb.Now(),
	}
	return l, c.store.Tx(ctx, func(tx *store.Tx) error {
		if err := tx.PutLaunch(l); err != nil {
			return err
		}
		return tx.SetDefaultLaunch(key, l.GetLaunchRef(), deploymentDefault)
	})
}

// RegisterTemplate adds a root image as a revision of template, and makes it
// the template's default (and the template the deployment's default when
// deploymentDefault).
func (c *Catalog) RegisterTemplate(ctx context.Context, name string, img *template.Image, deploymentDefault bool) (*storev1.TemplateRevision, error) {
	root, err := c.addArtifact(img.Path, "root.img")
	if err != nil {
		return nil, err
	}
	r := &storev1.TemplateRevision{
		Template: name, Revision: "r-" + strings.TrimPrefix(root.GetDigest(), "sha256:")[:12], Root: root, CreatedAt: timestamppb.Now(),
	}
	return r, c.store.Tx(ctx, func(tx *store.Tx) error {
		if err := tx.PutTemplateRevision(r); err != nil {
			return err
		}
		return tx.SetDefaultTemplateRevision(name, r.GetRevision(), deploymentDefault)
	})
}

// HasDefaults reports whether a default platform and template exist.
func (c *Catalog) HasDefaults(ctx context.Context) (bool, error) {
	ok := true
	err := c.store.Tx(ctx, func(tx *store.Tx) error {
		if _, err := tx.DefaultLaunch(""); errors.Is(err, store.ErrNotFound) {
			ok = false
		} else if err != nil {
			return err
		}
		if _, err := tx.TemplateRevision("", ""); errors.Is(err, store.ErrNotFound) {
			ok = false
		} else if err != nil {
			return err
		}
		return nil
	})
	return ok, err
}
