package catalog

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/page"
	"github.com/kibotos/kibotos/internal/store"
)

const kindCreateRevision = "CreateTemplateRevision"

const (
	stateBuilding = operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_BUILDING
	stateReady    = operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY
	stateFailed   = operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_FAILED
	stateDeleted  = operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_DELETED
)

// CreateTemplate creates a Template with no revision; the first one
// created becomes the deployment default.
func (c *Catalog) CreateTemplate(ctx context.Context, req *operatorv1.CreateTemplateRequest) (*operatorv1.CreateTemplateResponse, error) {
	if err := checkCreate(req.GetCommand(), "template", req.GetTemplate(), templatePattern, templateRule, req.GetDescription()); err != nil {
		return nil, err
	}
	return admit(ctx, c, req.GetCommand().GetCommandId(), "CreateTemplate", req, func(tx *store.Tx) (string, *operatorv1.CreateTemplateResponse, error) {
		tm, err := c.createTemplate(tx, req.GetTemplate(), req.GetDescription())
		return tm.GetTemplate(), &operatorv1.CreateTemplateResponse{Template: tm}, err
	})
}

func (c *Catalog) createTemplate(tx *store.Tx, name, description string) (*operatorv1.Template, error) {
	if _, err := tx.GetTemplate(name, true); err == nil {
		// Names are never reused, deleted ones included, so a stored
		// TemplateRef never points at other content.
		return nil, conflict("template", "template %q already exists (or existed: names are never reused)", name)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	first, err := tx.ListTemplates("", 1, true)
	if err != nil {
		return nil, err
	}
	now := timestamppb.New(c.now())
	tm := &operatorv1.Template{Template: name, Description: description, Version: 1, CreatedAt: now, UpdatedAt: now}
	if err := tx.PutTemplate(tm); err != nil {
		return nil, err
	}
	if len(first) == 0 {
		tm.DeploymentDefault = true
		return tm, tx.SetDeploymentDefaultTemplate(name)
	}
	return tm, nil
}

// getTemplate reads a Template; deleted ones only when withDeleted.
func getTemplate(tx *store.Tx, name string, lock, withDeleted bool) (*operatorv1.Template, error) {
	tm, err := tx.GetTemplate(name, lock)
	if err != nil {
		return nil, notFound(err, "template", name)
	}
	if !withDeleted && tm.GetDeletedAt() != nil {
		return nil, apierr.NotFound("template", name)
	}
	return tm, nil
}

// SetDeploymentDefaultTemplate selects the Template an empty selector
// selects.
func (c *Catalog) SetDeploymentDefaultTemplate(ctx context.Context, req *operatorv1.SetDeploymentDefaultTemplateRequest) (*operatorv1.SetDeploymentDefaultTemplateResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	return admit(ctx, c, req.GetCommand().GetCommandId(), "SetDeploymentDefaultTemplate", req, func(tx *store.Tx) (string, *operatorv1.SetDeploymentDefaultTemplateResponse, error) {
		tm, err := getTemplate(tx, req.GetTemplate(), true, false)
		if err != nil {
			return "", nil, err
		}
		if tm.GetDefaultRevision() == "" {
			return "", nil, apierr.Precondition(&ctrlv1.ErrorDetail{Field: "template"}, "template %q has no READY revision yet", tm.GetTemplate())
		}
		tm.DeploymentDefault = true
		return tm.GetTemplate(), &operatorv1.SetDeploymentDefaultTemplateResponse{Template: tm}, tx.SetDeploymentDefaultTemplate(tm.GetTemplate())
	})
}

// GetTemplate reads one Template; a deleted one answers with deleted_at.
func (c *Catalog) GetTemplate(ctx context.Context, req *operatorv1.GetTemplateRequest) (*operatorv1.GetTemplateResponse, error) {
	var tm *operatorv1.Template
	err := c.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		tm, err = getTemplate(tx, req.GetTemplate(), false, true)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &operatorv1.GetTemplateResponse{Template: tm}, nil
}

// ListTemplates pages Templates by name.
func (c *Catalog) ListTemplates(ctx context.Context, req *operatorv1.ListTemplatesRequest) (*operatorv1.ListTemplatesResponse, error) {
	filter := fmt.Sprintf("templates|deleted=%t", req.GetIncludeDeleted())
	after, err := page.After(req.GetPageToken(), filter)
	if err != nil {
		return nil, err
	}
	res := &operatorv1.ListTemplatesResponse{}
	err = c.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		res.Templates, res.NextPageToken, err = page.Collect(page.Size(req.GetPageSize()), after, filter,
			(*operatorv1.Template).GetTemplate, func(*operatorv1.Template) bool { return true },
			func(after string, n int) ([]*operatorv1.Template, error) {
				return tx.ListTemplates(after, n, req.GetIncludeDeleted())
			})
		return err
	})
	return res, err
}

