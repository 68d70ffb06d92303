package cli_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/cli"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/testenv"
)

// onFakeEndpoint points the CLI, for the rest of the test, at an
// in-memory Workspace endpoint serving what mount puts on its mux (the
// fakes of the CLI's unit tests), with no client configuration file.
func onFakeEndpoint(t *testing.T, mount func(*http.ServeMux)) {
	t.Helper()
	mux := http.NewServeMux()
	mount(mux)
	srv := testenv.H2CServer(t, mux)
	t.Setenv(clientconfig.EnvConfig, filepath.Join(t.TempDir(), "none.env"))
	t.Setenv(clientconfig.EnvWorkspaceEndpoint, srv.URL)
	t.Setenv(clientconfig.EnvToken, "token")
}

// runCLI runs the CLI with args and returns its exit code and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = cli.Main(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}
