package cli_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/cli"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/testenv"
)

// asKibotos makes this test binary the kibotos command when a test runs
// it under that name through a shell (see kibotosOnPath).
const asKibotos = "KIBOTOS_CLI_TEST_AS_KIBOTOS"

func TestMain(m *testing.M) {
	if os.Getenv(asKibotos) != "" {
		os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// __complete, the command the shells' completion scripts call, offers the
// ids of the objects ctrl lists at each position and flag that takes one,
// filtered by what was typed, and never files there.
func TestCompletionOffersIDsFromTheAPI(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	c.StartNodeWithPools(t, "node-a", "", node.Pool{Name: "pool-a", Dir: t.TempDir(), Default: true})
	c.EnsureCapacity(t, "pool-a", testenv.DefaultPoolCapacity)
	c.EnsureTemplate(t)
	ctx := context.Background()
	// a create is admitted and waits for a platform: no VM
	wsID := c.CreateSmall(t, "complete-ws").Msg.GetWorkspace().GetWorkspaceId()
	vol, err := c.Volumes.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "complete-vol"}, Spec: &ctrlv1.VolumeSpec{CapacityBytes: 64 << 20},
	}))
	if err != nil {
		t.Fatal(err)
	}
	volID := vol.Msg.GetVolume().GetVolumeId()

	for _, tc := range []struct {
		args []string
		want []string // ids offered, exactly
	}{
		{[]string{"workspace", "get", ""}, []string{wsID}},
		{[]string{"workspace", "get", wsID[:5]}, []string{wsID}},
		{[]string{"workspace", "get", "zz"}, nil},
		{[]string{"workspace", "exec", ""}, []string{wsID}},
		{[]string{"workspace", "process", "get", ""}, []string{wsID}},
		{[]string{"workspace", "process", "get", wsID, ""}, nil}, // PROCESS_ID: not listed
		{[]string{"workspace", "get", wsID, ""}, nil},            // one argument only
		{[]string{"workspace", "create", "--volume", ""}, []string{volID}},
		{[]string{"volume", "resize", ""}, []string{volID}},
		{[]string{"volume", "create", "--pool", ""}, []string{"pool-a"}},
		{[]string{"node", "drain", ""}, []string{"node-a"}},
		{[]string{"overcommit", "get", "node-"}, []string{"node-a"}},
		{[]string{"template", "delivery", "busybox", "--node", ""}, []string{"node-a"}},
		{[]string{"pool", "get", ""}, []string{"pool-a"}},
		{[]string{"pool", "set-capacity", "pool-a", ""}, nil}, // SIZE
		{[]string{"pool", "move-volume", volID, "--to", ""}, []string{"pool-a"}},
		{[]string{"pool", "objects", "--workspace", ""}, []string{wsID}},
	} {
		ids, directive, errOut := complete(t, c, tc.args...)
		if !slices.Equal(ids, tc.want) || directive != ":4" || errOut != "" {
			t.Errorf("complete %q: %q, directive %s (want %q, :4 NoFileComp); stderr %q", tc.args, ids, directive, tc.want, errOut)
		}
	}
	// The client nouns' other positions and the process commands keep
	// the shell's default (files): cp takes local paths, node --pool a DIR.
	for _, args := range [][]string{{"workspace", "cp", ""}, {"node", "--pool", ""}} {
		if ids, directive, _ := complete(t, c, args...); len(ids) != 0 || directive != ":0" {
			t.Errorf("complete %q: %q, directive %s; want nothing and the default", args, ids, directive)
		}
	}
}