// CreateTemplateRevision admits a build: the revision is BUILDING until a
// worker has built it.
func (c *Catalog) CreateTemplateRevision(ctx context.Context, req *operatorv1.CreateTemplateRevisionRequest) (*operatorv1.CreateTemplateRevisionResponse, error) {
	if err := checkCreateRevision(req); err != nil {
		return nil, err
	}
	res, err := admit(ctx, c, req.GetCommand().GetCommandId(), kindCreateRevision, req, func(tx *store.Tx) (string, *operatorv1.CreateTemplateRevisionResponse, error) {
		r, err := c.newRevision(tx, req)
		return r.GetRef().GetTemplate() + "/" + r.GetRef().GetRevision(), &operatorv1.CreateTemplateRevisionResponse{Revision: r}, err
	})
	if err != nil {
		return nil, err
	}
	c.runner.Kick()
	// A replay answers the revision as it stands now.
	ref := res.GetRevision().GetRef()
	var now *operatorv1.TemplateRevision
	err = c.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		now, err = revisionWithDefault(tx, ref.GetTemplate(), ref.GetRevision())
		return err
	})
	if err != nil {
		return nil, err
	}
	return &operatorv1.CreateTemplateRevisionResponse{Revision: now}, nil
}

func checkCreateRevision(req *operatorv1.CreateTemplateRevisionRequest) error {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return err
	}
	if err := checkName("template", req.GetTemplate(), templatePattern, templateRule); err != nil {
		return err
	}
	if r := req.GetRevision(); r != "" {
		if err := checkName("revision", r, revisionPattern, revisionRule); err != nil {
			return err
		}
	}
	if err := checkSource(req.GetSource()); err != nil {
		return err
	}
	if req.GetImageSizeBytes()%(1<<20) != 0 {
		return apierr.Invalid("image_size_bytes", "must be a whole number of MiB (a multiple of 1048576)")
	}
	return checkDescription("description", req.GetDescription())
}

func checkSource(s *operatorv1.TemplateSource) error {
	switch src := s.GetSource().(type) {
	case *operatorv1.TemplateSource_OciImage:
		if _, err := name.ParseReference(src.OciImage.GetReference()); err != nil {
			return apierr.Invalid("source.oci_image.reference", "is not an image reference: %v", err)
		}
		return checkPlatform("source.oci_image.platform", src.OciImage.GetPlatform())
	case *operatorv1.TemplateSource_OciArchive:
		if !digestPattern.MatchString(src.OciArchive.GetUploadDigest()) {
			return apierr.Invalid("source.oci_archive.upload_digest", "must be \"sha256:\" and 64 lowercase hex digits")
		}
		return checkPlatform("source.oci_archive.platform", src.OciArchive.GetPlatform())
	case *operatorv1.TemplateSource_Tar:
		if !digestPattern.MatchString(src.Tar.GetUploadDigest()) {
			return apierr.Invalid("source.tar.upload_digest", "must be \"sha256:\" and 64 lowercase hex digits")
		}
		if a := src.Tar.GetArchitecture(); a != "" && !archPattern.MatchString(a) {
			return apierr.Invalid("source.tar.architecture", "must be an architecture in OCI terms, such as amd64 or arm64")
		}
		return nil
	}
	return apierr.Invalid("source", "must select one of oci_image, oci_archive and tar")
}

