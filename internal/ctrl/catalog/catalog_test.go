package catalog_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/testenv"
)

type clients struct {
	templates operatorv1connect.TemplateCatalogServiceClient
	platforms operatorv1connect.PlatformCatalogServiceClient
}

func newClients(t *testing.T) clients { return clientsOf(testenv.New(t)) }

// clientsOf are the catalog clients of a cluster, with its operator key.
func clientsOf(c *testenv.Cluster) clients {
	op := connect.WithInterceptors(auth.Bearer(c.Ctrl.Client.OperatorToken))
	return clients{
		templates: operatorv1connect.NewTemplateCatalogServiceClient(http.DefaultClient, c.Ctrl.Client.OperatorEndpoint, op),
		platforms: operatorv1connect.NewPlatformCatalogServiceClient(http.DefaultClient, c.Ctrl.Client.OperatorEndpoint, op),
	}
}

func cmd(id string) *ctrlv1.CommandMetadata { return &ctrlv1.CommandMetadata{CommandId: id} }

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// tarOf makes a tar of files (path → content); a path ending in / is a
// directory.
func tarOf(t *testing.T, files map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}
		if name[len(name)-1] == '/' {
			h = &tar.Header{Name: name, Mode: 0o755, Typeflag: tar.TypeDir}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil && h.Typeflag == tar.TypeReg {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func upload(t *testing.T, c clients, id, digest string, size int, content []byte) (*operatorv1.UploadTemplateSourceResponse, error) {
	t.Helper()
	s := c.templates.UploadTemplateSource(context.Background())
	if err := s.Send(&operatorv1.UploadTemplateSourceRequest{Part: &operatorv1.UploadTemplateSourceRequest_Header{Header: &operatorv1.TemplateSourceUploadHeader{
		Command: cmd(id), Digest: digest, SizeBytes: uint64(size),
	}}}); err != nil {
		t.Fatal(err)
	}
	for len(content) > 0 {
		n := min(len(content), 1<<16)
		if err := s.Send(&operatorv1.UploadTemplateSourceRequest{Part: &operatorv1.UploadTemplateSourceRequest_Chunk{Chunk: content[:n]}}); err != nil {
			break // the server answered already; CloseAndReceive says how
		}
		content = content[n:]
	}
	res, err := s.CloseAndReceive()
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func waitBuilt(t *testing.T, c clients, template, revision string) *operatorv1.TemplateRevision {
	t.Helper()
	var r *operatorv1.TemplateRevision
	testenv.WaitFor(t, "revision "+revision+" built", func() bool {
		res, err := c.templates.GetTemplateRevision(context.Background(), connect.NewRequest(&operatorv1.GetTemplateRevisionRequest{
			Selector: &ctrlv1.TemplateSelector{Template: template, Revision: revision},
		}))
		if err != nil {
			t.Fatal(err)
		}
		r = res.Msg.GetRevision()
		return r.GetState() != operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_BUILDING
	})
	return r
}

func TestTemplateFromTarAndOCIArchive(t *testing.T) {
	ctx := context.Background()
	c := newClients(t)
	if _, err := c.templates.CreateTemplate(ctx, connect.NewRequest(&operatorv1.CreateTemplateRequest{Command: cmd("t1"), Template: "base"})); err != nil {
		t.Fatal(err)
	}
	// A name in use is already_exists; bad names are invalid.
	if _, err := c.templates.CreateTemplate(ctx, connect.NewRequest(&operatorv1.CreateTemplateRequest{Command: cmd("t2"), Template: "base"})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("second base: %v", err)
	}
	if _, err := c.templates.CreateTemplate(ctx, connect.NewRequest(&operatorv1.CreateTemplateRequest{Command: cmd("t3"), Template: "Bad_"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("bad name: %v", err)
	}

	rootfs := tarOf(t, map[string]string{"etc/": "", "etc/greeting": "hello\n"})
	// Content that does not match its digest keeps nothing.
	if _, err := upload(t, c, "u0", digestOf([]byte("other")), len(rootfs), rootfs); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("digest mismatch: %v", err)
	}
	up, err := upload(t, c, "u1", digestOf(rootfs), len(rootfs), rootfs)
	if err != nil {
		t.Fatal(err)
	}
	// Content ctrl holds answers at once, whatever the stream carries.
	if again, err := upload(t, c, "u2", digestOf(rootfs), len(rootfs), nil); err != nil || again.GetDigest() != up.GetDigest() {
		t.Fatalf("upload of held content: %v %v", again, err)
	}
	req := &operatorv1.CreateTemplateRevisionRequest{
		Command: cmd("b1"), Template: "base",
		Source: &operatorv1.TemplateSource{Source: &operatorv1.TemplateSource_Tar{Tar: &operatorv1.TemplateTarSource{UploadDigest: up.GetDigest()}}},
	}
	res, err := c.templates.CreateTemplateRevision(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Msg.GetRevision(); r.GetRef().GetRevision() != "1" {
		t.Errorf("first revision %v", r)
	}
	first := waitBuilt(t, c, "base", "1")
	if first.GetState() != operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY || !first.GetIsDefault() || first.GetImageDigest() == "" {
		t.Fatalf("first revision after its build: %v", first)
	}
	// A replay answers the revision as it stands now; other input conflicts.
	replay, err := c.templates.CreateTemplateRevision(ctx, connect.NewRequest(req))
	if err != nil || replay.Msg.GetRevision().GetState() != operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY {
		t.Errorf("replay: %v %v", replay, err)
	}
	req.Revision = "other"
	if _, err := c.templates.CreateTemplateRevision(ctx, connect.NewRequest(req)); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("same command, other input: %v", err)
	}

	// An OCI image tarball with two layers; the second deletes a file of
	// the first with a whiteout.
	img := ociImage(t)
	archive := filepath.Join(t.TempDir(), "image.tar")
	tag, _ := name.NewTag("example.test/app:1")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	content := readFile(t, archive)
	up2, err := upload(t, c, "u3", digestOf(content), len(content), content)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.templates.CreateTemplateRevision(ctx, connect.NewRequest(&operatorv1.CreateTemplateRevisionRequest{
		Command: cmd("b2"), Template: "base", Revision: "oci", SetDefault: true,
		Source: &operatorv1.TemplateSource{Source: &operatorv1.TemplateSource_OciArchive{OciArchive: &operatorv1.TemplateOciArchiveSource{UploadDigest: up2.GetDigest(), Platform: "linux/amd64"}}},
	})); err != nil {
		t.Fatal(err)
	}
	oci := waitBuilt(t, c, "base", "oci")
	if oci.GetState() != operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY || !oci.GetIsDefault() {
		t.Fatalf("OCI revision: %v", oci)
	}
	if cfg := oci.GetConfig(); cfg.GetWorkingDir() != "/srv" || cfg.GetUser() != "app" || len(cfg.GetEnv()) != 1 || cfg.GetEnv()[0] != "GREETING=hi" {
		t.Errorf("image configuration: %v", cfg)
	}

	// Bad input changes nothing.
	for what, r := range map[string]*operatorv1.CreateTemplateRevisionRequest{
		"unknown template": {Command: cmd("b3"), Template: "nope", Source: req.GetSource()},
		"unknown upload":   {Command: cmd("b4"), Template: "base", Source: &operatorv1.TemplateSource{Source: &operatorv1.TemplateSource_Tar{Tar: &operatorv1.TemplateTarSource{UploadDigest: digestOf([]byte("x"))}}}},
	} {
		if _, err := c.templates.CreateTemplateRevision(ctx, connect.NewRequest(r)); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("%s: %v, want not_found", what, err)
		}
	}
	if _, err := c.templates.CreateTemplateRevision(ctx, connect.NewRequest(&operatorv1.CreateTemplateRevisionRequest{Command: cmd("b5"), Template: "base"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("no source: %v", err)
	}
	// The default cannot be deleted; another revision can.
	if _, err := c.templates.DeleteTemplateRevision(ctx, connect.NewRequest(&operatorv1.DeleteTemplateRevisionRequest{Command: cmd("d1"), Ref: &ctrlv1.TemplateRef{Template: "base", Revision: "oci"}})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("delete the default: %v", err)
	}
	del, err := c.templates.DeleteTemplateRevision(ctx, connect.NewRequest(&operatorv1.DeleteTemplateRevisionRequest{Command: cmd("d2"), Ref: &ctrlv1.TemplateRef{Template: "base", Revision: "1"}}))
	if err != nil || del.Msg.GetRevision().GetState() != operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_DELETED {
		t.Errorf("delete revision 1: %v %v", del, err)
	}
	tm, err := c.templates.GetTemplate(ctx, connect.NewRequest(&operatorv1.GetTemplateRequest{Template: "base"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := tm.Msg.GetTemplate(); got.GetRevisionCount() != 1 || got.GetDefaultRevision() != "oci" || got.GetVersion() != 3 || !got.GetDeploymentDefault() {
		t.Errorf("template after two builds and a delete: %v", got)
	}
	if _, err := c.templates.SetDefaultTemplateRevision(ctx, connect.NewRequest(&operatorv1.SetDefaultTemplateRevisionRequest{
		Command: cmd("s1"), Ref: &ctrlv1.TemplateRef{Template: "base", Revision: "oci"}, ExpectedVersion: 1,
	})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("stale expected_version: %v", err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := osReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ociImage(t *testing.T) v1.Image {
	t.Helper()
	layer := func(files map[string]string) v1.Layer {
		b := tarOf(t, files)
		l, err := tarball.LayerFromOpener(func() (rc ioReadCloser, err error) { return nopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	img, err := mutate.AppendLayers(empty.Image,
		layer(map[string]string{"srv/": "", "srv/keep": "k\n", "srv/gone": "g\n"}),
		layer(map[string]string{"srv/.wh.gone": ""}))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: time.Unix(0, 0)}
	cf.Config.Env, cf.Config.WorkingDir, cf.Config.User = []string{"GREETING=hi"}, "/srv", "app"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