// A completion that cannot reach ctrl, or whose ctrl does not answer in
// time, offers nothing and prints no error where the shell would show it.
func TestCompletionFailsQuietly(t *testing.T) {
	// The hung ctrl answers nothing until the test ends (Close waits for
	// its handlers: stop is closed first).
	stop := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-stop }))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(stop) })
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	for _, endpoint := range []string{closed.URL, hung.URL} {
		t.Setenv(clientconfig.EnvConfig, filepath.Join(t.TempDir(), "none.env"))
		t.Setenv(clientconfig.EnvWorkspaceEndpoint, endpoint)
		t.Setenv(clientconfig.EnvToken, "kbt_x")
		var stdout, stderr strings.Builder
		code := cli.Main(context.Background(), []string{"__complete", "workspace", "get", ""}, &stdout, &stderr)
		if code != 0 || stdout.String() != ":4\n" || strings.Contains(stderr.String(), "kibotos:") {
			t.Errorf("ctrl at %s: exit %d, stdout %q, stderr %q; want only the NoFileComp directive", endpoint, code, stdout.String(), stderr.String())
		}
	}
}

// `kibotos completion bash` loads in bash and registers kibotos's
// completion; TAB after `kibotos workspace get` then offers the Workspace
// ids, through the script calling kibotos (this test binary, by that
// name) against a real ctrl. zsh and fish get their scripts too.
func TestCompletionScripts(t *testing.T) {
	c := testenv.New(t)
	c.EnsureTemplate(t)
	wsID := c.CreateSmall(t, "complete-bash").Msg.GetWorkspace().GetWorkspaceId()
	path := kibotosOnPath(t, c)
	load := exec.Command("bash", "-c", "source <(kibotos completion bash) && complete -p kibotos")
	load.Env = append(os.Environ(), "PATH="+path)
	if out, err := load.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "complete -o default -F __start_kibotos kibotos" {
		t.Errorf("the bash script does not load: %v\n%s", err, out)
	}

	// The script builds on bash-completion, as an interactive shell with
	// completion enabled has it loaded (scripts/test.sh installs it).
	const bashCompletion = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(bashCompletion); err != nil {
		t.Fatalf("Debian's bash-completion is not installed (scripts/test.sh installs it): %v", err)
	}
	const tab = `source ` + bashCompletion + ` && source <(kibotos completion bash) && complete -p kibotos &&
COMP_WORDS=(kibotos workspace get ""); COMP_CWORD=3; COMP_LINE="kibotos workspace get "; COMP_POINT=${#COMP_LINE}
__start_kibotos kibotos "" get && printf 'offered %s\n' "${COMPREPLY[@]}"`
	bash := exec.Command("bash", "-c", tab)
	bash.Env = append(os.Environ(), "PATH="+path)
	out, err := bash.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "complete -o default -F __start_kibotos kibotos") ||
		!strings.Contains(string(out), "offered "+wsID) {
		t.Errorf("bash: %v\n%s", err, out)
	}

	for _, shell := range []string{"zsh", "fish"} {
		var stdout, stderr strings.Builder
		if code := cli.Main(context.Background(), []string{"completion", shell}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "__complete") {
			t.Errorf("completion %s: exit %d, %d bytes of script, %s", shell, code, stdout.Len(), stderr.String())
		}
	}
}

// complete runs `kibotos __complete ARGS...` against c and returns the
// ids it offers (without their descriptions), its directive line, and
// what it printed on stderr besides cobra's note of the directive.
func complete(t *testing.T, c *testenv.Cluster, args ...string) (ids []string, directive, errOut string) {
	t.Helper()
	code, stdout, stderr := kibotosAll(t, c, append([]string{"__complete"}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %q: exit %d: %s", args, code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	directive = lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		id, _, _ := strings.Cut(l, "\t")
		ids = append(ids, id)
	}
	note := regexp.MustCompile(`(?m)^Completion ended with directive: \w+\n?`)
	return ids, directive, note.ReplaceAllString(stderr, "")
}

// kibotosOnPath is a PATH whose kibotos is this test binary acting as the
// CLI (TestMain), configured for c.
func kibotosOnPath(t *testing.T, c *testenv.Cluster) string {
	t.Helper()
	useOperator(t, c)
	useWorkspace(t, c)
	t.Setenv(asKibotos, "1")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, "kibotos")); err != nil {
		t.Fatal(err)
	}
	return dir + string(os.PathListSeparator) + os.Getenv("PATH")
}