func checkPlatform(field, p string) error {
	if p == "" {
		return nil
	}
	parts := strings.Split(p, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return apierr.Invalid(field, "must be os/arch or os/arch/variant")
	}
	for _, part := range parts {
		if !archPattern.MatchString(part) {
			return apierr.Invalid(field, "must be os/arch or os/arch/variant")
		}
	}
	return nil
}

// newRevision records a BUILDING revision for req.
func (c *Catalog) newRevision(tx *store.Tx, req *operatorv1.CreateTemplateRevisionRequest) (*operatorv1.TemplateRevision, error) {
	tm, err := getTemplate(tx, req.GetTemplate(), true, false)
	if err != nil {
		return nil, err
	}
	rev, err := revisionName(tx, tm.GetTemplate(), req.GetRevision())
	if err != nil {
		return nil, err
	}
	source := proto.Clone(req.GetSource()).(*operatorv1.TemplateSource)
	if err := checkUpload(tx, source); err != nil {
		return nil, err
	}
	if img := source.GetOciImage(); img != nil {
		img.ResolvedDigest = ""
	}
	now := timestamppb.New(c.now())
	r := &operatorv1.TemplateRevision{
		Ref: &ctrlv1.TemplateRef{Template: tm.GetTemplate(), Revision: rev}, State: stateBuilding, Source: source,
		Build:       &operatorv1.TemplateBuildProgress{Phase: operatorv1.TemplateBuildPhase_TEMPLATE_BUILD_PHASE_QUEUED, StartedAt: now, UpdatedAt: now},
		Description: req.GetDescription(), BuildCommandId: req.GetCommand().GetCommandId(), CreatedAt: now,
	}
	if tar := source.GetTar(); tar != nil {
		r.Architecture = tar.GetArchitecture()
		if r.Architecture == "" {
			r.Architecture = runtime.GOARCH
		}
	}
	tm.RevisionCount++
	if err := tx.PutTemplate(tm); err != nil {
		return nil, err
	}
	return r, tx.InsertTemplateRevision(r)
}

// revisionName is the requested name if unused (even by a deleted
// revision), or the next free decimal sequence number.
func revisionName(tx *store.Tx, template, requested string) (string, error) {
	if requested != "" {
		if _, err := tx.GetTemplateRevision(template, requested, false); err == nil {
			return "", conflict("revision", "template %q already has (or had) a revision %q: revision names are never reused", template, requested)
		} else if !errors.Is(err, store.ErrNotFound) {
			return "", err
		}
		return requested, nil
	}
	tm, err := tx.GetTemplate(template, false)
	if err != nil {
		return "", err
	}
	// Every revision has a name, so the count of every revision ever made
	// (deleted ones are kept) bounds the search.
	all, _, err := tx.ListTemplateRevisions(template, "", int(tm.GetRevisionCount())+1<<20, true)
	if err != nil {
		return "", err
	}
	used := map[string]bool{}
	for _, r := range all {
		used[r.GetRef().GetRevision()] = true
	}
	for n := len(all) + 1; ; n++ {
		if !used[strconv.Itoa(n)] {
			return strconv.Itoa(n), nil
		}
	}
}

// checkUpload makes sure the upload a source names exists.
func checkUpload(tx *store.Tx, s *operatorv1.TemplateSource) error {
	field, digest := "source.tar.upload_digest", s.GetTar().GetUploadDigest()
	if a := s.GetOciArchive(); a != nil {
		field, digest = "source.oci_archive.upload_digest", a.GetUploadDigest()
	}
	if digest == "" {
		return nil
	}
	if _, err := tx.UploadSize(store.UploadTemplateSource, digest); errors.Is(err, store.ErrNotFound) {
		return missing(field, "%s: no template source %s was uploaded", field, digest)
	} else if err != nil {
		return err
	}
	return nil
}

