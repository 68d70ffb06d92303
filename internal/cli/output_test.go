package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"google.golang.org/protobuf/encoding/protojson"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/cli"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/testenv"
)

// kibotosAll is kibotos with the Workspace endpoint configured too.
func kibotosAll(t *testing.T, c *testenv.Cluster, args ...string) (int, string, string) {
	t.Helper()
	useWorkspace(t, c)
	return kibotos(t, c, args...)
}

// useWorkspace points the client configuration's Workspace endpoint at c.
func useWorkspace(t *testing.T, c *testenv.Cluster) {
	t.Setenv(clientconfig.EnvWorkspaceEndpoint, c.Ctrl.Client.WorkspaceEndpoint)
	t.Setenv(clientconfig.EnvToken, c.Ctrl.Client.Token)
}

// A mistyped subcommand fails, names the word, what was likely meant when
// something is near, and where the usage is, and exits non-zero: under a
// command group, the root, and node (which runs the agent without one).
// A group alone shows its help.
func TestMistypedSubcommandFailsWithASuggestion(t *testing.T) {
	for _, tc := range []struct {
		args        []string
		under, want string // the command the word is under; the suggestion, "" for none
	}{
		{[]string{"workspace", "lsit"}, "kibotos workspace", "list"},
		{[]string{"volume", "creat"}, "kibotos volume", "create"},
		{[]string{"workspace", "process", "kil"}, "kibotos workspace process", "kill"},
		{[]string{"template", "delet"}, "kibotos template", "delete"},
		{[]string{"workspce"}, "kibotos", "workspace"},
		{[]string{"lisst"}, "kibotos", ""},
		{[]string{"node", "lisst"}, "kibotos node", "list"},
		{[]string{"node", "drian", "node-a"}, "kibotos node", "drain"},
	} {
		var stdout, stderr strings.Builder
		code := cli.Main(context.Background(), tc.args, &stdout, &stderr)
		word := tc.args[strings.Count(tc.under, " ")]
		said, suggestion := stderr.String(), ""
		if tc.want != "" {
			suggestion = "Did you mean this?\n\t" + tc.want
		}
		if code == 0 || !strings.Contains(said, `unknown command "`+word+`" for "`+tc.under+`"`) ||
			strings.Contains(said, "Did you mean") != (tc.want != "") || !strings.Contains(said, suggestion) ||
			!strings.Contains(said, "Run '"+tc.under+" --help' for usage") {
			t.Errorf("kibotos %v: exit %d\n%s", tc.args, code, said)
		}
	}
	for _, group := range []string{"workspace", ""} {
		var stdout, stderr strings.Builder
		if code := cli.Main(context.Background(), strings.Fields(group), &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "[command]") {
			t.Errorf("kibotos %s: exit %d\n%s%s", group, code, stdout.String(), stderr.String())
		}
	}
}

// A command given too few or too many arguments says which it takes (its
// usage line), not only how many it got.
func TestWrongArgumentsShowTheUsageLine(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage string
	}{
		{[]string{"workspace", "get"}, "usage: kibotos workspace get WORKSPACE_ID [flags]"},
		{[]string{"pool", "move-volume", "vol-1", "fast"}, "usage: kibotos pool move-volume VOLUME_ID --to POOL [flags]"},
		{[]string{"node", "drain"}, "usage: kibotos node drain NODE_ID [flags]"},
		{[]string{"workspace", "list", "extra"}, "usage: kibotos workspace list [flags]"},
	} {
		var stdout, stderr strings.Builder
		code := cli.Main(context.Background(), tc.args, &stdout, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), tc.usage) {
			t.Errorf("kibotos %v: exit %d\n%s", tc.args, code, stderr.String())
		}
	}
}

