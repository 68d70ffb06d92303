package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/version"
)

// Default listen addresses. Loopback only: expose them deliberately.
const (
	defaultWorkspaceListen = "127.0.0.1:7670"
	defaultOperatorListen  = "127.0.0.1:7671"
	defaultNodeListen      = "127.0.0.1:7672"
)

// ctrlFlags are the flags ctrl and dev share.
type ctrlFlags struct {
	workspaceListen, operatorListen, nodeListen, stateDir string
}

func (f *ctrlFlags) register(c *cobra.Command, stateHelp string) {
	c.Flags().StringVar(&f.workspaceListen, "workspace-listen", defaultWorkspaceListen, "address of the Native Workspace endpoint (kibotos.ctrl.v1)")
	c.Flags().StringVar(&f.operatorListen, "operator-listen", defaultOperatorListen, "address of the Operator endpoint (kibotos.operator.v1)")
	c.Flags().StringVar(&f.nodeListen, "node-listen", defaultNodeListen, "address of the node endpoint (kibotos.node.v1, node control sessions)")
	c.Flags().StringVar(&f.stateDir, "state-dir", "", stateHelp)
}

// config resolves the state directory under $KIBOTOS_HOME when not given.
func (f *ctrlFlags) config(defaultSub string) (ctrl.Config, error) {
	dir := f.stateDir
	if dir == "" {
		home, err := clientconfig.Home()
		if err != nil {
			return ctrl.Config{}, err
		}
		dir = filepath.Join(home, defaultSub)
	}
	return ctrl.Config{
		WorkspaceListen: f.workspaceListen,
		OperatorListen:  f.operatorListen,
		NodeListen:      f.nodeListen,
		StateDir:        dir,
		Logger:          newLogger(os.Stderr),
	}, nil
}

func newCtrlCommand() *cobra.Command {
	var f ctrlFlags
	c := &cobra.Command{
		Use:   "ctrl",
		Short: "Run the control plane: the Workspace, Operator and node endpoints",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.config("ctrl")
			if err != nil {
				return err
			}
			srv, err := ctrl.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			printEndpoints(cmd, srv, cfg.StateDir)
			return srv.Wait()
		},
	}
	f.register(c, "directory of ctrl's state (default $KIBOTOS_HOME/ctrl)")
	return c
}

func newDevCommand() *cobra.Command {
	var f ctrlFlags
	c := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole system on this machine: ctrl and one node, no configuration",
		Long: `dev runs ctrl on this machine with its state under --state-dir and writes the
endpoints and credentials it made to <state-dir>/endpoints.env and to the client
configuration ($KIBOTOS_HOME/config.env), which the CLI then uses without flags.

Not built yet: the in-process node, the default platform and template (see the
README's status table). Until then the endpoints answer, and every RPC that is
not built answers unimplemented.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.config("dev")
			if err != nil {
				return err
			}
			srv, err := ctrl.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			clientPath, err := clientconfig.DefaultPath()
			if err != nil {
				return err
			}
			if err := clientconfig.Write(clientPath, srv.Client); err != nil {
				return fmt.Errorf("write client configuration: %w", err)
			}
			printEndpoints(cmd, srv, cfg.StateDir)
			fmt.Fprintf(cmd.OutOrStdout(), "client configuration: %s\n", clientPath)
			fmt.Fprintln(cmd.OutOrStdout(), "ready; Ctrl-C stops")
			return srv.Wait()
		},
	}
	f.register(c, "directory of the dev system's state (default $KIBOTOS_HOME/dev)")
	return c
}

func printEndpoints(cmd *cobra.Command, srv *ctrl.Server, stateDir string) {
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "%s=%s\n", clientconfig.EnvWorkspaceEndpoint, srv.Client.WorkspaceEndpoint)
	fmt.Fprintf(w, "%s=%s\n", clientconfig.EnvOperatorEndpoint, srv.Client.OperatorEndpoint)
	fmt.Fprintf(w, "%s=%s\n", clientconfig.EnvToken, srv.Client.Token)
	fmt.Fprintf(w, "%s=%s\n", clientconfig.EnvOperatorToken, srv.Client.OperatorToken)
	fmt.Fprintf(w, "node endpoint: %s\n", srv.NodeEndpoint)
	fmt.Fprintf(w, "endpoints file: %s\n", ctrl.EndpointsFile(stateDir))
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "kibotos", version.String())
		},
	}
}
