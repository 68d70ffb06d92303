package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"

	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/api"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/node"
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
	workspaceListen, operatorListen, nodeListen, stateDir, database string
	clockTolerance, placementTimeout                                time.Duration
	maxMessageBytes                                                 byteSizeFlag
	obs                                                             obsFlags
}

func (f *ctrlFlags) register(c *cobra.Command, stateHelp string) {
	c.Flags().StringVar(&f.workspaceListen, "workspace-listen", defaultWorkspaceListen, "address of the Native Workspace endpoint (kibotos.ctrl.v1)")
	c.Flags().StringVar(&f.operatorListen, "operator-listen", defaultOperatorListen, "address of the Operator endpoint (kibotos.operator.v1)")
	c.Flags().StringVar(&f.nodeListen, "node-listen", defaultNodeListen, "address of the node endpoint (kibotos.node.v1, node control sessions)")
	c.Flags().StringVar(&f.stateDir, "state-dir", "", stateHelp)
	c.Flags().DurationVar(&f.clockTolerance, "clock-tolerance", fleet.DefaultConfig.ClockTolerance, "allowed clock skew of a node; beyond it (less the measurement's uncertainty) the node receives no new placement")
	c.Flags().DurationVar(&f.placementTimeout, "placement-timeout", fleet.DefaultPlacementTimeout, "how long a create or start waits for a node to take it before it fails at PLACING")
	f.maxMessageBytes = api.DefaultMaxMessageBytes
	c.Flags().Var(&f.maxMessageBytes, "max-message-bytes", "largest request message (a unary request, each message of a stream) any endpoint reads, as 16Mi or 16MiB; a bare number is bytes, as before the flag took units; a larger message is resource_exhausted")
	c.Flags().StringVar(&f.database, "database", "", "PostgreSQL DSN (postgres://…) for replicas sharing one database, or a SQLite file (default: SQLite at <state-dir>/ctrl.db)")
	f.obs.register(c)
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
	log, err := f.obs.logger(os.Stderr)
	if err != nil {
		return ctrl.Config{}, err
	}
	return ctrl.Config{
		WorkspaceListen: f.workspaceListen,
		OperatorListen:  f.operatorListen,
		NodeListen:      f.nodeListen,
		StateDir:        dir,
		Database:        f.database,
		MaxMessageBytes: int(f.maxMessageBytes),
		Fleet:           fleetConfig(f.clockTolerance, f.placementTimeout),
		Logger:          log,
	}, nil
}

func fleetConfig(tolerance, placementTimeout time.Duration) fleet.Config {
	fc := fleet.DefaultConfig
	fc.ClockTolerance = tolerance
	fc.PlacementTimeout = placementTimeout
	return fc
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
			tr, err := f.obs.tracing(cmd.Context(), "kibotos-ctrl")
			if err != nil {
				return err
			}
			defer flushTracing(tr, cfg.Logger)
			cfg.TracerProvider = tr.TracerProvider()
			srv, err := ctrl.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			printEndpoints(cmd, srv, cfg.StateDir)
			printCtrlUsage(cmd, cfg.StateDir)
			return srv.Wait()
		},
	}
	f.register(c, "directory of ctrl's state (default $KIBOTOS_HOME/ctrl)")
	return c
}

