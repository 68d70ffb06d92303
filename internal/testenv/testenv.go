// Package testenv runs an in-process cluster for tests: a real ctrl (its
// listeners, store and workers) and real node agents, talking over loopback.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
	"github.com/kibotos/kibotos/internal/telemetry"
)

// Cluster is a running ctrl and the clients to reach it.
type Cluster struct {
	Ctrl       *ctrl.Server
	Volumes    ctrlv1connect.VolumeServiceClient
	Workspaces ctrlv1connect.WorkspaceServiceClient
	Egresses   ctrlv1connect.EgressServiceClient
	Resolvers  ctrlv1connect.ResolverServiceClient
	Transfers  ctrlv1connect.TransferServiceClient
	Nodes      operatorv1connect.NodeRegistrationServiceClient
	Enrollment operatorv1connect.EnrollmentServiceClient
	log        *slog.Logger
}

// Option changes the ctrl configuration.
type Option func(*ctrl.Config)

// WithFleet sets the node session timings.
func WithFleet(fc fleet.Config) Option { return func(c *ctrl.Config) { c.Fleet = fc } }

// OnDatabase puts ctrl's store on dsn (PostgreSQL or SQLite) instead of a
// SQLite file in its state directory.
func OnDatabase(dsn string) Option { return func(c *ctrl.Config) { c.Database = dsn } }

// WithMoveWait shortens how long a move call waits for its move.
func WithMoveWait(d time.Duration) Option { return func(c *ctrl.Config) { c.MoveWait = d } }

// FastFleet reports often enough for tests to see changes quickly, with
// room for a loaded machine (CI runs packages in parallel under -race): a
// session is live for three observation intervals, and the clock
// tolerance is far above scheduling noise (tests of skew skew by hours).
func FastFleet() Option {
	return WithFleet(fleet.Config{ObservationInterval: 500 * time.Millisecond, ClockProbeInterval: 250 * time.Millisecond, ClockTolerance: 10 * time.Second})
}

// Logger is quiet unless KIBOTOS_TEST_LOG is set; then it logs as the
// processes do, with the ids of each line's context.
func Logger() *slog.Logger {
	w := io.Discard
	if os.Getenv("KIBOTOS_TEST_LOG") != "" {
		w = os.Stderr
	}
	log, _ := telemetry.NewLogger(w, telemetry.LogText)
	return log
}

