package store

import (
	"google.golang.org/protobuf/proto"

	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
)

// LegacyCatalog is what an earlier ctrl registered before the catalog RPCs
// (the tables of migration 0003): Launches and Template revisions with the
// names of the defaults.
type LegacyCatalog struct {
	Launches  []*storev1.Launch
	Templates []*storev1.TemplateRevision
	// DefaultLaunch maps a platform key to its default launch_ref, and
	// DefaultRevision a template to its default revision.
	DefaultLaunch   map[string]string
	DefaultRevision map[string]string
	// DeploymentKey and DeploymentTemplate are the deployment defaults.
	DeploymentKey, DeploymentTemplate string
}

// ReadLegacyCatalog reads the tables of migration 0003.
func (t *Tx) ReadLegacyCatalog() (*LegacyCatalog, error) {
	lc := &LegacyCatalog{DefaultLaunch: map[string]string{}, DefaultRevision: map[string]string{}}
	var err error
	if lc.Launches, err = listLegacy(t, "launches", func() *storev1.Launch { return &storev1.Launch{} }); err != nil {
		return nil, err
	}
	if lc.Templates, err = listLegacy(t, "template_revisions", func() *storev1.TemplateRevision { return &storev1.TemplateRevision{} }); err != nil {
		return nil, err
	}
	if lc.DeploymentKey, err = readDefaults(t, "platform_keys", "platform_key", "default_launch_ref", lc.DefaultLaunch); err != nil {
		return nil, err
	}
	lc.DeploymentTemplate, err = readDefaults(t, "templates", "template", "default_revision", lc.DefaultRevision)
	return lc, err
}

func listLegacy[M proto.Message](t *Tx, table string, newMsg func() M) ([]M, error) {
	rows, err := t.query("SELECT body FROM " + table + " ORDER BY created_at")
	if err != nil {
		return nil, err
	}
	return scanBodies(rows, newMsg)
}

func readDefaults(t *Tx, table, key, def string, into map[string]string) (deployment string, err error) {
	rows, err := t.query("SELECT " + key + ", " + def + ", deployment_default FROM " + table)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	for rows.Next() {
		var name, value string
		var isDefault int64
		if err := rows.Scan(&name, &value, &isDefault); err != nil {
			return "", err
		}
		into[name] = value
		if isDefault == 1 {
			deployment = name
		}
	}
	return deployment, rows.Err()
}

// ClearLegacyCatalog empties the tables of migration 0003 once their rows
// are adopted.
func (t *Tx) ClearLegacyCatalog() error {
	for _, table := range []string{"launches", "platform_keys", "template_revisions", "templates"} {
		if _, err := t.exec("DELETE FROM " + table); err != nil {
			return err
		}
	}
	return nil
}

// PutLegacyLaunch and PutLegacyTemplateRevision write rows as ctrl did
// before the catalog RPCs; only tests of the adoption use them.
func (t *Tx) PutLegacyLaunch(l *storev1.Launch, isDefault, deploymentDefault bool) error {
	if _, err := t.exec("INSERT INTO launches (launch_ref, platform_key, created_at, body) VALUES (?, ?, ?, ?)",
		l.GetLaunchRef(), l.GetPlatformKey(), l.GetCreatedAt().AsTime().UnixNano(), marshal(l)); err != nil || !isDefault {
		return err
	}
	_, err := t.exec("INSERT INTO platform_keys (platform_key, default_launch_ref, deployment_default) VALUES (?, ?, ?)",
		l.GetPlatformKey(), l.GetLaunchRef(), boolInt(deploymentDefault))
	return err
}

// PutLegacyTemplateRevision: see PutLegacyLaunch.
func (t *Tx) PutLegacyTemplateRevision(r *storev1.TemplateRevision, isDefault, deploymentDefault bool) error {
	if _, err := t.exec("INSERT INTO template_revisions (template, revision, created_at, body) VALUES (?, ?, ?, ?)",
		r.GetTemplate(), r.GetRevision(), r.GetCreatedAt().AsTime().UnixNano(), marshal(r)); err != nil || !isDefault {
		return err
	}
	_, err := t.exec("INSERT INTO templates (template, default_revision, deployment_default) VALUES (?, ?, ?)",
		r.GetTemplate(), r.GetRevision(), boolInt(deploymentDefault))
	return err
}