// revisionWithDefault reads a revision with is_default as its Template says
// now.
func revisionWithDefault(tx *store.Tx, template, revision string) (*operatorv1.TemplateRevision, error) {
	r, err := tx.GetTemplateRevision(template, revision, false)
	if err != nil {
		return nil, notFound(err, "template revision", template+"/"+revision)
	}
	tm, err := tx.GetTemplate(template, false)
	if err != nil {
		return nil, err
	}
	r.IsDefault = r.GetState() != stateDeleted && tm.GetDefaultRevision() == revision
	return r, nil
}

// GetTemplateRevision reads the revision a selector names.
func (c *Catalog) GetTemplateRevision(ctx context.Context, req *operatorv1.GetTemplateRevisionRequest) (*operatorv1.GetTemplateRevisionResponse, error) {
	sel := req.GetSelector()
	var r *operatorv1.TemplateRevision
	err := c.store.Tx(ctx, func(tx *store.Tx) error {
		found, err := tx.SelectTemplateRevision(sel.GetTemplate(), sel.GetRevision())
		if err != nil {
			return notFound(err, "template revision", sel.GetTemplate()+"/"+sel.GetRevision())
		}
		r, err = revisionWithDefault(tx, found.GetRef().GetTemplate(), found.GetRef().GetRevision())
		return err
	})
	if err != nil {
		return nil, err
	}
	return &operatorv1.GetTemplateRevisionResponse{Revision: r}, nil
}

// ListTemplateRevisions pages a Template's revisions, newest first.
func (c *Catalog) ListTemplateRevisions(ctx context.Context, req *operatorv1.ListTemplateRevisionsRequest) (*operatorv1.ListTemplateRevisionsResponse, error) {
	filter := fmt.Sprintf("revisions|%s|deleted=%t", req.GetTemplate(), req.GetIncludeDeleted())
	after, err := page.After(req.GetPageToken(), filter)
	if err != nil {
		return nil, err
	}
	res := &operatorv1.ListTemplateRevisionsResponse{}
	err = c.store.Tx(ctx, func(tx *store.Tx) error {
		tm, err := getTemplate(tx, req.GetTemplate(), false, true)
		if err != nil {
			return err
		}
		type keyed struct {
			r   *operatorv1.TemplateRevision
			key string
		}
		var items []keyed
		items, res.NextPageToken, err = page.Collect(page.Size(req.GetPageSize()), after, filter,
			func(k keyed) string { return k.key }, func(keyed) bool { return true },
			func(after string, n int) ([]keyed, error) {
				revs, keys, err := tx.ListTemplateRevisions(tm.GetTemplate(), after, n, req.GetIncludeDeleted())
				out := make([]keyed, len(revs))
				for i := range revs {
					out[i] = keyed{revs[i], keys[i]}
				}
				return out, err
			})
		for _, k := range items {
			k.r.IsDefault = k.r.GetState() != stateDeleted && tm.GetDefaultRevision() == k.r.GetRef().GetRevision()
			res.Revisions = append(res.Revisions, k.r)
		}
		return err
	})
	return res, err
}

