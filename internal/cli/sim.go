package cli

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/sim"
)

// simFlags configure `kibotos sim`.
type simFlags struct {
	endpoint, operatorEndpoint, operatorToken, grant string
	name, sharedPool                                 string
	sharedDefault                                    bool
	nodes, perConnection                             int
	cpus, memoryGiB                                  uint32
	ramp                                             time.Duration
	log                                              logFlags
}

func newSimCommand() *cobra.Command {
	var f simFlags
	c := &cobra.Command{
		Use:   "sim",
		Short: "SIMULATION for scale tests: run thousands of simulated nodes against a ctrl",
		Long: `sim runs a SIMULATED fleet, for control-plane scale tests only: one process
stands in for --nodes nodes, each holding a real control session to ctrl's
node endpoint. The simulated nodes run nothing. They answer every node
command at once as if it succeeded, and report the executions and block
files they would hold. They say they are a simulation: node ids sim-…,
capability provider.sim, agent version sim-…. Never point it at a
production ctrl: its placement would send Workspaces to nodes that run
nothing.

The nodes enroll with one reusable enrollment grant: --enrollment-grant, or
one this command creates on the Operator endpoint (--operator-endpoint and
--operator-token, default from the client configuration). Each node
declares its own pool (named as the node) and --shared-pool, by default
its default pool; with operator access this command gives the shared pool
a capacity when it has none (ctrl places nothing in a pool without one).
Workspaces still need a platform and a template registered on ctrl; the
simulated nodes never fetch them. It runs until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := f.log.logger(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return f.run(cmd.Context(), log)
		},
	}
	c.Flags().StringVar(&f.endpoint, "ctrl", "http://"+defaultNodeListen, "ctrl's node endpoint")
	c.Flags().StringVar(&f.operatorEndpoint, "operator-endpoint", "", "ctrl's Operator endpoint, to create the grant (default from the client configuration)")
	c.Flags().StringVar(&f.operatorToken, "operator-token", "", "an operator API key, to create the grant (default from the client configuration)")
	c.Flags().StringVar(&f.grant, "enrollment-grant", "", "a reusable enrollment grant's secret to enroll with, instead of creating one")
	c.Flags().IntVar(&f.nodes, "nodes", 100, "how many nodes to simulate")
	c.Flags().StringVar(&f.name, "name", "", "put NAME in the node ids (sim-NAME-00001), to run several fleets against one ctrl")
	c.Flags().StringVar(&f.sharedPool, "shared-pool", "sim-shared", "a storage pool every simulated node also declares (empty: none)")
	c.Flags().BoolVar(&f.sharedDefault, "shared-pool-default", true, "make the shared pool each node's default pool (Volumes and layers go there); false: each node's own pool")
	c.Flags().IntVar(&f.perConnection, "nodes-per-connection", sim.DefaultNodesPerConnection, "control sessions sharing one HTTP/2 connection")
	c.Flags().DurationVar(&f.ramp, "ramp", 0, "start the nodes evenly over this long, as a real fleet's come up at different times (0: all at once)")
	c.Flags().Uint32Var(&f.cpus, "cpus", sim.DefaultResources.GetCpuMillis()/1000, "CPUs each simulated node offers")
	f.log.register(c)
	c.Flags().Uint32Var(&f.memoryGiB, "memory-gib", uint32(sim.DefaultResources.GetMemoryBytes()>>30), "memory (GiB) each simulated node offers")
	return c
}

func (f *simFlags) run(ctx context.Context, log *slog.Logger) error {
	grant := f.grant
	var operator *operatorClients
	if grant == "" {
		var err error
		if operator, err = f.operatorClients(); err != nil {
			return err
		}
		if grant, err = sim.CreateGrant(ctx, operator.enrollment, 30*24*time.Hour); err != nil {
			return err
		}
	}
	fleet, err := sim.Start(ctx, sim.Config{
		Endpoint: f.endpoint, Grant: grant, Nodes: f.nodes, Name: f.name,
		SharedPool: f.sharedPool, SharedPoolDefault: f.sharedDefault, NodesPerConnection: f.perConnection, Ramp: f.ramp,
		Resources: &nodev1.HostResources{
			CpuMillis: f.cpus * 1000, MemoryBytes: uint64(f.memoryGiB) << 30, DiskBytes: sim.DefaultResources.GetDiskBytes(),
		},
		Logger: log,
	})
	if err != nil {
		return err
	}
	// Say how far the fleet came up whenever that changed (checked every
	// second), so a slow ctrl shows.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, capacity := -1, f.sharedPool == "" || operator == nil
	for {
		select {
		case <-ctx.Done():
			fleet.Wait()
			log.Info("simulated fleet stopped")
			return nil
		case <-tick.C:
			if n := fleet.Established(); n != last {
				log.Info("simulated control sessions established", "established", n, "nodes", f.nodes, "connections", fleet.Connections())
				last = n
			}
			if !capacity && last > 0 {
				err := sim.EnsurePoolCapacity(ctx, operator.nodes, f.sharedPool, sim.DefaultPoolBytes)
				if capacity = err == nil; err != nil {
					log.Warn("cannot give the shared pool a capacity yet", "pool", f.sharedPool, "err", err)
				}
			}
		}
	}
}

// operatorClients are the Operator endpoint's clients `kibotos sim` uses.
type operatorClients struct {
	enrollment operatorv1connect.EnrollmentServiceClient
	nodes      operatorv1connect.NodeRegistrationServiceClient
}

// operatorClients reach the Operator endpoint given by the flags or the
// client configuration.
func (f *simFlags) operatorClients() (*operatorClients, error) {
	path, err := clientconfig.DefaultPath()
	if err != nil {
		return nil, err
	}
	cfg, err := clientconfig.Load(path)
	if err != nil {
		return nil, err
	}
	endpoint, token := or(f.operatorEndpoint, cfg.OperatorEndpoint), or(f.operatorToken, cfg.OperatorToken)
	if endpoint == "" || token == "" {
		return nil, errors.New("to create an enrollment grant, give --operator-endpoint and --operator-token (or " +
			clientconfig.EnvOperatorEndpoint + " and " + clientconfig.EnvOperatorToken + "), or give --enrollment-grant")
	}
	opt := connect.WithInterceptors(bearer(token))
	return &operatorClients{
		enrollment: operatorv1connect.NewEnrollmentServiceClient(http.DefaultClient, endpoint, opt),
		nodes:      operatorv1connect.NewNodeRegistrationServiceClient(http.DefaultClient, endpoint, opt),
	}, nil
}
