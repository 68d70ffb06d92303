// Package sim is a SIMULATION of a node fleet, for control-plane scale
// tests only (`kibotos sim`, bench/placement): one process stands in for
// thousands of nodes. It runs nothing. Each simulated node enrolls with an
// enrollment grant and holds a real control session (kibotos.node.v1) to
// ctrl's node endpoint, exactly as `kibotos node` does: hello with host
// resources and storage pools, observations at the interval the welcome
// names, clock replies, and an answer to every node command. The answers
// come at once and say the operation succeeded (StartExecution → running,
// StopExecution → durable, block files made, imported or removed; an
// import fetches nothing), and each node
// keeps the state a real node would report: the executions it "runs" and
// the block files of its pools, in memory.
//
// Everything it reports says it is a simulation: the capability
// "provider.sim" (never "provider.qemu"), agent_version "sim-…", node ids
// "sim-…", boot ids "sim-…", accelerator "sim". It serves no data
// endpoint, so process and file calls into its Workspaces fail.
//
// Scale: the sessions share HTTP/2 connections, NodesPerConnection streams
// on each (ctrl serves at most 250 concurrent streams per connection), so
// 10,000 nodes need 200 connections and as many file descriptors, not
// 10,000. Go raises the process's soft RLIMIT_NOFILE to its hard limit at
// start, which covers that many.
package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/version"
)

// Capability is what a simulated node advertises instead of a VM
// provider; ctrl's placement takes it as one (capability.Sim).
const Capability = capability.Sim

// Defaults of Config.
const (
	// DefaultNodesPerConnection keeps streams per connection well under
	// ctrl's limit of 250: Go's HTTP/2 write scheduler does work in the
	// number of streams for every frame, which at 200 streams a connection
	// took 5% of a 10,000-node run's CPU (bench/placement, -cpuprofile).
	DefaultNodesPerConnection = 50
	DefaultStartConcurrency   = 64
	// DefaultPoolBytes is the size each simulated pool reports.
	DefaultPoolBytes = 4 << 40
)

// DefaultResources are the host resources each simulated node offers: a
// large host (32 cores, 256 GiB, 4 TiB), so placement, not capacity,
// bounds a benchmark.
var DefaultResources = &nodev1.HostResources{CpuMillis: 32000, MemoryBytes: 256 << 30, DiskBytes: 4 << 40}

// Config configures a simulated fleet.
type Config struct {
	// Endpoint is ctrl's node endpoint, http:// (h2c) or https://.
	Endpoint string
	// Grant is the secret of a reusable enrollment grant (see CreateGrant);
	// every simulated node enrolls with it.
	Grant string
	// Nodes is how many nodes to simulate.
	Nodes int
	// Name, when given, goes into the node ids: sim-<name>-00001; else
	// sim-00001. A DNS label fragment.
	Name string
	// SharedPool, when given, is a storage pool every node declares beside
	// its own (named as the node). SharedPoolDefault makes it each node's
	// default pool (as a deployment with shared storage would), else each
	// node's own pool is its default.
	SharedPool        string
	SharedPoolDefault bool
	// Resources each node offers; nil is DefaultResources.
	Resources *nodev1.HostResources
	// PoolBytes is the filesystem size each pool reports; 0 is
	// DefaultPoolBytes.
	PoolBytes uint64
	// NodesPerConnection is how many nodes share one HTTP/2 connection;
	// 0 is DefaultNodesPerConnection.
	NodesPerConnection int
	// StartConcurrency bounds the nodes enrolling or opening their session
	// at once, so a fleet coming up does not flood ctrl; 0 is
	// DefaultStartConcurrency.
	StartConcurrency int
	// Ramp spreads the nodes' first starts evenly over this long (0: all
	// at once, as fast as StartConcurrency lets them), as a real fleet's
	// nodes come up at different times: the instants they report at then
	// spread as a real fleet's do, which a fleet started at once does not.
	Ramp time.Duration
	// OnCommand, when set, is called with each operation a node receives
	// for the first time (an EnsureBlockFile, a StartExecution…) before it
	// is answered: benchmarks time placements by it.
	OnCommand func(nodeID string, op proto.Message)
	// Refuse, when set, is asked about each operation a node receives
	// (after OnCommand): an error it returns fails the operation, with
	// code unavailable and the error's text, instead of applying it.
	// Tests make a node's answer fail by it.
	Refuse func(nodeID string, op proto.Message) error
	// Delivery, when set, is asked about each StartExecution a node
	// receives, before OnCommand: a total above zero makes the node report
	// that artifact progress for the execution (ExecutionProgress) before
	// it answers, as a node fetching the start's artifacts does. Tests
	// observe a start's delivery by it.
	Delivery func(nodeID string, start *nodev1.StartExecution) (delivered, total uint64)
	// GuestMemory, when set, is asked for the memory report of each running
	// execution's guest (by instance id) whenever its report is made; nil,
	// or a nil answer, reports none, as a guest that predates the report.
	// Tests make a guest report saturation by it.
	GuestMemory func(instanceID string) *guestv1.MemoryReport
	Logger      *slog.Logger
}

