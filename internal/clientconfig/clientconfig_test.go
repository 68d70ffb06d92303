package clientconfig_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kibotos/kibotos/internal/clientconfig"
)

func TestWriteLoadRoundTripAndEnvironmentWins(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.env")
	want := clientconfig.Config{
		WorkspaceEndpoint: "http://127.0.0.1:7670",
		OperatorEndpoint:  "http://127.0.0.1:7671",
		Token:             "kbt_a'b c",
		OperatorToken:     "kbt_op",
	}
	if err := clientconfig.Write(path, want); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, err %v: credentials must be owner-only", fi.Mode(), err)
	}
	for _, k := range []string{clientconfig.EnvWorkspaceEndpoint, clientconfig.EnvOperatorEndpoint, clientconfig.EnvToken, clientconfig.EnvOperatorToken} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	got, err := clientconfig.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("Load = %+v, want %+v", got, want)
	}

	t.Setenv(clientconfig.EnvToken, "from-env")
	got, err = clientconfig.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Token != "from-env" || got.OperatorToken != want.OperatorToken {
		t.Errorf("environment did not win: %+v", got)
	}
}

func TestMissingFileIsEmptyAndBadLineIsAnError(t *testing.T) {
	dir := t.TempDir()
	for _, k := range []string{clientconfig.EnvWorkspaceEndpoint, clientconfig.EnvOperatorEndpoint, clientconfig.EnvToken, clientconfig.EnvOperatorToken} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	if got, err := clientconfig.Load(filepath.Join(dir, "none.env")); err != nil || got != (clientconfig.Config{}) {
		t.Errorf("missing file: %+v, %v", got, err)
	}
	bad := filepath.Join(dir, "bad.env")
	if err := os.WriteFile(bad, []byte("# ok\nNOT A PAIR\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := clientconfig.Load(bad); err == nil {
		t.Error("a line without = was accepted")
	}
}

func TestHomeDefaultsUnderTheUsersHome(t *testing.T) {
	t.Setenv(clientconfig.EnvHome, "")
	t.Setenv(clientconfig.EnvConfig, "")
	t.Setenv("HOME", "/home/someone")
	if p, err := clientconfig.DefaultPath(); err != nil || p != "/home/someone/.kibotos/config.env" {
		t.Errorf("DefaultPath = %q, %v", p, err)
	}
	t.Setenv(clientconfig.EnvHome, "/srv/k")
	if p, _ := clientconfig.DefaultPath(); p != "/srv/k/config.env" {
		t.Errorf("with KIBOTOS_HOME: %q", p)
	}
}
