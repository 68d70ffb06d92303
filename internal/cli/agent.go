package cli

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
)

// agentFlags configure `kibotos node`.
type agentFlags struct {
	endpoint, nodeID, stateDir, grant string
	dataListen, dataEndpoint          string
	metricsListen                     string
	pools                             []string
	memoryTight                       sizeFlag
	guestNet                          guestNetworkFlags
	accel                             accelFlag
	obs                               obsFlags
}

func (f *agentFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.endpoint, "ctrl", "http://"+defaultNodeListen, "ctrl's node endpoint")
	c.Flags().StringVar(&f.nodeID, "node-id", "", "this node's id, a DNS label (default: the host's short name, lowercased)")
	c.Flags().StringVar(&f.stateDir, "state-dir", "", "the agent's state (default $KIBOTOS_HOME/node)")
	c.Flags().StringVar(&f.grant, "enrollment-grant", "", "enrollment grant secret, used when the state holds no credential yet (default $KIBOTOS_ENROLLMENT_GRANT)")
	c.Flags().StringVar(&f.dataListen, "data-listen", "127.0.0.1:0", "address of the node's data endpoint, which ctrl calls to reach guests (exec)")
	c.Flags().StringVar(&f.dataEndpoint, "data-endpoint", "", "URL ctrl reaches the data endpoint at, when not the listener's own address (NAT, another interface)")
	c.Flags().StringVar(&f.metricsListen, "metrics-listen", "", "loopback address (127.0.0.1:9672) to serve the node's Prometheus metrics at /metrics, unauthenticated (default: none)")
	c.Flags().StringArrayVar(&f.pools, "pool", nil, "a storage pool this node reaches: NAME=DIR, or NAME=DIR,default (repeatable; a node's only pool is its default)")
	f.memoryTight = sizeFlag(node.DefaultMemoryTightThreshold)
	c.Flags().Var(&f.memoryTight, "memory-tight", "available host memory (256Mi, 1G) below which the node takes no new Workspace and ctrl places none here")
	// The flag's name before sizes took units; its value is read the same way.
	c.Flags().Var(&f.memoryTight, "memory-tight-mib", "")
	_ = c.Flags().MarkDeprecated("memory-tight-mib", "use --memory-tight (a bare number is still MiB)")
	f.guestNet.register(c)
	f.accel.register(c)
	f.obs.register(c)
}

func (f *agentFlags) config() (node.Config, error) {
	cfg := node.Config{
		Endpoint: f.endpoint, NodeID: f.nodeID, StateDir: f.stateDir, EnrollmentGrant: f.grant,
		DataListen: f.dataListen, DataEndpoint: f.dataEndpoint, MemoryTightThreshold: uint64(f.memoryTight),
	}
	var err error
	if cfg.Logger, err = f.obs.logger(os.Stderr); err != nil {
		return cfg, err
	}
	network, err := f.guestNet.network(f.endpoint, cfg.Logger)
	if err != nil {
		return cfg, err
	}
	cfg.Network = network
	if cfg.NodeID == "" {
		host, err := os.Hostname()
		if err != nil {
			return cfg, fmt.Errorf("--node-id is required: %w", err)
		}
		// A node_id is a DNS label: the host's short name, lowercased.
		cfg.NodeID = strings.ToLower(strings.SplitN(host, ".", 2)[0])
	}
	if cfg.StateDir == "" {
		home, err := clientconfig.Home()
		if err != nil {
			return cfg, err
		}
		cfg.StateDir = filepath.Join(home, "node")
	}
	if cfg.Provider, err = f.accel.provider(cfg.Logger, cfg.StateDir); err != nil {
		return cfg, err
	}
	if cfg.EnrollmentGrant == "" {
		cfg.EnrollmentGrant = os.Getenv("KIBOTOS_ENROLLMENT_GRANT")
	}
	cfg.Pools, err = node.ParsePools(f.pools)
	return cfg, err
}

func (f *agentFlags) run(cmd *cobra.Command) error {
	cfg, err := f.config()
	if err != nil {
		return err
	}
	tr, err := f.obs.tracing(cmd.Context(), "kibotos-node")
	if err != nil {
		return err
	}
	defer flushTracing(tr, cfg.Logger)
	cfg.TracerProvider = tr.TracerProvider()
	if f.metricsListen != "" {
		if cfg.MetricsListener, err = node.ListenMetrics(f.metricsListen); err != nil {
			return fmt.Errorf("--metrics-listen %s: %w", f.metricsListen, err)
		}
	}
	return node.Run(cmd.Context(), cfg)
}

// accelFlag is --accel of `kibotos node` and `kibotos dev`.
type accelFlag struct{ value string }

func (f *accelFlag) register(c *cobra.Command) {
	def := os.Getenv("KIBOTOS_ACCEL")
	if def == "" {
		def = "auto"
	}
	c.Flags().StringVar(&f.value, "accel", def, "how QEMU runs guests: kvm, tcg (software emulation), or auto: "+
		"probe KVM by booting the platform at the first start, TCG if it does not answer within 20s; $KIBOTOS_ACCEL sets the default")
}

// provider is the QEMU provider with the accelerator the flag sets. With
// auto, the probe's verdict is kept in the node's state directory for the
// rest of the host's boot, so a restarted agent does not probe again.
func (f *accelFlag) provider(log *slog.Logger, stateDir string) (*qemu.Provider, error) {
	accel, err := qemu.ParseAccel(f.value)
	if err != nil {
		return nil, fmt.Errorf("--accel: %w", err)
	}
	return qemu.New(log, qemu.WithAccel(accel), qemu.WithVerdictDir(filepath.Join(stateDir, "accel"))), nil
}
