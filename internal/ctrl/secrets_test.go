package ctrl_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/node/state"
	"github.com/kibotos/kibotos/internal/testenv"
)

// Secrets at rest (docs/RELIABILITY.md): after a start with a node
// enrolled, every file of ctrl's state that holds a secret, and the node's
// credential file, is readable by its owner only, and the database holds
// no plaintext of a secret ctrl only checks: the API keys, an enrollment
// grant's secret, a node's credential.
func TestSecretsAtRestArePrivateAndHashed(t *testing.T) {
	old := syscall.Umask(0o022) // the usual one, which lets 0644 through
	defer syscall.Umask(old)
	dir := t.TempDir()
	c := testenv.New(t, func(cfg *ctrl.Config) { cfg.StateDir = dir })
	n := c.StartNode(t, "node-a", "", "")
	grant := c.Grant(t, "node-b") // one not used yet
	var id state.Identity
	b, err := os.ReadFile(filepath.Join(n.StateDir, "node.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &id); err != nil || id.Credential == "" {
		t.Fatalf("node.json: %s %v", b, err)
	}

	for _, f := range []string{"ctrl.db", "ctrl.db-wal", "ctrl.db-shm", "api-keys.json", "endpoints.env"} {
		checkMode(t, filepath.Join(dir, f), 0o600)
	}
	checkMode(t, filepath.Join(n.StateDir, "node.json"), 0o600)

	var db []byte
	for _, f := range []string{"ctrl.db", "ctrl.db-wal"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		db = append(db, b...)
	}
	for name, secret := range map[string]string{
		"the workspace API key": c.Ctrl.Client.Token, "the operator API key": c.Ctrl.Client.OperatorToken,
		"a grant secret": grant, "the node's credential": id.Credential,
	} {
		if bytes.Contains(db, []byte(secret)) {
			t.Errorf("the database holds %s in plaintext", name)
		}
	}
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	if got := st.Mode().Perm(); got != want {
		t.Errorf("%s is %#o, want %#o", path, got, want)
	}
}

// State an earlier version left readable by others is made private at the
// next start.
func TestLooseStateFilesAreMadePrivateAtStart(t *testing.T) {
	dir := t.TempDir()
	start(t, dir).Close()
	files := []string{"ctrl.db", "api-keys.json", "endpoints.env"}
	for _, f := range files {
		if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv := start(t, dir)
	defer srv.Close()
	for _, f := range files {
		checkMode(t, filepath.Join(dir, f), 0o600)
	}
}
