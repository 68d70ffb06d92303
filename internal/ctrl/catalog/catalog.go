// Package catalog is the Platform and Template catalog: PlatformKeys and
// their immutable Launch revisions (what boots), Templates and their
// immutable revisions (read-only ext4 root images ctrl builds from an
// uploaded tar, an uploaded OCI image archive or a registry image), and the
// content-addressed files behind them, which nodes fetch by digest.
//
// Files live in one ctrl's state directory; ctrl replicas sharing a
// PostgreSQL database must share that directory too (--state-dir on shared
// storage) until artifacts move into object storage.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
)

// Catalog is the platforms and templates of one deployment.
type Catalog struct {
	store *store.Store
	// dir holds what nodes fetch (kernels, initramfs, root images), named
	// by their hex sha256; sources the template source uploads; builds the
	// work directories of running builds.
	dir, sources, builds string
	runner               *command.Runner
	log                  *slog.Logger
	now                  func() time.Time
	// liveness judges the nodes' records GetTemplateDelivery reads.
	liveness Liveness
}

// New keeps files under dir, and registers the Template build command with
// r. It adopts what an earlier ctrl registered before the catalog RPCs.
func New(s *store.Store, dir string, r *command.Runner, liveness Liveness, log *slog.Logger) (*Catalog, error) {
	c := &Catalog{
		store: s, dir: dir, sources: filepath.Join(dir, "sources"), builds: filepath.Join(dir, "builds"),
		runner: r, liveness: liveness, log: log, now: time.Now,
	}
	for _, d := range []string{c.dir, c.sources, c.builds} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	r.Handle(kindCreateRevision, c.runBuild)
	if err := c.adoptLegacy(context.Background()); err != nil {
		return nil, fmt.Errorf("catalog: adopt the catalog of an earlier version: %w", err)
	}
	return c, nil
}

// HasDefaults reports whether a default platform and template exist: a
// deployment default PlatformKey with a Launch and a deployment default
// Template with a READY revision.
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

// Run removes, every hour until ctx ends, the uploads nothing references
// 24 hours after they completed.
func (c *Catalog) Run(ctx context.Context) {
	t := time.NewTicker(time.Hour)
	defer t.Stop()
	for {
		if err := c.Sweep(ctx, c.now()); err != nil && ctx.Err() == nil {
			c.log.Warn("sweep failed", "sweep", "uploads", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