// New starts ctrl on free loopback ports with SQLite in a temporary directory.
func New(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	cfg := ctrl.Config{
		WorkspaceListen: "127.0.0.1:0", OperatorListen: "127.0.0.1:0", NodeListen: "127.0.0.1:0",
		StateDir: t.TempDir(), Logger: Logger(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := ctrl.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ws := connect.WithInterceptors(auth.Bearer(srv.Client.Token))
	op := connect.WithInterceptors(auth.Bearer(srv.Client.OperatorToken))
	return &Cluster{
		Ctrl:       srv,
		Volumes:    ctrlv1connect.NewVolumeServiceClient(http.DefaultClient, srv.Client.WorkspaceEndpoint, ws),
		Workspaces: ctrlv1connect.NewWorkspaceServiceClient(http.DefaultClient, srv.Client.WorkspaceEndpoint, ws),
		Egresses:   ctrlv1connect.NewEgressServiceClient(http.DefaultClient, srv.Client.WorkspaceEndpoint, ws),
		Resolvers:  ctrlv1connect.NewResolverServiceClient(http.DefaultClient, srv.Client.WorkspaceEndpoint, ws),
		Transfers:  ctrlv1connect.NewTransferServiceClient(http.DefaultClient, srv.Client.WorkspaceEndpoint, ws),
		Nodes:      operatorv1connect.NewNodeRegistrationServiceClient(http.DefaultClient, srv.Client.OperatorEndpoint, op),
		Enrollment: operatorv1connect.NewEnrollmentServiceClient(http.DefaultClient, srv.Client.OperatorEndpoint, op),
		log:        cfg.Logger,
	}
}

// Grant makes an enrollment grant bound to nodeID and returns its secret.
func (c *Cluster) Grant(t testing.TB, nodeID string) string {
	t.Helper()
	res, err := c.Enrollment.CreateEnrollmentGrant(context.Background(), connect.NewRequest(&operatorv1.CreateEnrollmentGrantRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: fmt.Sprintf("grant-%s-%d", nodeID, time.Now().UnixNano())}, NodeId: nodeID, Ttl: durationpb.New(time.Hour),
	}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetSecret()
}

// Node is a node agent running in this process.
type Node struct {
	ID       string
	StateDir string
	PoolDir  string
	stop     context.CancelFunc
	done     chan error
}

// DefaultPoolCapacity is the capacity StartNode gives pool "default" when
// it has none: room for every test's objects (block files are sparse).
const DefaultPoolCapacity = 1 << 40

// StartNode enrolls and runs a node agent with one default pool "default"
// (its own directory unless poolDir is given), and waits until it is READY.
// A pool takes no new objects until it has a capacity, so StartNode sets
// DefaultPoolCapacity on "default" when it has none, as kibotos dev does.
func (c *Cluster) StartNode(t testing.TB, id, stateDir, poolDir string) *Node {
	t.Helper()
	if poolDir == "" {
		poolDir = t.TempDir()
	}
	n := c.StartNodeWithPools(t, id, stateDir, node.Pool{Name: "default", Dir: poolDir, Default: true})
	c.EnsureCapacity(t, "default", DefaultPoolCapacity)
	return n
}

// StartNodeWithPools enrolls and runs a node agent declaring pools (the
// first pool's directory is PoolDir), and waits until it is READY. It sets
// no capacity.
func (c *Cluster) StartNodeWithPools(t testing.TB, id, stateDir string, pools ...node.Pool) *Node {
	t.Helper()
	return c.StartNodeWith(t, id, stateDir, nil, pools...)
}

// StartNodeWith is StartNodeWithPools with the agent's configuration
// changed by configure (when not nil) before it runs: a memory threshold,
// a skewed clock.
func (c *Cluster) StartNodeWith(t testing.TB, id, stateDir string, configure func(*node.Config), pools ...node.Pool) *Node {
	t.Helper()
	if stateDir == "" {
		stateDir = t.TempDir()
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{ID: id, StateDir: stateDir, stop: cancel, done: make(chan error, 1)}
	if len(pools) > 0 {
		n.PoolDir = pools[0].Dir
	}
	grant := c.Grant(t, id)
	log := c.log.With("node", id)
	network, err := userstack.NewNetwork(userstack.NetworkConfig{Uplink: NoUplink{}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Config{
		Endpoint: c.Ctrl.NodeEndpoint, NodeID: id, StateDir: stateDir, EnrollmentGrant: grant,
		Pools: pools, Provider: qemu.New(log, qemu.WithAccel(Accel(t))), Network: network, Logger: log,
	}
	if configure != nil {
		configure(&cfg)
	}
	go func() { n.done <- node.Run(ctx, cfg) }()
	// A VM outlives its agent by design; at the test's end none may go on
	// writing in the state directory the test removes.
	t.Cleanup(func() { n.Stop(t); powerOffAndWait(stateDir) })
	c.WaitStatus(t, id, operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY)
	return n
}

// EnsureCapacity sets pool's capacity to capacity unless it has one.
func (c *Cluster) EnsureCapacity(t testing.TB, pool string, capacity uint64) {
	t.Helper()
	got, err := c.Nodes.GetStoragePool(context.Background(), connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: pool}))
	if err != nil {
		t.Fatal(err)
	}
	if got.Msg.GetPool().CapacityBytes != nil {
		return
	}
	if _, err := c.Nodes.SetStoragePoolCapacity(context.Background(), connect.NewRequest(&operatorv1.SetStoragePoolCapacityRequest{
		Command:     &ctrlv1.CommandMetadata{CommandId: fmt.Sprintf("capacity-%s-%d", pool, time.Now().UnixNano())},
		StoragePool: pool, ExpectedVersion: got.Msg.GetPool().GetVersion(), CapacityBytes: capacity,
	})); err != nil {
		t.Fatal(err)
	}
}

// Stop stops the agent and waits for it to end.
func (n *Node) Stop(t testing.TB) {
	n.stop()
	if err := <-n.done; err != nil {
		t.Errorf("node %s: %v", n.ID, err)
	}
	n.done <- nil // a second Stop returns at once
}

// Registration reads a node's registration.
func (c *Cluster) Registration(t testing.TB, id string) *operatorv1.NodeRegistration {
	t.Helper()
	res, err := c.Nodes.GetNodeRegistration(context.Background(), connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: id}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetRegistration()
}

// WaitStatus waits until node id reports status.
func (c *Cluster) WaitStatus(t testing.TB, id string, status operatorv1.NodeRegistrationStatus) *operatorv1.NodeRegistration {
	t.Helper()
	var last *operatorv1.NodeRegistration
	WaitFor(t, fmt.Sprintf("node %s %s", id, status), func() bool {
		res, err := c.Nodes.GetNodeRegistration(context.Background(), connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: id}))
		if err != nil {
			return false
		}
		last = res.Msg.GetRegistration()
		return last.GetStatus() == status
	})
	return last
}

// WaitFor polls cond (a stored state, read through the API) until it holds.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PoolFile is where a node keeps a Volume's block file.
func (n *Node) PoolFile(volumeID string) string {
	return filepath.Join(n.PoolDir, "volumes", volumeID+".img")
}

// NoUplink is the uplink of the nodes StartNode runs: network slots whose
// admitted flows go nowhere (every dial and echo fails), so that no test
// reaches beyond this machine by accident. A test of the internet gives
// its node an uplink into a network namespace it made.
type NoUplink struct{}

var errNoUplink = errors.New("testenv: this node's uplink leads nowhere")

func (NoUplink) DialTCP(context.Context, netip.AddrPort) (net.Conn, error) { return nil, errNoUplink }
func (NoUplink) DialUDP(context.Context, netip.AddrPort) (net.Conn, error) { return nil, errNoUplink }
func (NoUplink) Echo(context.Context, netip.Addr, []byte) error            { return errNoUplink }

// H2CServer serves h on a loopback server speaking HTTP/1.1 and cleartext
// HTTP/2, as ctrl's endpoints do; it closes when the test ends.
func H2CServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}
