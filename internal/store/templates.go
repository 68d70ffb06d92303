package store

import (
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
)

var revisionDeleted = operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_DELETED.String()

// GetTemplate reads one Template (deleted ones too), with
// deployment_default filled in.
func (t *Tx) GetTemplate(name string, lock bool) (*operatorv1.Template, error) {
	q := "SELECT deployment_default, body FROM catalog_templates WHERE template = ?"
	if lock {
		return first(queryDefaulted(t, q+t.d.lock, []any{name}, newTemplate))
	}
	return getDefaulted(t, q, name, newTemplate)
}

func newTemplate(def bool) *operatorv1.Template { return &operatorv1.Template{DeploymentDefault: def} }

// PutTemplate writes a Template; its deployment_default is kept in its
// column, which only SetDeploymentDefaultTemplate moves.
func (t *Tx) PutTemplate(tm *operatorv1.Template) error {
	body := proto.Clone(tm).(*operatorv1.Template)
	body.DeploymentDefault = false
	_, err := t.exec(`INSERT INTO catalog_templates (template, deleted, body) VALUES (?, ?, ?)
		ON CONFLICT (template) DO UPDATE SET deleted = excluded.deleted, body = excluded.body`,
		tm.GetTemplate(), boolInt(tm.GetDeletedAt() != nil), marshal(body))
	return err
}

// SetDeploymentDefaultTemplate makes name the one deployment default.
func (t *Tx) SetDeploymentDefaultTemplate(name string) error {
	_, err := t.exec("UPDATE catalog_templates SET deployment_default = CASE WHEN template = ? THEN 1 ELSE 0 END", name)
	return err
}

// DeploymentDefaultTemplate is the name of the deployment default Template,
// or ErrNotFound.
func (t *Tx) DeploymentDefaultTemplate() (string, error) {
	var name string
	err := t.cachedScan("SELECT template FROM catalog_templates WHERE deployment_default = 1", nil, &name)
	return name, noRows(err)
}

// ListTemplates pages Templates by name after the one given.
func (t *Tx) ListTemplates(after string, limit int, includeDeleted bool) ([]*operatorv1.Template, error) {
	q := "SELECT deployment_default, body FROM catalog_templates WHERE template > ?"
	if !includeDeleted {
		q += " AND deleted = 0"
	}
	return queryDefaulted(t, q+" ORDER BY template LIMIT ?", []any{after, limit}, newTemplate)
}

// InsertTemplateRevision records a new revision after the Template's
// others. The caller holds the Template's row lock.
func (t *Tx) InsertTemplateRevision(r *operatorv1.TemplateRevision) error {
	var seq int64
	if err := t.queryRow("SELECT COALESCE(MAX(seq), 0) FROM catalog_template_revisions WHERE template = ?", r.GetRef().GetTemplate()).Scan(&seq); err != nil {
		return err
	}
	_, err := t.exec(`INSERT INTO catalog_template_revisions (template, revision, seq, state, source_digest, body) VALUES (?, ?, ?, ?, ?, ?)`,
		r.GetRef().GetTemplate(), r.GetRef().GetRevision(), seq+1, r.GetState().String(), sourceDigest(r), marshal(r))
	return err
}

func sourceDigest(r *operatorv1.TemplateRevision) string {
	s := r.GetSource()
	if d := s.GetTar().GetUploadDigest(); d != "" {
		return d
	}
	return s.GetOciArchive().GetUploadDigest()
}

// UpdateTemplateRevision writes a revision that exists.
func (t *Tx) UpdateTemplateRevision(r *operatorv1.TemplateRevision) error {
	res, err := t.exec("UPDATE catalog_template_revisions SET state = ?, body = ? WHERE template = ? AND revision = ?",
		r.GetState().String(), marshal(r), r.GetRef().GetTemplate(), r.GetRef().GetRevision())
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrNotFound
	}
	return nil
}

// GetTemplateRevision reads one revision, deleted ones too.
func (t *Tx) GetTemplateRevision(template, revision string, lock bool) (*operatorv1.TemplateRevision, error) {
	q := "SELECT body FROM catalog_template_revisions WHERE template = ? AND revision = ?"
	var body []byte
	var err error
	if lock {
		err = t.queryRow(q+t.d.lock, template, revision).Scan(&body)
	} else {
		err = t.cachedScan(q, []any{template, revision}, &body)
	}
	if err != nil {
		return nil, noRows(err)
	}
	r := &operatorv1.TemplateRevision{}
	return r, proto.Unmarshal(body, r)
}

// ListTemplateRevisions pages a Template's revisions newest first. before
// is the page key of the last one already listed ("" to start); the second
// result is the page key of each revision returned.
func (t *Tx) ListTemplateRevisions(template, before string, limit int, includeDeleted bool) ([]*operatorv1.TemplateRevision, []string, error) {
	q, args := "SELECT seq, body FROM catalog_template_revisions WHERE template = ?", []any{template}
	if before != "" {
		seq, err := strconv.ParseInt(before, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("revision page key %q: %w", before, err)
		}
		q += " AND seq < ?"
		args = append(args, seq)
	}
	if !includeDeleted {
		q += " AND state <> ?"
		args = append(args, revisionDeleted)
	}
	rows, err := t.query(q+" ORDER BY seq DESC LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var out []*operatorv1.TemplateRevision
	var keys []string
	for rows.Next() {
		var seq int64
		var body []byte
		if err := rows.Scan(&seq, &body); err != nil {
			return nil, nil, err
		}
		r := &operatorv1.TemplateRevision{}
		if err := proto.Unmarshal(body, r); err != nil {
			return nil, nil, err
		}
		out = append(out, r)
		keys = append(keys, formatSeq(seq))
	}
	return out, keys, rows.Err()
}

// TemplateRevision resolves a selector to a READY revision as nodes receive
// it: an empty template is the deployment's default, an empty revision the
// template's default. It returns ErrNotFound when nothing READY matches.
func (t *Tx) TemplateRevision(template, revision string) (*storev1.TemplateRevision, error) {
	r, err := t.SelectTemplateRevision(template, revision)
	if err != nil {
		return nil, err
	}
	if r.GetState() != operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY {
		return nil, ErrNotFound
	}
	return &storev1.TemplateRevision{
		Template: r.GetRef().GetTemplate(), Revision: r.GetRef().GetRevision(),
		Root:      artifact(&operatorv1.PlatformArtifact{Digest: r.GetImageDigest(), SizeBytes: r.GetImageSizeBytes()}, ArtifactRoot),
		CreatedAt: r.GetCreatedAt(),
	}, nil
}

// SelectTemplateRevision resolves a selector (empty template: the
// deployment default; empty revision: the template's default) to a
// revision in any state. It returns ErrNotFound when nothing matches or the
// Template is deleted.
func (t *Tx) SelectTemplateRevision(template, revision string) (*operatorv1.TemplateRevision, error) {
	if template == "" {
		var err error
		if template, err = t.DeploymentDefaultTemplate(); err != nil {
			return nil, err
		}
	}
	tm, err := t.GetTemplate(template, false)
	if err != nil {
		return nil, err
	}
	if tm.GetDeletedAt() != nil {
		return nil, ErrNotFound
	}
	if revision == "" {
		if revision = tm.GetDefaultRevision(); revision == "" {
			return nil, ErrNotFound
		}
	}
	return t.GetTemplateRevision(template, revision, false)
}
