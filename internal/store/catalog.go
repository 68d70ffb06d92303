package store

import (
	"database/sql"
	"errors"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
)

// Upload kinds: the content-addressed files the catalog received.
const (
	UploadPlatformArtifact = "platform"
	UploadTemplateSource   = "template-source"
)

// Names of the artifacts nodes fetch, for their logs and progress.
const (
	ArtifactKernel    = "vmlinux"
	ArtifactInitramfs = "initramfs"
	ArtifactRoot      = "root.img"
)

// scanBodies decodes the body column of every row.
func scanBodies[M proto.Message](rows *sql.Rows, newMsg func() M) ([]M, error) {
	defer rows.Close()
	var out []M
	for rows.Next() {
		var body []byte
		if err := rows.Scan(&body); err != nil {
			return nil, err
		}
		m := newMsg()
		if err := proto.Unmarshal(body, m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

func noRows(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// GetPlatformKey reads one PlatformKey, with deployment_default filled in.
func (t *Tx) GetPlatformKey(name string, lock bool) (*operatorv1.PlatformKey, error) {
	q := "SELECT deployment_default, body FROM catalog_platform_keys WHERE platform_key = ?"
	if lock {
		return first(queryDefaulted(t, q+t.d.lock, []any{name}, newPlatformKey))
	}
	return getDefaulted(t, q, name, newPlatformKey)
}

func newPlatformKey(def bool) *operatorv1.PlatformKey {
	return &operatorv1.PlatformKey{DeploymentDefault: def}
}

// queryDefaulted reads rows of (deployment_default, body): the body decoded
// into newMsg(deployment_default), where the body leaves the flag false.
func queryDefaulted[M proto.Message](t *Tx, q string, args []any, newMsg func(def bool) M) ([]M, error) {
	rows, err := t.queryDrained(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []M
	for rows.Next() {
		var def int64
		var body []byte
		if err := rows.Scan(&def, &body); err != nil {
			return nil, err
		}
		m := newMsg(def == 1)
		if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(body, m); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// getDefaulted reads the one row of (deployment_default, body) q finds by
// key, as queryDefaulted does, through the row cache; ErrNotFound for none.
func getDefaulted[M proto.Message](t *Tx, q, key string, newMsg func(def bool) M) (M, error) {
	var def int64
	var body []byte
	if err := t.cachedScan(q, []any{key}, &def, &body); err != nil {
		var zero M
		return zero, noRows(err)
	}
	m := newMsg(def == 1)
	return m, (proto.UnmarshalOptions{Merge: true}).Unmarshal(body, m)
}

// first is the one row a query by key found, or ErrNotFound.
func first[M any](ms []M, err error) (M, error) {
	var zero M
	if err != nil {
		return zero, err
	}
	if len(ms) == 0 {
		return zero, ErrNotFound
	}
	return ms[0], nil
}

// PutPlatformKey writes a PlatformKey; its deployment_default is kept in
// its column, which only SetDeploymentDefaultPlatformKey moves.
func (t *Tx) PutPlatformKey(k *operatorv1.PlatformKey) error {
	body := proto.Clone(k).(*operatorv1.PlatformKey)
	body.DeploymentDefault = false
	_, err := t.exec(`INSERT INTO catalog_platform_keys (platform_key, body) VALUES (?, ?)
		ON CONFLICT (platform_key) DO UPDATE SET body = excluded.body`, k.GetPlatformKey(), marshal(body))
	return err
}

// SetDeploymentDefaultPlatformKey makes name the one deployment default.
func (t *Tx) SetDeploymentDefaultPlatformKey(name string) error {
	_, err := t.exec("UPDATE catalog_platform_keys SET deployment_default = CASE WHEN platform_key = ? THEN 1 ELSE 0 END", name)
	return err
}

// ListPlatformKeys pages PlatformKeys by name after the one given.
func (t *Tx) ListPlatformKeys(after string, limit int) ([]*operatorv1.PlatformKey, error) {
	return queryDefaulted(t, "SELECT deployment_default, body FROM catalog_platform_keys WHERE platform_key > ? ORDER BY platform_key LIMIT ?",
		[]any{after, limit}, newPlatformKey)
}

// InsertLaunch records a new Launch; its revision must be new in its key.
func (t *Tx) InsertLaunch(l *operatorv1.Launch) error {
	_, err := t.exec(`INSERT INTO catalog_launches (launch_ref, platform_key, revision, kernel_digest, initramfs_digest, body)
		VALUES (?, ?, ?, ?, ?, ?)`, l.GetLaunchRef(), l.GetPlatformKey(), int64(l.GetRevision()),
		l.GetSpec().GetKernel().GetDigest(), l.GetSpec().GetInitramfs().GetDigest(), marshal(l))
	return err
}

// CatalogLaunch reads one Launch as it was created (is_default is the
// caller's to fill in).
func (t *Tx) CatalogLaunch(ref string) (*operatorv1.Launch, error) {
	var body []byte
	if err := t.cachedScan("SELECT body FROM catalog_launches WHERE launch_ref = ?", []any{ref}, &body); err != nil {
		return nil, noRows(err)
	}
	l := &operatorv1.Launch{}
	return l, proto.Unmarshal(body, l)
}

// ListLaunches pages a key's Launches newest first, below revision before
// (0: from the newest).
func (t *Tx) ListLaunches(key string, before uint64, limit int) ([]*operatorv1.Launch, error) {
	q, args := "SELECT body FROM catalog_launches WHERE platform_key = ?", []any{key}
	if before > 0 {
		q += " AND revision < ?"
		args = append(args, int64(before))
	}
	rows, err := t.query(q+" ORDER BY revision DESC LIMIT ?", append(args, limit)...)
	if err != nil {
		return nil, err
	}
	return scanBodies(rows, func() *operatorv1.Launch { return &operatorv1.Launch{} })
}

// GetLaunch reads a Launch as nodes boot it: its kernel and initramfs.
func (t *Tx) GetLaunch(ref string) (*storev1.Launch, error) {
	l, err := t.CatalogLaunch(ref)
	if err != nil {
		return nil, err
	}
	return &storev1.Launch{
		LaunchRef: l.GetLaunchRef(), PlatformKey: l.GetPlatformKey(),
		Kernel:    artifact(l.GetSpec().GetKernel(), ArtifactKernel),
		Initrd:    artifact(l.GetSpec().GetInitramfs(), ArtifactInitramfs),
		CreatedAt: l.GetCreatedAt(),
	}, nil
}

func artifact(a *operatorv1.PlatformArtifact, name string) *nodev1.Artifact {
	if a == nil {
		return nil
	}
	return &nodev1.Artifact{Digest: a.GetDigest(), SizeBytes: a.GetSizeBytes(), Name: name}
}

// DefaultLaunch is the default Launch of key ("" for the deployment's
// default key). It returns ErrNotFound when there is none.
func (t *Tx) DefaultLaunch(key string) (*storev1.Launch, error) {
	var k *operatorv1.PlatformKey
	var err error
	if key == "" {
		var body []byte
		if err = t.cachedScan("SELECT body FROM catalog_platform_keys WHERE deployment_default = 1", nil, &body); err != nil {
			return nil, noRows(err)
		}
		k = &operatorv1.PlatformKey{}
		err = proto.Unmarshal(body, k)
	} else {
		k, err = t.GetPlatformKey(key, false)
	}
	if err != nil {
		return nil, err
	}
	if k.GetDefaultLaunchRef() == "" {
		return nil, ErrNotFound
	}
	return t.GetLaunch(k.GetDefaultLaunchRef())
}

// PutUpload records a completed upload; one already recorded is kept as it
// is (inserted false).
func (t *Tx) PutUpload(kind, digest string, size uint64, completedAt time.Time) (inserted bool, err error) {
	res, err := t.exec(`INSERT INTO catalog_uploads (kind, digest, size_bytes, completed_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (kind, digest) DO NOTHING`, kind, digest, int64(size), completedAt.UnixNano())
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// UploadSize reads the size of a completed upload.
func (t *Tx) UploadSize(kind, digest string) (uint64, error) {
	var size int64
	err := t.queryRow("SELECT size_bytes FROM catalog_uploads WHERE kind = ? AND digest = ?", kind, digest).Scan(&size)
	return uint64(size), noRows(err)
}

// UnreferencedUploads lists the uploads of kind completed before cutoff
// that nothing references: no Launch (platform artifacts), no revision that
// is not deleted (template sources).
func (t *Tx) UnreferencedUploads(kind string, cutoff time.Time) ([]string, error) {
	ref := "NOT EXISTS (SELECT 1 FROM catalog_launches l WHERE l.kernel_digest = u.digest OR l.initramfs_digest = u.digest)"
	if kind == UploadTemplateSource {
		ref = "NOT EXISTS (SELECT 1 FROM catalog_template_revisions r WHERE r.source_digest = u.digest AND r.state <> 'TEMPLATE_REVISION_STATE_DELETED')"
	}
	return t.queryStrings("SELECT digest FROM catalog_uploads u WHERE kind = ? AND completed_at < ? AND "+ref+" ORDER BY digest",
		kind, cutoff.UnixNano())
}

// DeleteUpload forgets an upload.
func (t *Tx) DeleteUpload(kind, digest string) error {
	_, err := t.exec("DELETE FROM catalog_uploads WHERE kind = ? AND digest = ?", kind, digest)
	return err
}

// formatSeq is a revision's seq as a page key.
func formatSeq(seq int64) string { return strconv.FormatInt(seq, 10) }

// GetRuntime reads a Workspace's runtime record; a Workspace that never ran
// has an empty one.
func (t *Tx) GetRuntime(workspaceID string, lock bool) (*storev1.WorkspaceRuntime, error) {
	r := &storev1.WorkspaceRuntime{}
	err := t.getBody("workspace_runtime", "workspace_id", workspaceID, lock, r)
	if errors.Is(err, ErrNotFound) {
		return &storev1.WorkspaceRuntime{WorkspaceId: workspaceID}, nil
	}
	if err == nil && (lock || t.d.name != postgres.name) {
		t.noteIndexed("workspace_runtime", workspaceID, r.GetNodeId(), r.GetLayerPool())
	}
	return r, err
}

// PutRuntime writes a Workspace's runtime record, with the node its
// current execution runs on (NodeExecutions) and its writable layer's pool
// and capacity (what the layer reserves there) in columns of their own.
func (t *Tx) PutRuntime(r *storev1.WorkspaceRuntime) error {
	return t.putRow("workspace_runtime", []string{"workspace_id", "node_id", "layer_pool", "layer_capacity_bytes", "body"}, 2,
		r.GetWorkspaceId(), r.GetNodeId(), r.GetLayerPool(), int64(r.GetLayerCapacityBytes()), marshal(r))
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
