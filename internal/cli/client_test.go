package cli_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/cli"
)

// A client command with no endpoint configured says which file it read
// and each way to give it one: dev writes the file, a standalone ctrl's
// endpoints.env can be copied there or named by KIBOTOS_CONFIG, or the
// variables set.
func TestAMissingEndpointSaysWhereItLooked(t *testing.T) {
	home := t.TempDir()
	t.Setenv("KIBOTOS_HOME", home)
	for _, k := range []string{"KIBOTOS_WORKSPACE_ENDPOINT", "KIBOTOS_OPERATOR_ENDPOINT", "KIBOTOS_TOKEN", "KIBOTOS_OPERATOR_TOKEN"} {
		t.Setenv(k, "")
	}
	t.Setenv("KIBOTOS_CONFIG", filepath.Join(home, "client.env"))
	for args, want := range map[string][]string{
		"node list":      {"no operator endpoint in " + filepath.Join(home, "client.env"), "KIBOTOS_OPERATOR_ENDPOINT and KIBOTOS_OPERATOR_TOKEN"},
		"workspace list": {"no workspace endpoint in " + filepath.Join(home, "client.env"), "KIBOTOS_WORKSPACE_ENDPOINT and KIBOTOS_TOKEN"},
	} {
		var stdout, stderr strings.Builder
		code := cli.Main(context.Background(), strings.Fields(args), &stdout, &stderr)
		for _, w := range append(want, "`kibotos dev`", "endpoints.env", "KIBOTOS_CONFIG") {
			if code != 1 || !strings.Contains(stderr.String(), w) {
				t.Errorf("kibotos %s without an endpoint: exit %d, want it to say %q:\n%s", args, code, w, stderr.String())
			}
		}
	}
}

// A client command whose endpoint nothing listens on says so and asks
// whether ctrl runs, below the unavailable error.
func TestAnEndpointNothingListensOnAsksWhetherCtrlRuns(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	l.Close()
	t.Setenv("KIBOTOS_HOME", t.TempDir())
	t.Setenv("KIBOTOS_CONFIG", "")
	t.Setenv("KIBOTOS_WORKSPACE_ENDPOINT", endpoint)
	t.Setenv("KIBOTOS_TOKEN", "kbt_x")
	var stdout, stderr strings.Builder
	code := cli.Main(context.Background(), []string{"workspace", "list"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "unavailable: ") || !strings.Contains(stderr.String(), "\n  nothing listens there: is ctrl (`kibotos dev` or `kibotos ctrl`) running") {
		t.Errorf("workspace list against %s: exit %d\n%s", endpoint, code, stderr.String())
	}
}