// SetDefaultTemplateRevision makes a READY revision its Template's default.
func (c *Catalog) SetDefaultTemplateRevision(ctx context.Context, req *operatorv1.SetDefaultTemplateRevisionRequest) (*operatorv1.SetDefaultTemplateRevisionResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	if err := checkRef(req.GetRef()); err != nil {
		return nil, err
	}
	return admit(ctx, c, req.GetCommand().GetCommandId(), "SetDefaultTemplateRevision", req, func(tx *store.Tx) (string, *operatorv1.SetDefaultTemplateRevisionResponse, error) {
		ref := req.GetRef()
		tm, err := getTemplate(tx, ref.GetTemplate(), true, false)
		if err != nil {
			return "", nil, err
		}
		if err := checkVersion(tm, req.GetExpectedVersion()); err != nil {
			return "", nil, err
		}
		r, err := tx.GetTemplateRevision(ref.GetTemplate(), ref.GetRevision(), false)
		if err != nil {
			return "", nil, notFound(err, "template revision", ref.GetTemplate()+"/"+ref.GetRevision())
		}
		if r.GetState() != stateReady {
			return "", nil, apierr.Precondition(&ctrlv1.ErrorDetail{Field: "ref.revision"}, "revision %s/%s is %s, not READY",
				ref.GetTemplate(), ref.GetRevision(), strings.TrimPrefix(r.GetState().String(), "TEMPLATE_REVISION_STATE_"))
		}
		c.moveTemplateDefault(tm, ref.GetRevision())
		return tm.GetTemplate(), &operatorv1.SetDefaultTemplateRevisionResponse{Template: tm}, tx.PutTemplate(tm)
	})
}

func checkRef(ref *ctrlv1.TemplateRef) error {
	if ref.GetTemplate() == "" {
		return apierr.Invalid("ref.template", "is required")
	}
	if ref.GetRevision() == "" {
		return apierr.Invalid("ref.revision", "is required: name the exact revision")
	}
	return nil
}

func checkVersion(tm *operatorv1.Template, expected uint64) error {
	if expected != 0 && expected != tm.GetVersion() {
		return apierr.Precondition(&ctrlv1.ErrorDetail{Field: "expected_version"},
			"template %q is at version %d, not %d: read it again", tm.GetTemplate(), tm.GetVersion(), expected)
	}
	return nil
}

// moveTemplateDefault makes revision the default; the version advances
// only when the default changes.
func (c *Catalog) moveTemplateDefault(tm *operatorv1.Template, revision string) {
	if tm.GetDefaultRevision() == revision {
		return
	}
	tm.DefaultRevision = revision
	tm.Version++
	tm.UpdatedAt = timestamppb.New(c.now())
}

// DeleteTemplateRevision deletes a revision that is not the default and
// that no Workspace holds; a BUILDING one is cancelled.
func (c *Catalog) DeleteTemplateRevision(ctx context.Context, req *operatorv1.DeleteTemplateRevisionRequest) (*operatorv1.DeleteTemplateRevisionResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	if err := checkRef(req.GetRef()); err != nil {
		return nil, err
	}
	return admit(ctx, c, req.GetCommand().GetCommandId(), "DeleteTemplateRevision", req, func(tx *store.Tx) (string, *operatorv1.DeleteTemplateRevisionResponse, error) {
		ref := req.GetRef()
		tm, err := getTemplate(tx, ref.GetTemplate(), true, true)
		if err != nil {
			return "", nil, err
		}
		r, err := tx.GetTemplateRevision(ref.GetTemplate(), ref.GetRevision(), true)
		if err != nil {
			return "", nil, notFound(err, "template revision", ref.GetTemplate()+"/"+ref.GetRevision())
		}
		if r.GetState() == stateDeleted {
			return "", &operatorv1.DeleteTemplateRevisionResponse{Revision: r}, nil
		}
		if tm.GetDefaultRevision() == r.GetRef().GetRevision() {
			return "", nil, apierr.Precondition(&ctrlv1.ErrorDetail{Field: "ref.revision"},
				"revision %s/%s is its template's default: make another the default first", ref.GetTemplate(), ref.GetRevision())
		}
		if err := checkUnused(tx, []*ctrlv1.TemplateRef{ref}); err != nil {
			return "", nil, err
		}
		return ref.GetTemplate() + "/" + ref.GetRevision(), &operatorv1.DeleteTemplateRevisionResponse{Revision: r}, c.deleteRevision(tx, tm, r)
	})
}

