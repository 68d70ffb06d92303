package cli_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/cli"
	"github.com/kibotos/kibotos/internal/clientconfig"
)

// An unknown scope is refused before anything is sent, naming the ones
// there are.
func TestSessionIssueRefusesAnUnknownScope(t *testing.T) {
	t.Setenv(clientconfig.EnvConfig, filepath.Join(t.TempDir(), "none.env"))
	t.Setenv(clientconfig.EnvWorkspaceEndpoint, "http://127.0.0.1:1")
	t.Setenv(clientconfig.EnvToken, "token")
	var stdout, stderr strings.Builder
	code := cli.Main(context.Background(), []string{"workspace", "session", "issue", "ws-1", "--scope", "file,shell"}, &stdout, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), `scope "shell": want process, file, desktop, service or metrics`) {
		t.Errorf("issue --scope file,shell: exit %d, %q", code, stderr.String())
	}
}