// A guest command's flag given without -- is refused as the CLI's own,
// and the error says where it goes, before anything is sent.
func TestAGuestCommandsFlagsWithoutDashSayWhereTheyGo(t *testing.T) {
	for _, args := range [][]string{
		{"workspace", "exec", "ws-1", "ls", "-la"},
		{"workspace", "process", "start", "ws-1", "ls", "-la"},
	} {
		var stdout, stderr strings.Builder
		code := cli.Main(context.Background(), args, &stdout, &stderr)
		path := "kibotos " + strings.Join(args[:len(args)-3], " ")
		if code == 0 || !strings.Contains(stderr.String(), "unknown shorthand flag: 'l' in -la") ||
			!strings.Contains(stderr.String(), "go after --: "+path+" WORKSPACE_ID -- ARGV...") {
			t.Errorf("kibotos %v: exit %d\n%s", args, code, stderr.String())
		}
	}
}

// -o json|yaml|name, -q and --no-headers over one Volume; volume resize
// with units; an API refusal shows its ErrorDetail.
func TestOutputFormatsAndVolumeResize(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	c.StartNode(t, "node-a", "", "")
	c.EnsureCapacity(t, "default", 1<<40)

	// --size is --capacity, as the SDKs name it.
	code, out, errOut := kibotosAll(t, c, "volume", "create", "--size", "64Mi", "--label", "made=cli", "--annotation", "by=test", "-o", "json")
	created := &ctrlv1.CreateVolumeResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), created) != nil || created.GetVolume().GetSpec().GetCapacityBytes() != 64<<20 ||
		created.GetVolume().GetLabels()["made"] != "cli" || created.GetVolume().GetAnnotations()["by"] != "test" {
		t.Fatalf("volume create --size 64Mi --label made=cli --annotation by=test -o json: exit %d\n%s%s", code, out, errOut)
	}
	// -o json is spaced as encoding/json spaces it, the same from every
	// build (protojson's own spacing varies from one binary to the next).
	var respaced bytes.Buffer
	if err := json.Indent(&respaced, []byte(out), "", "  "); err != nil || respaced.String() != out {
		t.Errorf("volume create -o json is not spaced as json.Indent spaces it:\n%s", out)
	}
	id := created.GetVolume().GetVolumeId()
	testenv.WaitFor(t, "the Volume AVAILABLE", func() bool {
		_, out, _ := kibotosAll(t, c, "volume", "get", id, "-o", "json")
		got := &ctrlv1.GetVolumeResponse{}
		return protojson.Unmarshal([]byte(out), got) == nil && got.GetVolume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
	})
	if _, out, _ := kibotosAll(t, c, "volume", "list", "-o", "yaml"); !strings.Contains(out, "volumes:\n  - volumeId: "+id+"\n") || !strings.Contains(out, `capacityBytes: "67108864"`) {
		t.Errorf("volume list -o yaml:\n%s", out)
	}
	if _, out, _ := kibotosAll(t, c, "volume", "list", "-o", "name"); out != "volume/"+id+"\n" {
		t.Errorf("volume list -o name: %q", out)
	}
	if _, out, _ := kibotosAll(t, c, "volume", "list", "-q"); out != id+"\n" {
		t.Errorf("volume list -q: %q", out)
	}
	// An unbound Volume's WORKSPACE is "-", not an empty cell: every line
	// has the header's five words.
	if _, out, _ := kibotosAll(t, c, "volume", "list", "--no-headers"); !strings.HasPrefix(out, id) || !strings.Contains(out, "64MiB") || len(strings.Fields(out)) != 5 {
		t.Errorf("volume list --no-headers: %q", out)
	}
	if _, out, _ := kibotosAll(t, c, "volume", "list"); !strings.HasPrefix(out, "VOLUME ") {
		t.Errorf("volume list: %q", out)
	}

	code, out, errOut = kibotosAll(t, c, "volume", "update", id, "--label", "team=a", "--annotation", "note=x", "-o", "json")
	updated := &ctrlv1.Volume{}
	if code != 0 || protojson.Unmarshal([]byte(out), updated) != nil || updated.GetLabels()["team"] != "a" || updated.GetAnnotations()["note"] != "x" {
		t.Errorf("volume update -o json: exit %d\n%s%s", code, out, errOut)
	}
	if _, out, _ := kibotosAll(t, c, "volume", "update", id, "--label", "team-", "-o", "json"); protojson.Unmarshal([]byte(out), updated) != nil || len(updated.GetLabels()) != 1 || updated.GetLabels()["made"] != "cli" {
		t.Errorf("volume update --label team-: %s", out)
	}

	code, out, errOut = kibotosAll(t, c, "volume", "resize", id, "1GiB", "-o", "json")
	resized := &ctrlv1.ResizeVolumeResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), resized) != nil || resized.GetVolume().GetSpec().GetCapacityBytes() != 1<<30 {
		t.Errorf("volume resize 1GiB -o json: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = kibotosAll(t, c, "volume", "resize", id, "32Mi")
	if code != 1 || !strings.Contains(errOut, "invalid_argument") || !strings.Contains(errOut, "\n  stage VALIDATING, reason INVALID_REQUEST") ||
		!strings.Contains(errOut, "\n  field: capacity_bytes") {
		t.Errorf("volume resize to less: exit %d\n%s", code, errOut)
	}
	if code, _, errOut = kibotosAll(t, c, "volume", "resize", id, "lots"); code != 1 || !strings.Contains(errOut, `size "lots"`) {
		t.Errorf("volume resize lots: exit %d\n%s", code, errOut)
	}
}

// template delete NAME@REV deletes a revision, NAME the Template; a
// --from that names nothing here is not pulled from a registry.
func TestTemplateDeleteAndAMissingFrom(t *testing.T) {
	c := testenv.New(t)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "motd"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The first Template is the deployment's default, which is kept.
	for _, ref := range [][2]string{{"base", "1"}, {"tools", "a"}, {"tools", "b"}} {
		if code, _, errOut := kibotos(t, c, "template", "build", ref[0], "--from", root, "--revision", ref[1], "--set-default"); code != 0 {
			t.Fatalf("build %v: exit %d\n%s", ref, code, errOut)
		}
	}
	code, out, errOut := kibotos(t, c, "template", "delete", "tools@a", "-o", "json")
	rev := &operatorv1.DeleteTemplateRevisionResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), rev) != nil || rev.GetRevision().GetDeletedAt() == nil {
		t.Errorf("template delete tools@a -o json: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotos(t, c, "template", "delete", "tools", "-o", "json")
	tmpl := &operatorv1.DeleteTemplateResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), tmpl) != nil || tmpl.GetTemplate().GetDeletedAt() == nil {
		t.Errorf("template delete tools -o json: exit %d\n%s%s", code, out, errOut)
	}

	missing := filepath.Join("no", "such-dir")
	code, _, errOut = kibotos(t, c, "template", "build", "other", "--from", missing)
	if code != 1 || !strings.Contains(errOut, "--from "+missing+": no such file or directory") || strings.Contains(errOut, "registry") && !strings.Contains(errOut, "an image reference") {
		t.Errorf("template build --from a missing path: exit %d\n%s", code, errOut)
	}
	if code, _, errOut = kibotos(t, c, "template", "build", "other", "--from", "rootfs.tar"); code != 1 || !strings.Contains(errOut, "no such file or directory") {
		t.Errorf("template build --from rootfs.tar (missing): exit %d\n%s", code, errOut)
	}
}

// An --from that is no file here and looks like an image reference (a
// registry host and a tag) is pulled by ctrl: here from a registry on
// loopback.
func TestTemplateBuildFromAnImageReferencePulls(t *testing.T) {
	c := testenv.New(t)
	reg := httptest.NewServer(registry.New())
	t.Cleanup(reg.Close)
	img, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimPrefix(reg.URL, "http://") + "/app:1"
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := kibotos(t, c, "template", "build", "app", "--from", ref, "-o", "json")
	if r := revisionOf(t, out); code != 0 || r.GetState() != operatorv1.TemplateRevisionState_TEMPLATE_REVISION_STATE_READY || r.GetSource().GetOciImage().GetReference() != ref {
		t.Errorf("template build --from %s: exit %d, %v\n%s", ref, code, r, errOut)
	}
	if !strings.Contains(errOut, ref+" is no file here: ctrl pulls it from its registry") {
		t.Errorf("build from a reference says:\n%s", errOut)
	}
}
