package catalog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/template"
)

// heartbeatEvery is how often a build records its progress (and extends
// its command's lease).
const heartbeatEvery = 2 * time.Second

var phases = map[string]operatorv1.TemplateBuildPhase{
	template.PhaseFetching:  operatorv1.TemplateBuildPhase_TEMPLATE_BUILD_PHASE_FETCHING,
	template.PhaseUnpacking: operatorv1.TemplateBuildPhase_TEMPLATE_BUILD_PHASE_UNPACKING,
	template.PhaseWriting:   operatorv1.TemplateBuildPhase_TEMPLATE_BUILD_PHASE_WRITING_IMAGE,
}

// runBuild is the worker of CreateTemplateRevision: it builds the image,
// keeps it under its digest and makes the revision READY (or FAILED). A
// revision deleted meanwhile is left as it is.
func (c *Catalog) runBuild(ctx context.Context, wk *command.Work) error {
	res := &operatorv1.CreateTemplateRevisionResponse{}
	if err := wk.Command().GetResult().UnmarshalTo(res); err != nil {
		return err
	}
	ref := res.GetRevision().GetRef()
	var r *operatorv1.TemplateRevision
	if err := c.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		r, err = tx.GetTemplateRevision(ref.GetTemplate(), ref.GetRevision(), false)
		return err
	}); err != nil {
		return err
	}
	if r.GetState() != stateBuilding {
		return wk.Succeed(ctx, func(*store.Tx) error { return nil })
	}
	req, err := wk.Request()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp(c.builds, "build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	create := req.(*operatorv1.CreateTemplateRevisionRequest)
	var built *template.Built
	var buildErr error
	if ran, err := wk.Heavy(ctx, "template builds", func() error {
		built, buildErr = c.build(ctx, wk, r, create, work)
		return nil
	}); !ran || err != nil {
		return err
	}
	if errors.Is(buildErr, errCancelled) {
		return wk.Succeed(ctx, func(*store.Tx) error { return nil })
	}
	if ctx.Err() != nil || errors.Is(buildErr, command.ErrLeaseLost) {
		return buildErr
	}
	if buildErr != nil {
		c.log.WarnContext(ctx, "template build failed", "template", ref.GetTemplate(), "revision", ref.GetRevision(), "err", buildErr)
		return wk.Fail(ctx, &ctrlv1.WorkspaceFailure{
			Stage: ctrlv1.FailureStage_FAILURE_STAGE_CREATING, Reason: ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST, Message: buildErr.Error(),
		}, func(tx *store.Tx) error { return c.finish(tx, r, nil, buildErr, false) })
	}
	if err := os.Rename(built.Path, filepath.Join(c.dir, strings.TrimPrefix(built.Digest, "sha256:"))); err != nil {
		return err
	}
	return wk.Succeed(ctx, func(tx *store.Tx) error { return c.finish(tx, r, built, nil, create.GetSetDefault()) })
}

// errCancelled ends a build whose revision was deleted.
var errCancelled = errors.New("the revision was deleted")

// build runs template.Build, recording its progress.
func (c *Catalog) build(ctx context.Context, wk *command.Work, r *operatorv1.TemplateRevision, req *operatorv1.CreateTemplateRevisionRequest, work string) (*template.Built, error) {
	src, err := c.sourceOf(r.GetSource(), r.GetArchitecture())
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	progress := &operatorv1.TemplateBuildProgress{Phase: operatorv1.TemplateBuildPhase_TEMPLATE_BUILD_PHASE_FETCHING, StartedAt: r.GetBuild().GetStartedAt()}
	buildCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	beat := make(chan error, 1)
	go func() { beat <- c.heartbeat(buildCtx, wk, r, progress, &mu, done, cancel) }()
	built, err := template.Build(buildCtx, src, work, filepath.Join(work, "root.img"), int64(req.GetImageSizeBytes()), func(phase string, d, total int64) {
		mu.Lock()
		defer mu.Unlock()
		if p := phases[phase]; p != progress.Phase || uint64(d) != progress.DoneBytes {
			progress.Phase, progress.DoneBytes, progress.TotalBytes = p, uint64(d), uint64(total)
			progress.UpdatedAt = timestamppb.New(c.now())
		}
	})
	close(done)
	if herr := <-beat; herr != nil {
		return nil, herr
	}
	return built, err
}