var fragment = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func (c *Config) defaults() error {
	if c.Nodes < 1 {
		return errors.New("sim: at least one node")
	}
	if c.Grant == "" {
		return errors.New("sim: no enrollment grant")
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("sim: ctrl endpoint %q: want http://host:port or https://host:port", c.Endpoint)
	}
	if c.Name != "" && !fragment.MatchString(c.Name) {
		return fmt.Errorf("sim: name %q is not a DNS label fragment", c.Name)
	}
	if c.Resources == nil {
		c.Resources = DefaultResources
	}
	if c.PoolBytes == 0 {
		c.PoolBytes = DefaultPoolBytes
	}
	if c.NodesPerConnection <= 0 {
		c.NodesPerConnection = DefaultNodesPerConnection
	}
	if c.StartConcurrency <= 0 {
		c.StartConcurrency = DefaultStartConcurrency
	}
	if c.Ramp < 0 {
		return fmt.Errorf("sim: ramp %v: want zero or more", c.Ramp)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if id := c.nodeID(c.Nodes); len(id) > 63 {
		return fmt.Errorf("sim: node id %q is longer than 63 characters", id)
	}
	return nil
}

// nodeID is the id of the i-th node (from 1), zero-padded so ids sort in
// order.
func (c *Config) nodeID(i int) string {
	width := max(5, len(fmt.Sprint(c.Nodes)))
	if c.Name != "" {
		return fmt.Sprintf("sim-%s-%0*d", c.Name, width, i)
	}
	return fmt.Sprintf("sim-%0*d", width, i)
}

// Fleet is a running simulated fleet.
type Fleet struct {
	cfg         Config
	log         *slog.Logger
	incarnation uint64
	bootID      string
	transports  []*http.Transport
	pools       map[string]*pool
	nodes       []*simNode
	byID        map[string]*simNode
	startSlots  chan struct{}
	established atomic.Int64
	done        chan struct{}
}

// Start starts the fleet's nodes; they run until ctx ends (Wait returns
// then). It fails only on a bad configuration: ctrl being unreachable or
// refusing is retried with backoff by each node.
func Start(ctx context.Context, cfg Config) (*Fleet, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	f := &Fleet{
		cfg: cfg, log: cfg.Logger.With("simulation", true),
		// The incarnation is the fleet's start time: a restarted fleet, which
		// keeps no state, is a new incarnation of every node.
		incarnation: uint64(time.Now().UnixMilli()),
		bootID:      "sim-" + randomHex(8),
		pools:       map[string]*pool{},
		byID:        map[string]*simNode{},
		startSlots:  make(chan struct{}, cfg.StartConcurrency),
		done:        make(chan struct{}),
	}
	if cfg.SharedPool != "" {
		f.pools[cfg.SharedPool] = newPool()
	}
	endpoint := strings.TrimSuffix(cfg.Endpoint, "/")
	var clients []nodev1connect.NodeSessionServiceClient
	for i := 1; i <= cfg.Nodes; i++ {
		if (i-1)%cfg.NodesPerConnection == 0 {
			t := newTransport()
			f.transports = append(f.transports, t)
			clients = append(clients, nodev1connect.NewNodeSessionServiceClient(&http.Client{Transport: t}, endpoint))
		}
		n := newNode(f, cfg.nodeID(i), clients[len(clients)-1])
		if cfg.SharedPool == n.id {
			return nil, fmt.Errorf("sim: shared pool %q is also a node's own pool", n.id)
		}
		f.pools[n.id] = newPool()
		f.nodes = append(f.nodes, n)
		f.byID[n.id] = n
	}
	f.checkFileLimit()
	f.log.Info("simulated fleet starting (a simulation for scale tests: it runs nothing)",
		"nodes", cfg.Nodes, "connections", len(f.transports), "endpoint", endpoint, "shared_pool", cfg.SharedPool)
	var wg sync.WaitGroup
	for i, n := range f.nodes {
		after := cfg.Ramp * time.Duration(i) / time.Duration(len(f.nodes))
		wg.Go(func() {
			select {
			case <-time.After(after):
				n.run(ctx)
			case <-ctx.Done():
			}
		})
	}
	go func() {
		wg.Wait()
		for _, t := range f.transports {
			t.CloseIdleConnections()
		}
		close(f.done)
	}()
	return f, nil
}

// checkFileLimit warns when the process may run out of file descriptors:
// each connection is one here, and one more in ctrl when ctrl shares the
// process (bench/placement).
func (f *Fleet) checkFileLimit() {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	if need := uint64(2*len(f.transports) + 256); lim.Cur < need {
		f.log.Warn("the open file limit may be too low for the fleet's connections", "limit", lim.Cur, "connections", len(f.transports))
	}
}

// newTransport speaks HTTP/2 only (h2c with prior knowledge for http://,
// TLS for https://), as the node agent does: one connection carries the
// streams of NodesPerConnection nodes. Pings find a dead connection.
func newTransport() *http.Transport {
	t := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout:  15 * time.Second,
			PingTimeout:      10 * time.Second,
			WriteByteTimeout: 30 * time.Second,
		},
	}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP2(true)
	t.Protocols.SetUnencryptedHTTP2(true)
	return t
}

