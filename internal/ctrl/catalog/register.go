package catalog

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/template"
)

// RegisterPlatform adds a platform built in this process as a Launch of key
// (made when missing) and makes it the key's default, and the key the
// deployment's default when deploymentDefault. It is the in-process
// shortcut of UploadPlatformArtifact and CreateLaunch, for benchmarks.
func (c *Catalog) RegisterPlatform(ctx context.Context, key string, m *platform.Manifest, dir string, deploymentDefault bool) (*operatorv1.Launch, error) {
	spec := &operatorv1.LaunchSpec{Vmm: operatorv1.VmmKind_VMM_KIND_QEMU, Architecture: runtime.GOARCH}
	for _, a := range []struct {
		file string
		into **operatorv1.PlatformArtifact
	}{{m.Vmlinux, &spec.Kernel}, {m.Initramfs, &spec.Initramfs}} {
		digest, size, err := c.addFile(ctx, store.UploadPlatformArtifact, filepath.Join(dir, a.file))
		if err != nil {
			return nil, err
		}
		*a.into = &operatorv1.PlatformArtifact{Digest: digest, SizeBytes: size}
	}
	var l *operatorv1.Launch
	err := c.store.Tx(ctx, func(tx *store.Tx) error {
		if _, err := tx.GetPlatformKey(key, true); errors.Is(err, store.ErrNotFound) {
			if _, err := c.createKey(tx, key, ""); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		var err error
		l, err = c.createLaunch(tx, &operatorv1.CreateLaunchRequest{PlatformKey: key, Spec: spec, SetDefault: true, Description: "kernel " + m.KernelVersion})
		if err != nil || !deploymentDefault {
			return err
		}
		return tx.SetDeploymentDefaultPlatformKey(key)
	})
	return l, err
}

// RegisterTemplate adds a root image built in this process as a READY
// revision of template (made when missing) and makes it the template's
// default, and the template the deployment's default when
// deploymentDefault. It is the in-process shortcut of a build, for
// benchmarks.
func (c *Catalog) RegisterTemplate(ctx context.Context, name string, img *template.Image, deploymentDefault bool) (*operatorv1.TemplateRevision, error) {
	if err := c.keepImage(img.Path, img.Digest); err != nil {
		return nil, err
	}
	var r *operatorv1.TemplateRevision
	err := c.store.Tx(ctx, func(tx *store.Tx) error {
		tm, err := tx.GetTemplate(name, true)
		if errors.Is(err, store.ErrNotFound) {
			tm, err = c.createTemplate(tx, name, "")
		}
		if err != nil {
			return err
		}
		rev, err := revisionName(tx, name, "")
		if err != nil {
			return err
		}
		r = c.readyRevision(name, rev, img.Digest, uint64(img.Size))
		if err := c.insertReady(tx, tm, r, true); err != nil || !deploymentDefault {
			return err
		}
		return tx.SetDeploymentDefaultTemplate(name)
	})
	return r, err
}

// AdoptTemplateRevision registers a root image that arrived in a Transfer
// archive as READY revision revision of template name (the template made
// when missing; its default only when it has none), so that a restore can
// boot what the source deployment ran. A revision that exists already with
// the same image is left as it is; with another image it is a conflict:
// revision names are never reused for other content.
func (c *Catalog) AdoptTemplateRevision(ctx context.Context, name, revision string, img *template.Image) error {
	if err := c.keepImage(img.Path, img.Digest); err != nil {
		return err
	}
	return c.store.Tx(ctx, func(tx *store.Tx) error {
		if r, err := tx.GetTemplateRevision(name, revision, false); err == nil {
			if r.GetImageDigest() != img.Digest {
				return conflict("revision", "template revision %s@%s exists here with image %s, not the archive's %s", name, revision, r.GetImageDigest(), img.Digest)
			}
			return nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		tm, err := tx.GetTemplate(name, true)
		if errors.Is(err, store.ErrNotFound) {
			tm, err = c.createTemplate(tx, name, "")
		}
		if err != nil {
			return err
		}
		return c.insertReady(tx, tm, c.readyRevision(name, revision, img.Digest, uint64(img.Size)), false)
	})
}

// keepImage copies a root image into the files nodes fetch.
func (c *Catalog) keepImage(path, digest string) error {
	got, _, err := c.copyIn(store.ArtifactRoot, path)
	if err == nil && got != digest {
		return errors.New("the image changed while it was kept: digest " + got + ", not " + digest)
	}
	return err
}

func (c *Catalog) readyRevision(template, revision, digest string, size uint64) *operatorv1.TemplateRevision {
	now := timestamppb.New(c.now())
	return &operatorv1.TemplateRevision{
		Ref: &ctrlv1.TemplateRef{Template: template, Revision: revision}, State: stateReady,
		ImageDigest: digest, ImageSizeBytes: size, Architecture: runtime.GOARCH, CreatedAt: now, ReadyAt: now,
		Build: &operatorv1.TemplateBuildProgress{Phase: operatorv1.TemplateBuildPhase_TEMPLATE_BUILD_PHASE_DONE, StartedAt: now, UpdatedAt: now},
	}
}

// insertReady records a READY revision of tm, its default when makeDefault
// or when it has none.
func (c *Catalog) insertReady(tx *store.Tx, tm *operatorv1.Template, r *operatorv1.TemplateRevision, makeDefault bool) error {
	tm.RevisionCount++
	if makeDefault || tm.GetDefaultRevision() == "" {
		c.moveTemplateDefault(tm, r.GetRef().GetRevision())
	}
	if err := tx.InsertTemplateRevision(r); err != nil {
		return err
	}
	return tx.PutTemplate(tm)
}

// adoptLegacy moves what an earlier ctrl registered (before the catalog
// RPCs) into the catalog, keeping every launch_ref and revision name, so
// that stored Workspaces still resolve.
func (c *Catalog) adoptLegacy(ctx context.Context) error {
	return c.store.Tx(ctx, func(tx *store.Tx) error {
		lc, err := tx.ReadLegacyCatalog()
		if err != nil || len(lc.Launches)+len(lc.Templates) == 0 {
			return err
		}
		for _, l := range lc.Launches {
			if err := c.adoptLaunch(tx, l, lc.DefaultLaunch[l.GetPlatformKey()] == l.GetLaunchRef()); err != nil {
				return err
			}
		}
		if lc.DeploymentKey != "" {
			if err := tx.SetDeploymentDefaultPlatformKey(lc.DeploymentKey); err != nil {
				return err
			}
		}
		for _, r := range lc.Templates {
			if err := c.adoptRevision(tx, r, lc.DefaultRevision[r.GetTemplate()] == r.GetRevision()); err != nil {
				return err
			}
		}
		if lc.DeploymentTemplate != "" {
			if err := tx.SetDeploymentDefaultTemplate(lc.DeploymentTemplate); err != nil {
				return err
			}
		}
		c.log.Info("adopted the catalog of an earlier version", "launches", len(lc.Launches), "template_revisions", len(lc.Templates))
		return tx.ClearLegacyCatalog()
	})
}

func (c *Catalog) adoptLaunch(tx *store.Tx, old *storev1.Launch, isDefault bool) error {
	k, err := tx.GetPlatformKey(old.GetPlatformKey(), true)
	if errors.Is(err, store.ErrNotFound) {
		k, err = c.createKey(tx, old.GetPlatformKey(), "")
	}
	if err != nil {
		return err
	}
	spec := &operatorv1.LaunchSpec{Vmm: operatorv1.VmmKind_VMM_KIND_QEMU, Architecture: runtime.GOARCH}
	for _, a := range []struct {
		from *nodev1.Artifact
		into **operatorv1.PlatformArtifact
	}{{old.GetKernel(), &spec.Kernel}, {old.GetInitrd(), &spec.Initramfs}} {
		*a.into = &operatorv1.PlatformArtifact{Digest: a.from.GetDigest(), SizeBytes: a.from.GetSizeBytes()}
		if _, err := tx.PutUpload(store.UploadPlatformArtifact, a.from.GetDigest(), a.from.GetSizeBytes(), c.now()); err != nil {
			return err
		}
	}
	k.LaunchCount++
	l := &operatorv1.Launch{
		LaunchRef: old.GetLaunchRef(), PlatformKey: k.GetPlatformKey(), Revision: uint64(k.GetLaunchCount()), Spec: spec,
		Description: strings.TrimSpace("kernel " + old.GetKernelVersion()), CreatedAt: old.GetCreatedAt(),
	}
	if err := tx.InsertLaunch(l); err != nil {
		return err
	}
	if isDefault {
		c.moveDefault(k, l.GetLaunchRef())
	}
	return tx.PutPlatformKey(k)
}

func (c *Catalog) adoptRevision(tx *store.Tx, old *storev1.TemplateRevision, isDefault bool) error {
	tm, err := tx.GetTemplate(old.GetTemplate(), true)
	if errors.Is(err, store.ErrNotFound) {
		tm, err = c.createTemplate(tx, old.GetTemplate(), "")
	}
	if err != nil {
		return err
	}
	r := c.readyRevision(old.GetTemplate(), old.GetRevision(), old.GetRoot().GetDigest(), old.GetRoot().GetSizeBytes())
	r.CreatedAt, r.ReadyAt = old.GetCreatedAt(), old.GetCreatedAt()
	return c.insertReady(tx, tm, r, isDefault)
}
