package cli_test

import (
	"archive/tar"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"google.golang.org/protobuf/encoding/protojson"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/testenv"
)

func revisionOf(t *testing.T, out string) *operatorv1.TemplateRevision {
	t.Helper()
	r := &operatorv1.TemplateRevision{}
	if err := protojson.Unmarshal([]byte(out), r); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	return r
}

// template build from a directory, a tar and an OCI layout: uploaded, built
// by ctrl, followed to READY with progress on stderr.
func TestTemplateBuildFromADirectoryATarAndAnOCILayout(t *testing.T) {
	c := testenv.New(t)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "motd"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := kibotos(t, c, "template", "build", "tools", "--from", root, "-o", "json")
	if code != 0 {
		t.Fatalf("build from a directory: exit %d\n%s", code, errOut)
	}
	if r := revisionOf(t, out); r.GetState() != operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY || r.GetSource().GetTar() == nil || !r.GetIsDefault() {
		t.Errorf("revision %v", r)
	}
	for _, want := range []string{"source: upload 100%", "build tools/1: DONE"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("progress lacks %q:\n%s", want, errOut)
		}
	}

	archive := filepath.Join(t.TempDir(), "root.tar")
	writeTar(t, archive, map[string]string{"etc/motd": "from a tar\n"})
	code, out, errOut = kibotos(t, c, "template", "build", "tools", "--from", archive, "--revision", "tar", "--set-default", "-o", "json")
	if r := revisionOf(t, out); code != 0 || r.GetRef().GetRevision() != "tar" || !r.GetIsDefault() {
		t.Errorf("build from a tar: exit %d, %v\n%s", code, r, errOut)
	}

	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config.WorkingDir = "linux", "amd64", "/work"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"})); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = kibotos(t, c, "template", "build", "app", "--from", dir, "--platform", "linux/amd64", "-o", "json")
	r := revisionOf(t, out)
	if code != 0 || r.GetSource().GetOciArchive() == nil || r.GetConfig().GetWorkingDir() != "/work" || r.GetArchitecture() != "amd64" {
		t.Errorf("build from an OCI layout: exit %d, %v\n%s", code, r, errOut)
	}

	code, out, _ = kibotos(t, c, "template", "list")
	if code != 0 || !strings.Contains(out, "TEMPLATE") || !strings.Contains(out, "tools") || !strings.Contains(out, "app") {
		t.Errorf("template list: exit %d\n%s", code, out)
	}
	code, out, _ = kibotos(t, c, "template", "get", "tools")
	if code != 0 || strings.Index(out, "tar") > strings.Index(out, " 1 ") {
		t.Errorf("template get (newest first): exit %d\n%s", code, out)
	}
	// -q: each revision as --template and template delete name it.
	if code, out, _ = kibotos(t, c, "template", "get", "tools", "-q"); code != 0 || !strings.HasPrefix(out, "tools@") || strings.Count(out, "tools@") != strings.Count(out, "\n") {
		t.Errorf("template get -q: exit %d\n%s", code, out)
	}
	if code, _, errOut = kibotos(t, c, "template", "get", "nope"); code == 0 || !strings.Contains(errOut, "not_found") {
		t.Errorf("template get of an unknown template: exit %d, %s", code, errOut)
	}
}

func writeTar(t *testing.T, path string, files map[string]string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// platform build from Debian's kernel package: built here, uploaded, the
// key made, the first Launch its default; a second build of the same
// content uploads nothing again and adds revision 2.
func TestPlatformBuildUploadsAndAddsALaunch(t *testing.T) {
	deb, err := platform.DownloadDebianKernel(context.Background(), testenv.CacheDir(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	guest := filepath.Join(t.TempDir(), "kibotos-guest")
	build := exec.Command("go", "build", "-o", guest, "github.com/kibotos/kibotos/cmd/kibotos-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build kibotos-guest: %v\n%s", err, out)
	}
	c := testenv.New(t)
	args := []string{"platform", "build", "--key", "main", "--deb", deb, "--guest", guest, "--cache", t.TempDir(), "-o", "json"}
	code, out, errOut := kibotos(t, c, args...)
	if code != 0 {
		t.Fatalf("platform build: exit %d\n%s", code, errOut)
	}
	l := &operatorv1.Launch{}
	if err := protojson.Unmarshal([]byte(out), l); err != nil || l.GetRevision() != 1 || !l.GetIsDefault() || l.GetSpec().GetKernel().GetSizeBytes() == 0 {
		t.Errorf("launch %v (%v)", l, err)
	}
	if !strings.Contains(errOut, "vmlinux: upload 100%") || !strings.Contains(errOut, "initramfs.cpio.gz uploaded") {
		t.Errorf("progress:\n%s", errOut)
	}
	code, out, errOut = kibotos(t, c, args...)
	if err := protojson.Unmarshal([]byte(out), l); code != 0 || err != nil || l.GetRevision() != 2 || l.GetIsDefault() {
		t.Errorf("second build: exit %d, %v\n%s", code, l, errOut)
	}
	code, out, _ = kibotos(t, c, "platform", "list")
	if code != 0 || !strings.Contains(out, "main") || !strings.Contains(out, "true") {
		t.Errorf("platform list: exit %d\n%s", code, out)
	}
	code, out, _ = kibotos(t, c, "platform", "get", "main")
	if code != 0 || strings.Count(out, "launch-") != 2 {
		t.Errorf("platform get: exit %d\n%s", code, out)
	}
}

// template delivery prints one row per admitted node and the count of
// READY ones; -o json is the API's answer; --node reads one node; the
// API's refusals are errors.
func TestTemplateDeliveryCommand(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	c.StartNode(t, "node-a", "", "")
	c.StartNode(t, "node-b", "", "")
	c.UnbootableCatalog(t)

	code, out, errOut := kibotos(t, c, "template", "delivery", "busybox")
	if code != 0 || !strings.Contains(out, "DELIVERED/TOTAL") || strings.Count(out, "NOT_READY  -") != 2 || !strings.Contains(out, "0 of 2 admitted nodes READY") {
		t.Errorf("template delivery: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotos(t, c, "template", "delivery", "busybox", "--node", "node-b", "-o", "json")
	res := &operatorv1.GetTemplateDeliveryResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), res) != nil || len(res.GetDeliveries()) != 1 || res.GetDeliveries()[0].GetNodeId() != "node-b" ||
		res.GetRef().GetTemplate() != "busybox" || res.GetRef().GetRevision() == "" || res.GetNotReadyNodeCount() != 2 {
		t.Errorf("template delivery --node node-b -o json: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{"busybox@nope"}, {"busybox", "--node", "node-never"}} {
		if code, _, errOut := kibotos(t, c, append([]string{"template", "delivery"}, args...)...); code == 0 || !strings.Contains(errOut, "not_found") {
			t.Errorf("template delivery %v: exit %d, %s", args, code, errOut)
		}
	}
}