func newDevCommand() *cobra.Command {
	var f ctrlFlags
	var guestNet guestNetworkFlags
	var accel accelFlag
	c := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole system on this machine: ctrl and one node, no configuration",
		Long: `dev runs ctrl and one node agent (node_id "dev") in this process, with every
piece of state under --state-dir: ctrl's SQLite database and keys, the node's
state, and its default storage pool (<state-dir>/pools/default; at first start
its capacity is set to the filesystem's size, at least 1 TiB). At first start
the node's CPU is overcommitted 8x (kibotos overcommit set-node dev changes
it), so a small machine runs more than one one-vCPU Workspace per core;
memory stays at 1x. It writes the
endpoints and credentials to <state-dir>/endpoints.env and to the client
configuration ($KIBOTOS_HOME/config.env), which the CLI then uses without flags.

At first start it builds a default platform (Debian's kernel package, an
initramfs with kibotos-guest) and a default template (a busybox root) and
registers them; later starts reuse them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.config("dev")
			if err != nil {
				return err
			}
			// ctrl and the dev node share one provider: one process.
			tr, err := f.obs.tracing(cmd.Context(), "kibotos-dev")
			if err != nil {
				return err
			}
			defer flushTracing(tr, cfg.Logger)
			cfg.TracerProvider = tr.TracerProvider()
			return runDev(cmd, cfg, guestNet, accel)
		},
	}
	f.register(c, "directory of the dev system's state (default $KIBOTOS_HOME/dev)")
	guestNet.register(c)
	accel.register(c)
	return c
}

// devNodeID is the node dev runs in its own process.
const devNodeID = "dev"

func runDev(cmd *cobra.Command, cfg ctrl.Config, guestNet guestNetworkFlags, accel accelFlag) error {
	ctx := cmd.Context()
	nodeLog := cfg.Logger.With("component", "node")
	network, err := guestNet.network("", nodeLog)
	if err != nil {
		return err
	}
	nodeState := filepath.Join(cfg.StateDir, "node")
	provider, err := accel.provider(nodeLog, nodeState)
	if err != nil {
		return err
	}
	srv, err := ctrl.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	clientPath, err := clientconfig.DefaultPath()
	if err != nil {
		return err
	}
	if err := clientconfig.Write(clientPath, srv.Client); err != nil {
		return fmt.Errorf("write client configuration: %w", err)
	}
	if err := ensureDefaults(ctx, srv.Catalog(), cfg.StateDir, cmd.OutOrStdout()); err != nil {
		return fmt.Errorf("default platform and template: %w", err)
	}
	// A grant bound to the dev node, made only while the node has no
	// credential (its first start, or a state directory made anew): one made
	// at every start would lie unused, and able to enroll, for its hour.
	enrolled, err := node.Enrolled(nodeState)
	if err != nil {
		return err
	}
	var secret string
	if !enrolled {
		if secret, err = devGrant(ctx, srv.Client); err != nil {
			return err
		}
	}
	poolDir := filepath.Join(cfg.StateDir, "pools", "default")
	if err := os.MkdirAll(poolDir, 0o700); err != nil {
		return err
	}
	nodeErr := make(chan error, 1)
	nodeStarted := time.Now()
	go func() {
		nodeErr <- node.Run(ctx, node.Config{
			Endpoint: srv.NodeEndpoint, NodeID: devNodeID, StateDir: nodeState, EnrollmentGrant: secret,
			Pools:    []node.Pool{{Name: "default", Dir: poolDir, Default: true}},
			Provider: provider, Network: network,
			Logger: nodeLog, TracerProvider: cfg.TracerProvider,
		})
	}()
	if err := waitNodeReady(ctx, srv.Client, devNodeID, nodeStarted, nodeErr); err != nil {
		return err
	}
	if err := ensureDevPoolCapacity(ctx, srv.Client, "default"); err != nil {
		return err
	}
	if !enrolled {
		if err := ensureDevOvercommit(ctx, srv.Client, devNodeID); err != nil {
			return err
		}
	}
	printEndpoints(cmd, srv, cfg.StateDir)
	printDevUsage(cmd, cfg.StateDir, clientPath)
	// Everything dev runs needs no root; say what the guests' network does.
	fmt.Fprintln(cmd.ErrOrStderr(), guestNet.note())
	fmt.Fprintln(cmd.OutOrStdout(), "ready; Ctrl-C stops")
	waitErr := make(chan error, 1)
	go func() { waitErr <- srv.Wait() }()
	select {
	case err = <-nodeErr:
	case err = <-waitErr:
	}
	if ctx.Err() != nil {
		printDevStopped(cmd, cfg.StateDir)
	}
	return err
}

// printDevUsage says where the endpoints are and the commands a new user
// runs next, with this state directory's paths (README "Using it").
func printDevUsage(cmd *cobra.Command, stateDir, clientPath string) {
	w := cmd.OutOrStdout()
	self := "kibotos"
	if exe, err := os.Executable(); err == nil {
		self = exe
	}
	fmt.Fprintf(w, "client configuration: %s (every kibotos command reads it)\n", clientPath)
	fmt.Fprintf(w, "in a shell, for curl or grpcurl: . %s\n", ctrl.EndpointsFile(stateDir))
	fmt.Fprintf(w, "next, in another shell:\n  %s workspace create\n  %s workspace exec WORKSPACE_ID -- uname -a\n", self, self)
}

// printDevStopped says what an interrupted dev leaves behind: VMs are not
// its children to end, so they run on until dev comes back to stop them.
func printDevStopped(cmd *cobra.Command, stateDir string) {
	again := "kibotos dev"
	if !isDefaultDevState(stateDir) {
		again += " --state-dir " + stateDir
	}
	fmt.Fprintf(cmd.ErrOrStderr(), `kibotos dev stopped: ctrl and the dev node are down, but the Workspaces' VMs keep running
(a node agent never kills the VMs it runs; the next start finds them again). To stop them,
start it again (%s), then in another shell:
  kibotos workspace list                 # AVAILABLE ones have a running VM
  kibotos workspace stop WORKSPACE_ID    # or delete; then Ctrl-C dev again
`, again)
}

// isDefaultDevState reports whether dir is dev's default state directory.
func isDefaultDevState(dir string) bool {
	home, err := clientconfig.Home()
	return err == nil && filepath.Clean(dir) == filepath.Join(home, "dev")
}

func devGrant(ctx context.Context, c clientconfig.Config) (string, error) {
	client := operatorv1connect.NewEnrollmentServiceClient(http.DefaultClient, c.OperatorEndpoint, connect.WithInterceptors(bearer(c.OperatorToken)))
	res, err := client.CreateEnrollmentGrant(ctx, connect.NewRequest(&operatorv1.CreateEnrollmentGrantRequest{
		Command: newCommandMetadata(""), NodeId: devNodeID, Ttl: durationpb.New(time.Hour), Description: "kibotos dev's own node",
	}))
	if err != nil {
		return "", fmt.Errorf("enrollment grant for the dev node: %w", err)
	}
	return res.Msg.GetSecret(), nil
}

// waitNodeReady polls the node's registration until it is READY on a
// session connected since started, the node agent fails, or ctx ends. The
// session must be this agent's: after a dev that was killed, the record
// still shows the old agent's session as live for a few observation
// intervals (a ctrl that crashed cannot end it), with the old agent's data
// endpoint, which nothing listens on any more.
func waitNodeReady(ctx context.Context, c clientconfig.Config, nodeID string, started time.Time, nodeErr <-chan error) error {
	client := operatorv1connect.NewNodeRegistrationServiceClient(http.DefaultClient, c.OperatorEndpoint, connect.WithInterceptors(bearer(c.OperatorToken)))
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		res, err := client.GetNodeRegistration(ctx, connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: nodeID}))
		if err == nil && readyOnSessionSince(res.Msg.GetRegistration(), started) {
			return nil
		}
		select {
		case err := <-nodeErr:
			return fmt.Errorf("the dev node stopped before it was ready: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

func readyOnSessionSince(r *operatorv1.NodeRegistration, started time.Time) bool {
	return r.GetStatus() == operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY &&
		!r.GetSession().GetConnectedAt().AsTime().Before(started)
}

// printEndpoints says where ctrl listens and where its endpoints file is.
// The API keys are in that file (0600) and nowhere else in plaintext: they
// are printed only by the start that made them, marked as shown once, so
// a terminal's scrollback or a captured log of later starts holds none.
func printEndpoints(cmd *cobra.Command, srv *ctrl.Server, stateDir string) {
	w := cmd.OutOrStdout()
	endpoints := ctrl.EndpointsFile(stateDir)
	fmt.Fprintf(w, "%s=%s\n", clientconfig.EnvWorkspaceEndpoint, srv.Client.WorkspaceEndpoint)
	fmt.Fprintf(w, "%s=%s\n", clientconfig.EnvOperatorEndpoint, srv.Client.OperatorEndpoint)
	if srv.NewKeys {
		fmt.Fprintf(w, "API keys (shown once; also in %s, mode 0600):\n", endpoints)
		fmt.Fprintf(w, "%s=%s\n", clientconfig.EnvToken, srv.Client.Token)
		fmt.Fprintf(w, "%s=%s\n", clientconfig.EnvOperatorToken, srv.Client.OperatorToken)
	} else {
		fmt.Fprintf(w, "API keys: in %s (mode 0600)\n", endpoints)
	}
	fmt.Fprintf(w, "node endpoint: %s\n", srv.NodeEndpoint)
	fmt.Fprintf(w, "endpoints file: %s\n", endpoints)
}

// printCtrlUsage says how the CLI finds this ctrl: unlike dev, ctrl does
// not write the client configuration (it may run as a service user, for
// others), so the endpoints file must reach it.
func printCtrlUsage(cmd *cobra.Command, stateDir string) {
	endpoints := ctrl.EndpointsFile(stateDir)
	if clientPath, err := clientconfig.DefaultPath(); err == nil {
		fmt.Fprintf(cmd.OutOrStdout(), "for the kibotos CLI: copy %s to %s, or export %s=%s\n", endpoints, clientPath, clientconfig.EnvConfig, endpoints)
	}
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
