package catalog_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
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
	"github.com/kibotos/kibotos/internal/template"
	"github.com/kibotos/kibotos/internal/testenv"
)

// vmWait bounds what waits for a VM to boot under TCG on a loaded machine.
const vmWait = 4 * time.Minute

// A Workspace boots from a Template ctrl built from an OCI image tarball:
// the image's layers are its root, whiteouts applied, and the platform
// went in through UploadPlatformArtifact and CreateLaunch.
func TestAWorkspaceBootsFromAnOCIBuiltTemplate(t *testing.T) {
	ctx := context.Background()
	art := testenv.BuildVMArtifacts(t)
	cluster := testenv.New(t)
	c := clientsOf(cluster)
	kernel := uploadFile(t, c, "kernel", art.Kernel())
	initramfs := uploadFile(t, c, "initramfs", art.Initrd())
	if _, err := c.platforms.CreatePlatformKey(ctx, connect.NewRequest(&operatorv1.CreatePlatformKeyRequest{Command: cmd("key"), PlatformKey: "default"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.platforms.CreateLaunch(ctx, connect.NewRequest(&operatorv1.CreateLaunchRequest{Command: cmd("launch"), PlatformKey: "default", Spec: launchSpec(kernel, initramfs)})); err != nil {
		t.Fatal(err)
	}

	archive := filepath.Join(t.TempDir(), "image.tar")
	tag, _ := name.NewTag("example.test/busybox:oci")
	if err := tarball.WriteToFile(archive, tag, busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	up, err := upload(t, c, "source", digestOf(content), len(content), content)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.templates.CreateTemplate(ctx, connect.NewRequest(&operatorv1.CreateTemplateRequest{Command: cmd("template"), Template: "oci"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.templates.CreateTemplateRevision(ctx, connect.NewRequest(&operatorv1.CreateTemplateRevisionRequest{
		Command: cmd("build"), Template: "oci",
		Source: &operatorv1.TemplateSource{Source: &operatorv1.TemplateSource_OciArchive{OciArchive: &operatorv1.TemplateOciArchiveSource{UploadDigest: up.GetDigest()}}},
	})); err != nil {
		t.Fatal(err)
	}
	if r := waitBuilt(t, c, "oci", "1"); r.GetState() != operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY {
		t.Fatalf("build: %v", r)
	}

	cluster.StartNode(t, "node-a", "", "")
	created, err := cluster.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: cmd("create"),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Template:  &ctrlv1.TemplateSelector{Template: "oci"},
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 << 20, WritableLayerCapacityBytes: 256 << 20},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	t.Cleanup(func() { deleteWorkspace(t, cluster, id) }) // before the node stops
	waitAvailable(t, cluster, id)

	if out, code := cluster.Exec(t, id, "cat", "/etc/greeting"); code != 0 || out != "from the second layer\n" {
		t.Errorf("/etc/greeting: %q, exit %d", out, code)
	}
	if _, code := cluster.Exec(t, id, "test", "-e", "/etc/hostname"); code == 0 {
		t.Error("/etc/hostname, whited out by the second layer, exists in the Workspace")
	}
}

// uploadFile uploads a platform artifact in chunks.
func uploadFile(t *testing.T, c clients, id, path string) *operatorv1.PlatformArtifact {
	t.Helper()
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := c.platforms.UploadPlatformArtifact(context.Background())
	if err := s.Send(&operatorv1.UploadPlatformArtifactRequest{Part: &operatorv1.UploadPlatformArtifactRequest_Header{Header: &operatorv1.PlatformArtifactUploadHeader{
		Command: cmd(id), Digest: digestOf(content), SizeBytes: uint64(len(content)),
	}}}); err != nil {
		t.Fatal(err)
	}
	for len(content) > 0 {
		n := min(len(content), 1<<20)
		if s.Send(&operatorv1.UploadPlatformArtifactRequest{Part: &operatorv1.UploadPlatformArtifactRequest_Chunk{Chunk: content[:n]}}) != nil {
			break
		}
		content = content[n:]
	}
	res, err := s.CloseAndReceive()
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetArtifact()
}

// busyboxImage is a busybox root in one layer; a second adds
// /etc/greeting and removes /etc/hostname with a whiteout.
func busyboxImage(t *testing.T) v1.Image {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	if err := template.BusyboxDir(busyboxBinary(), root); err != nil {
		t.Fatal(err)
	}
	base := dirTar(t, root)
	top := tarOf(t, map[string]string{"etc/greeting": "from the second layer\n", "etc/.wh.hostname": ""})
	var layers []v1.Layer
	for _, b := range [][]byte{base, top} {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

func busyboxBinary() string {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "busybox"
}

// dirTar is a tar of dir's content, symbolic links included.
func dirTar(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		rel, _ := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		link, _ := os.Readlink(path)
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = rel
		if err := tw.WriteHeader(h); err != nil || !info.Mode().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil {
			_, err = tw.Write(b)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func workspaceOf(t *testing.T, c *testenv.Cluster, id string) *ctrlv1.Workspace {
	t.Helper()
	res, err := c.Workspaces.GetWorkspace(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetWorkspace()
}

func waitAvailable(t *testing.T, c *testenv.Cluster, id string) {
	t.Helper()
	deadline := time.Now().Add(vmWait)
	for {
		w := workspaceOf(t, c, id)
		switch w.GetState() {
		case ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE:
			return
		case ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED:
			t.Fatalf("workspace failed: %v", w.GetFailure())
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspace %s is %v after %v", id, w.GetState(), vmWait)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func deleteWorkspace(t *testing.T, c *testenv.Cluster, id string) {
	if _, err := c.Workspaces.DeleteWorkspace(context.Background(), connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: cmd("delete"), WorkspaceId: id})); err != nil {
		t.Errorf("delete %s: %v", id, err)
		return
	}
	deadline := time.Now().Add(vmWait)
	for workspaceOf(t, c, id).GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED {
		if time.Now().After(deadline) {
			t.Errorf("workspace %s not deleted after %v", id, vmWait)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