// deleteRevision marks r DELETED (a build in progress sees it and stops)
// and counts it out of its Template, which the caller stores.
func (c *Catalog) deleteRevision(tx *store.Tx, tm *operatorv1.Template, r *operatorv1.TemplateRevision) error {
	now := timestamppb.New(c.now())
	if r.GetState() == stateBuilding {
		r.Failure = "cancelled: the revision was deleted while building"
		if r.Build != nil {
			r.Build.Phase = operatorv1.TemplateBuildPhase_TEMPLATE_BUILD_PHASE_DONE
			r.Build.UpdatedAt = now
		}
	}
	r.State = stateDeleted
	r.IsDefault = false
	r.DeletedAt = now
	if tm.RevisionCount > 0 {
		tm.RevisionCount--
	}
	if err := tx.UpdateTemplateRevision(r); err != nil {
		return err
	}
	return tx.PutTemplate(tm)
}

// checkUnused is failed_precondition naming up to ten Workspaces that are
// not deleted and hold one of refs.
func checkUnused(tx *store.Tx, refs []*ctrlv1.TemplateRef) error {
	held := map[string]bool{}
	for _, ref := range refs {
		held[ref.GetTemplate()+"/"+ref.GetRevision()] = true
	}
	var users []string
	after := ""
	for len(users) < 10 {
		batch, err := tx.ListWorkspaces(after, 500, false)
		if err != nil {
			return err
		}
		for _, w := range batch {
			if t := w.GetSpec().GetTemplate(); t != nil && held[t.GetTemplate()+"/"+t.GetRevision()] && len(users) < 10 {
				users = append(users, w.GetWorkspaceId())
			}
			after = w.GetWorkspaceId()
		}
		if len(batch) < 500 {
			break
		}
	}
	if len(users) > 0 {
		return apierr.Precondition(&ctrlv1.ErrorDetail{Field: "ref"}, "in use by Workspaces that are not deleted: %s", strings.Join(users, ", "))
	}
	return nil
}

// DeleteTemplate deletes a Template and all its revisions, leaving a
// tombstone.
func (c *Catalog) DeleteTemplate(ctx context.Context, req *operatorv1.DeleteTemplateRequest) (*operatorv1.DeleteTemplateResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	return admit(ctx, c, req.GetCommand().GetCommandId(), "DeleteTemplate", req, func(tx *store.Tx) (string, *operatorv1.DeleteTemplateResponse, error) {
		tm, err := getTemplate(tx, req.GetTemplate(), true, true)
		if err != nil {
			return "", nil, err
		}
		if tm.GetDeletedAt() != nil {
			return tm.GetTemplate(), &operatorv1.DeleteTemplateResponse{Template: tm}, nil
		}
		if err := checkVersion(tm, req.GetExpectedVersion()); err != nil {
			return "", nil, err
		}
		if tm.GetDeploymentDefault() {
			return "", nil, apierr.Precondition(&ctrlv1.ErrorDetail{Field: "template"},
				"template %q is the deployment default: make another the default first", tm.GetTemplate())
		}
		revs, _, err := tx.ListTemplateRevisions(tm.GetTemplate(), "", 1<<30, false)
		if err != nil {
			return "", nil, err
		}
		var refs []*ctrlv1.TemplateRef
		for _, r := range revs {
			refs = append(refs, r.GetRef())
		}
		if err := checkUnused(tx, refs); err != nil {
			return "", nil, err
		}
		for _, r := range revs {
			if err := c.deleteRevision(tx, tm, r); err != nil {
				return "", nil, err
			}
		}
		now := timestamppb.New(c.now())
		tm.DefaultRevision, tm.DeletedAt, tm.UpdatedAt = "", now, now
		tm.Version++
		return tm.GetTemplate(), &operatorv1.DeleteTemplateResponse{Template: tm}, tx.PutTemplate(tm)
	})
}
