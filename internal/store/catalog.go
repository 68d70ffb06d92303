package store

import (
	"database/sql"
	"errors"

	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
)

// PutLaunch records a Launch revision; an existing launch_ref is kept.
func (t *Tx) PutLaunch(l *storev1.Launch) error {
	_, err := t.exec(`INSERT INTO launches (launch_ref, platform_key, created_at, body) VALUES (?, ?, ?, ?)
		ON CONFLICT (launch_ref) DO NOTHING`, l.GetLaunchRef(), l.GetPlatformKey(), l.GetCreatedAt().AsTime().UnixNano(), marshal(l))
	return err
}

// GetLaunch reads one Launch revision.
func (t *Tx) GetLaunch(ref string) (*storev1.Launch, error) {
	l := &storev1.Launch{}
	return l, t.getBody("launches", "launch_ref", ref, false, l)
}

// SetDefaultLaunch makes ref the default of its platform key, and the key
// the deployment's default when deploymentDefault.
func (t *Tx) SetDefaultLaunch(key, ref string, deploymentDefault bool) error {
	if deploymentDefault {
		if _, err := t.exec("UPDATE platform_keys SET deployment_default = 0"); err != nil {
			return err
		}
	}
	_, err := t.exec(`INSERT INTO platform_keys (platform_key, default_launch_ref, deployment_default) VALUES (?, ?, ?)
		ON CONFLICT (platform_key) DO UPDATE SET default_launch_ref = excluded.default_launch_ref,
		deployment_default = CASE WHEN excluded.deployment_default = 1 THEN 1 ELSE platform_keys.deployment_default END`,
		key, ref, boolInt(deploymentDefault))
	return err
}

// DefaultLaunch is the default Launch of key ("" for the deployment's
// default key). It returns ErrNotFound when there is none.
func (t *Tx) DefaultLaunch(key string) (*storev1.Launch, error) {
	q, args := "SELECT default_launch_ref FROM platform_keys WHERE platform_key = ?", []any{key}
	if key == "" {
		q, args = "SELECT default_launch_ref FROM platform_keys WHERE deployment_default = 1", nil
	}
	var ref string
	if err := t.queryRow(q, args...).Scan(&ref); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	return t.GetLaunch(ref)
}

// PutTemplateRevision records a Template revision; an existing one is kept.
func (t *Tx) PutTemplateRevision(r *storev1.TemplateRevision) error {
	_, err := t.exec(`INSERT INTO template_revisions (template, revision, created_at, body) VALUES (?, ?, ?, ?)
		ON CONFLICT (template, revision) DO NOTHING`, r.GetTemplate(), r.GetRevision(), r.GetCreatedAt().AsTime().UnixNano(), marshal(r))
	return err
}

// SetDefaultTemplateRevision makes revision the default of template, and the
// template the deployment's default when deploymentDefault.
func (t *Tx) SetDefaultTemplateRevision(template, revision string, deploymentDefault bool) error {
	if deploymentDefault {
		if _, err := t.exec("UPDATE templates SET deployment_default = 0"); err != nil {
			return err
		}
	}
	_, err := t.exec(`INSERT INTO templates (template, default_revision, deployment_default) VALUES (?, ?, ?)
		ON CONFLICT (template) DO UPDATE SET default_revision = excluded.default_revision,
		deployment_default = CASE WHEN excluded.deployment_default = 1 THEN 1 ELSE templates.deployment_default END`,
		template, revision, boolInt(deploymentDefault))
	return err
}

// TemplateRevision resolves a selector: an empty template is the
// deployment's default, an empty revision the template's default. It
// returns ErrNotFound when nothing matches.
func (t *Tx) TemplateRevision(template, revision string) (*storev1.TemplateRevision, error) {
	if template == "" || revision == "" {
		q, args := "SELECT template, default_revision FROM templates WHERE template = ?", []any{template}
		if template == "" {
			q, args = "SELECT template, default_revision FROM templates WHERE deployment_default = 1", nil
		}
		var def string
		if err := t.queryRow(q, args...).Scan(&template, &def); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return nil, ErrNotFound
			}
			return nil, err
		}
		if revision == "" {
			revision = def
		}
	}
	var body []byte
	if err := t.queryRow("SELECT body FROM template_revisions WHERE template = ? AND revision = ?", template, revision).Scan(&body); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	r := &storev1.TemplateRevision{}
	return r, unmarshal(body, r)
}

// GetRuntime reads a Workspace's runtime record; a Workspace that never ran
// has an empty one.
func (t *Tx) GetRuntime(workspaceID string, lock bool) (*storev1.WorkspaceRuntime, error) {
	r := &storev1.WorkspaceRuntime{}
	err := t.getBody("workspace_runtime", "workspace_id", workspaceID, lock, r)
	if errors.Is(err, ErrNotFound) {
		return &storev1.WorkspaceRuntime{WorkspaceId: workspaceID}, nil
	}
	return r, err
}

// PutRuntime writes a Workspace's runtime record, with the node its
// current execution runs on in a column of its own (NodeExecutions).
func (t *Tx) PutRuntime(r *storev1.WorkspaceRuntime) error {
	return t.upsert("workspace_runtime", []string{"workspace_id", "node_id", "body"}, r.GetWorkspaceId(), r.GetNodeId(), marshal(r))
}

// SetNodeData records how ctrl reaches a node's data endpoint.
func (t *Tx) SetNodeData(id, endpoint, token string) error {
	_, err := t.exec("UPDATE nodes SET data_endpoint = ?, data_token = ? WHERE node_id = ?", endpoint, token, id)
	return err
}

// NodeData reads how ctrl reaches a node's data endpoint.
func (t *Tx) NodeData(id string) (endpoint, token string, err error) {
	err = t.queryRow("SELECT data_endpoint, data_token FROM nodes WHERE node_id = ?", id).Scan(&endpoint, &token)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	return endpoint, token, err
}
