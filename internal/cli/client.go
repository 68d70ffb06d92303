package cli

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
)

// clients are the API clients a command uses, configured from the client
// configuration file and the environment.
type clients struct {
	cfg clientconfig.Config
	// path is the client configuration file read, for the errors.
	path string
}

func loadClients() (*clients, error) {
	path, err := clientconfig.DefaultPath()
	if err != nil {
		return nil, err
	}
	cfg, err := clientconfig.Load(path)
	if err != nil {
		return nil, err
	}
	return &clients{cfg: cfg, path: path}, nil
}

// workspace returns the options and base URL of the Native Workspace endpoint.
func (c *clients) workspace() (connect.HTTPClient, string, connect.ClientOption, error) {
	if c.cfg.WorkspaceEndpoint == "" {
		return nil, "", nil, c.missing("workspace", clientconfig.EnvWorkspaceEndpoint, clientconfig.EnvToken)
	}
	return http.DefaultClient, c.cfg.WorkspaceEndpoint, connect.WithInterceptors(bearer(c.cfg.Token)), nil
}

// missing is the error of a client configuration without the endpoint:
// where it was looked for and each way to give it.
func (c *clients) missing(endpoint, envEndpoint, envToken string) error {
	return fmt.Errorf("no %s endpoint in %s or the environment: run `kibotos dev`, which writes that file; "+
		"for a `kibotos ctrl`, copy its <state-dir>/endpoints.env there or set %s to it; or set %s and %s",
		endpoint, c.path, clientconfig.EnvConfig, envEndpoint, envToken)
}

// operator returns the options and base URL of the Operator endpoint.
func (c *clients) operator() (connect.HTTPClient, string, connect.ClientOption, error) {
	if c.cfg.OperatorEndpoint == "" {
		return nil, "", nil, c.missing("operator", clientconfig.EnvOperatorEndpoint, clientconfig.EnvOperatorToken)
	}
	return http.DefaultClient, c.cfg.OperatorEndpoint, connect.WithInterceptors(bearer(c.cfg.OperatorToken)), nil
}

// onWorkspace makes a client of the Native Workspace endpoint.
func onWorkspace[C any](newClient func(connect.HTTPClient, string, ...connect.ClientOption) C) (C, error) {
	var zero C
	c, err := loadClients()
	if err != nil {
		return zero, err
	}
	hc, url, opt, err := c.workspace()
	if err != nil {
		return zero, err
	}
	return newClient(hc, url, opt), nil
}

// onOperator makes a client of the Operator endpoint.
func onOperator[C any](newClient func(connect.HTTPClient, string, ...connect.ClientOption) C) (C, error) {
	var zero C
	c, err := loadClients()
	if err != nil {
		return zero, err
	}
	hc, url, opt, err := c.operator()
	if err != nil {
		return zero, err
	}
	return newClient(hc, url, opt), nil
}

// bearer adds the API key to every request, unary and streaming.
func bearer(token string) connect.Interceptor { return auth.Bearer(token) }

// newCommandMetadata makes the command_id of a mutation: the one given with
// --command-id (to retry a command safely), or a fresh random one.
func newCommandMetadata(given string) *ctrlv1.CommandMetadata {
	if given != "" {
		return &ctrlv1.CommandMetadata{CommandId: given}
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return &ctrlv1.CommandMetadata{CommandId: "cli-" + hex.EncodeToString(b)}
}