// Wait blocks until every node stopped (after the Start context ended).
func (f *Fleet) Wait() { <-f.done }

// NodeIDs are the simulated nodes' ids, in order.
func (f *Fleet) NodeIDs() []string {
	ids := make([]string, len(f.nodes))
	for i, n := range f.nodes {
		ids[i] = n.id
	}
	return ids
}

// Established is how many nodes hold a welcomed control session now.
func (f *Fleet) Established() int { return int(f.established.Load()) }

// Connections is how many HTTP/2 connections the fleet's sessions share.
func (f *Fleet) Connections() int { return len(f.transports) }

// Running is the instance ids node runs (in its simulation), or nil for an
// unknown node.
func (f *Fleet) Running(nodeID string) []string {
	n := f.byID[nodeID]
	if n == nil {
		return nil
	}
	return n.instanceIDs()
}

// HasBlockFile reports whether pool holds the block file ref names.
func (f *Fleet) HasBlockFile(ref *nodev1.BlockFileRef) bool {
	p := f.pools[ref.GetStoragePool()]
	if p == nil {
		return false
	}
	_, ok := p.get(ref)
	return ok
}

// CreateGrant makes the reusable enrollment grant a simulated fleet
// enrolls with, valid for ttl.
func CreateGrant(ctx context.Context, client operatorv1connect.EnrollmentServiceClient, ttl time.Duration) (string, error) {
	res, err := client.CreateEnrollmentGrant(ctx, connect.NewRequest(&operatorv1.CreateEnrollmentGrantRequest{
		Command:     &ctrlv1.CommandMetadata{CommandId: "sim-grant-" + randomHex(8)},
		Reusable:    true,
		Ttl:         durationpb.New(ttl),
		Description: "kibotos sim: simulated nodes for scale tests",
	}))
	if err != nil {
		return "", fmt.Errorf("sim: enrollment grant: %w", err)
	}
	return res.Msg.GetSecret(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// agentVersion says the agent is the simulation of this build.
func agentVersion() string { return "sim-" + version.String() }

// capabilities are what a simulated node advertises: block files (in
// memory) and the sim provider.
func capabilities() []string { return []string{capability.BlockFile, Capability} }

// EnsurePoolCapacity gives pool a capacity (ctrl places nothing in a pool
// without one) unless an operator set one already. The pool must be known
// to ctrl: a node declared it.
func EnsurePoolCapacity(ctx context.Context, client operatorv1connect.NodeRegistrationServiceClient, pool string, capacity uint64) error {
	got, err := client.GetStoragePool(ctx, connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: pool}))
	if err != nil {
		return fmt.Errorf("sim: storage pool %s: %w", pool, err)
	}
	if got.Msg.GetPool().CapacityBytes != nil {
		return nil
	}
	_, err = client.SetStoragePoolCapacity(ctx, connect.NewRequest(&operatorv1.SetStoragePoolCapacityRequest{
		Command:     &ctrlv1.CommandMetadata{CommandId: "sim-capacity-" + randomHex(8)},
		StoragePool: pool, ExpectedVersion: got.Msg.GetPool().GetVersion(), CapacityBytes: capacity,
	}))
	if err != nil {
		return fmt.Errorf("sim: capacity of storage pool %s: %w", pool, err)
	}
	return nil
}
