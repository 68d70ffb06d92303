// Package clientconfig is how every Kibotos client finds the system: the
// endpoints and credentials `kibotos dev` (or `kibotos ctrl`) wrote, overridden
// by the same variables in the environment.
//
// The file format is a small subset of shell env files: KEY=VALUE lines,
// blank lines and # comments, values optionally in single or double quotes.
// It can be sourced by a shell (`. ~/.kibotos/config.env`).
package clientconfig

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The variables every tool and test reads.
const (
	EnvWorkspaceEndpoint = "KIBOTOS_WORKSPACE_ENDPOINT"
	EnvOperatorEndpoint  = "KIBOTOS_OPERATOR_ENDPOINT"
	EnvToken             = "KIBOTOS_TOKEN"
	EnvOperatorToken     = "KIBOTOS_OPERATOR_TOKEN"
	// EnvHome is the root of Kibotos's files; default ~/.kibotos.
	EnvHome = "KIBOTOS_HOME"
	// EnvConfig names the client configuration file; default
	// $KIBOTOS_HOME/config.env.
	EnvConfig = "KIBOTOS_CONFIG"
)

var keys = []string{EnvWorkspaceEndpoint, EnvOperatorEndpoint, EnvToken, EnvOperatorToken}

// Config is what a client needs.
type Config struct {
	WorkspaceEndpoint string
	OperatorEndpoint  string
	Token             string
	OperatorToken     string
}

func (c *Config) fields() map[string]*string {
	return map[string]*string{
		EnvWorkspaceEndpoint: &c.WorkspaceEndpoint,
		EnvOperatorEndpoint:  &c.OperatorEndpoint,
		EnvToken:             &c.Token,
		EnvOperatorToken:     &c.OperatorToken,
	}
}

// Home is $KIBOTOS_HOME, or ~/.kibotos.
func Home() (string, error) {
	if h := os.Getenv(EnvHome); h != "" {
		return h, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot find a home directory; set %s: %w", EnvHome, err)
	}
	return filepath.Join(home, ".kibotos"), nil
}

// DefaultPath is $KIBOTOS_CONFIG, or $KIBOTOS_HOME/config.env.
func DefaultPath() (string, error) {
	if p := os.Getenv(EnvConfig); p != "" {
		return p, nil
	}
	home, err := Home()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, "config.env"), nil
}

// Load reads the configuration file at path (a missing file is empty) and then
// applies the environment, which wins.
func Load(path string) (Config, error) {
	var c Config
	values, err := ReadEnvFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return c, err
	}
	fields := c.fields()
	for k, v := range values {
		if f, ok := fields[k]; ok {
			*f = v
		}
	}
	for k, f := range fields {
		if v, ok := os.LookupEnv(k); ok {
			*f = v
		}
	}
	return c, nil
}

// Write stores c at path, readable by its owner only, atomically.
func Write(path string, c Config) error {
	var b bytes.Buffer
	b.WriteString("# Written by kibotos. Clients read it; the same variables in the environment override it.\n")
	fields := c.fields()
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, quote(*fields[k]))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	// A temporary file an interrupted Write left keeps its mode through
	// WriteFile: start from none.
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadEnvFile parses a KEY=VALUE file.
func ReadEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want KEY=VALUE", path, n)
		}
		out[strings.TrimSpace(k)] = unquote(strings.TrimSpace(v))
	}
	return out, sc.Err()
}

func quote(v string) string {
	if v == "" || strings.ContainsAny(v, " \t'\"$`\\#") {
		return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
	}
	return v
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '\'' && v[len(v)-1] == '\'' || v[0] == '"' && v[len(v)-1] == '"') {
		return strings.ReplaceAll(v[1:len(v)-1], `'\''`, "'")
	}
	return v
}