// heartbeat writes the build's progress into its revision every few
// seconds until done, and cancels the build when the revision was deleted
// or another worker took the command over.
func (c *Catalog) heartbeat(ctx context.Context, wk *command.Work, r *operatorv1.TemplateRevision, p *operatorv1.TemplateBuildProgress, mu *sync.Mutex, done chan struct{}, cancel context.CancelCauseFunc) error {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		mu.Lock()
		snapshot := &operatorv1.TemplateBuildProgress{Phase: p.Phase, DoneBytes: p.DoneBytes, TotalBytes: p.TotalBytes, StartedAt: p.StartedAt, UpdatedAt: p.UpdatedAt}
		mu.Unlock()
		err := wk.Heartbeat(ctx, "building: "+strings.TrimPrefix(snapshot.GetPhase().String(), "TEMPLATE_BUILD_PHASE_"), func(tx *store.Tx) error {
			now, err := tx.GetTemplateRevision(r.GetRef().GetTemplate(), r.GetRef().GetRevision(), true)
			if err != nil {
				return err
			}
			if now.GetState() != stateBuilding {
				return errCancelled
			}
			now.Build = snapshot
			return tx.UpdateTemplateRevision(now)
		})
		if err != nil {
			cancel(err)
			return err
		}
	}
}

// sourceOf is where a revision's source is on this ctrl.
func (c *Catalog) sourceOf(s *operatorv1.TemplateSource, arch string) (template.Source, error) {
	switch {
	case s.GetTar() != nil:
		return template.Source{Tar: c.fileOf(store.UploadTemplateSource, s.GetTar().GetUploadDigest()), Architecture: arch}, nil
	case s.GetOciArchive() != nil:
		a := s.GetOciArchive()
		return template.Source{OCIArchive: c.fileOf(store.UploadTemplateSource, a.GetUploadDigest()), Platform: a.GetPlatform(), ImageName: a.GetImageName()}, nil
	case s.GetOciImage() != nil:
		return template.Source{Reference: s.GetOciImage().GetReference(), Platform: s.GetOciImage().GetPlatform()}, nil
	}
	return template.Source{}, fmt.Errorf("the revision has no source")
}

// finish records the end of a build: READY with the image (the Template's
// default when it has none or setDefault), or FAILED.
func (c *Catalog) finish(tx *store.Tx, r *operatorv1.TemplateRevision, built *template.Built, buildErr error, setDefault bool) error {
	tm, err := tx.GetTemplate(r.GetRef().GetTemplate(), true)
	if err != nil {
		return err
	}
	now, err := tx.GetTemplateRevision(r.GetRef().GetTemplate(), r.GetRef().GetRevision(), true)
	if err != nil || now.GetState() != stateBuilding {
		return err // deleted meanwhile: leave it
	}
	ts := timestamppb.New(c.now())
	if now.Build == nil {
		now.Build = &operatorv1.TemplateBuildProgress{StartedAt: ts}
	}
	now.Build.Phase, now.Build.UpdatedAt = operatorv1.TemplateBuildPhase_TEMPLATE_BUILD_PHASE_DONE, ts
	if buildErr != nil {
		now.State, now.Failure = stateFailed, buildErr.Error()
		return tx.UpdateTemplateRevision(now)
	}
	now.State, now.ReadyAt = stateReady, ts
	now.ImageDigest, now.ImageSizeBytes = built.Digest, uint64(built.Size)
	now.Architecture = built.Architecture
	if built.Config != nil {
		cfg := built.Config
		now.Config = &operatorv1.TemplateImageConfig{Env: cfg.Env, WorkingDir: cfg.WorkingDir, User: cfg.User, Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd}
	}
	if img := now.GetSource().GetOciImage(); img != nil {
		img.ResolvedDigest = built.ResolvedDigest
	}
	if err := tx.UpdateTemplateRevision(now); err != nil {
		return err
	}
	if tm.GetDefaultRevision() == "" || setDefault {
		c.moveTemplateDefault(tm, now.GetRef().GetRevision())
		return tx.PutTemplate(tm)
	}
	return nil
}
