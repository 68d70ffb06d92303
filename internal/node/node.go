// Package node is the node agent (`kibotos node`): it enrolls with ctrl,
// holds its control session, reports the host and its storage pools, and
// applies the operations ctrl hands it, each at most once: block files,
// and executions (VMs of the configured provider, see vms.go and
// package vm) booted from artifacts
// it fetches from ctrl (package artifact). It serves ctrl's calls into the
// executions on its data endpoint (dataplane.go).
//
// The protocol is kibotos.node.v1 (proto/kibotos/node/v1). Local state
// lives in the state directory (see package state), with the artifact
// cache in its artifacts/ and the executions' run directories in its
// executions/; block files live in the storage pools (see package
// blockfile). The VMs run in their own sessions: stopping the agent never
// stops them, and the next run takes them back.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/node/artifact"
	"github.com/kibotos/kibotos/internal/node/blockfile"
	"github.com/kibotos/kibotos/internal/node/hostinfo"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/state"
	"github.com/kibotos/kibotos/internal/node/vm"
	"github.com/kibotos/kibotos/internal/telemetry"
)

// Pool is a storage pool the node declares: a directory on local disk or
// on shared storage.
type Pool struct {
	Name    string
	Dir     string
	Default bool
}

// Config configures Run.
type Config struct {
	// Endpoint is ctrl's node endpoint, e.g. http://127.0.0.1:7672 (h2c)
	// or https://ctrl.example:7672. Empty means the one stored in the state
	// directory by an earlier run.
	Endpoint string
	// NodeID is the node's identity, a DNS label:
	// [a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?
	NodeID string
	// StateDir is the agent's local state directory; it is created when
	// missing and locked while Run runs.
	StateDir string
	// EnrollmentGrant is the grant secret Run enrolls with, used only when
	// the state directory holds no credential yet.
	EnrollmentGrant string
	// Pools are the storage pools the node declares; at most one is Default.
	Pools []Pool
	// DataListen is the address the data endpoint (NodeDataService, for
	// ctrl) listens on; empty is DefaultDataListen, 127.0.0.1:0.
	DataListen string
	// DataEndpoint is the URL the node reports for its data endpoint;
	// empty derives it from the listener (http://<address>, the host name
	// for a wildcard address).
	DataEndpoint string
	// MemoryTightThreshold is the available host memory (MemAvailable)
	// below which the node judges its memory too tight for new Workspaces:
	// it refuses to start them, and ctrl places none here. Zero is
	// DefaultMemoryTightThreshold.
	MemoryTightThreshold uint64
	// Provider runs the executions' VMs (internal/node/vm); nil runs none,
	// and the node does not advertise running VMs. The node core names no
	// provider: the wiring chooses one (internal/node/vm/qemu).
	Provider vm.Provider
	// Network makes the executions' network attachments
	// (internal/node/netslot), chosen by the wiring as Provider is
	// (internal/node/netslot/usernet).
	Network netslot.Network
	// MetricsListener, when set, serves the node's Prometheus metrics at
	// GET /metrics, without authentication (ListenMetrics opens one on a
	// loopback address only); Run closes it. nil serves none.
	MetricsListener net.Listener
	// Now is the node's wall clock, which it answers ctrl's clock probes
	// with; nil is time.Now. (Tests skew it.)
	Now    func() time.Time
	Logger *slog.Logger
	// TracerProvider traces the node's calls to ctrl (its session, its
	// fetches), its data endpoint's requests and the operations ctrl sends
	// it, each under the trace of the ctrl command step that sent it; nil
	// traces nothing and adds no instrumentation.
	TracerProvider trace.TracerProvider
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ParsePools parses the --pool flags of a node. A node declaring one pool
// has it as its default, ",default" or not: a new Workspace's first
// writable layer goes to its node's default pool, and a node whose only
// pool was not its default took no such Workspace, which no operator
// declaring one pool meant. With several, the default is named.
func ParsePools(flags []string) ([]Pool, error) {
	pools := make([]Pool, 0, len(flags))
	for _, f := range flags {
		p, err := ParsePool(f)
		if err != nil {
			return nil, fmt.Errorf("--pool %s: %w", f, err)
		}
		pools = append(pools, p)
	}
	if len(pools) == 1 {
		pools[0].Default = true
	}
	return pools, nil
}

// ParsePool parses a --pool flag: "name=/dir" or "name=/dir,default".
func ParsePool(s string) (Pool, error) {
	name, dir, ok := strings.Cut(s, "=")
	if !ok {
		return Pool{}, errors.New("want name=/dir or name=/dir,default")
	}
	p := Pool{Name: name}
	if d, isDefault := strings.CutSuffix(dir, ",default"); isDefault {
		dir, p.Default = d, true
	}
	if !dnsLabel.MatchString(name) {
		return Pool{}, fmt.Errorf("pool name %q is not a DNS label ([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)", name)
	}
	if !filepath.IsAbs(dir) {
		return Pool{}, fmt.Errorf("pool directory %q is not an absolute path", dir)
	}
	p.Dir = filepath.Clean(dir)
	return p, nil
}

func (cfg *Config) validate() error {
	if !dnsLabel.MatchString(cfg.NodeID) {
		return fmt.Errorf("node id %q is not a DNS label ([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)", cfg.NodeID)
	}
	if cfg.StateDir == "" {
		return errors.New("no state directory")
	}
	names := map[string]bool{}
	defaults := 0
	for _, p := range cfg.Pools {
		if !dnsLabel.MatchString(p.Name) {
			return fmt.Errorf("pool name %q is not a DNS label", p.Name)
		}
		if !filepath.IsAbs(p.Dir) {
			return fmt.Errorf("pool %s: directory %q is not an absolute path", p.Name, p.Dir)
		}
		if names[p.Name] {
			return fmt.Errorf("pool %s declared twice", p.Name)
		}
		names[p.Name] = true
		if p.Default {
			defaults++
		}
	}
	if defaults > 1 {
		return errors.New("more than one default pool")
	}
	return nil
}

func checkEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("ctrl endpoint %q: %w", endpoint, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("ctrl endpoint %q: want http://host:port or https://host:port", endpoint)
	}
	return nil
}

// newHTTPClient speaks HTTP/2 only: over TLS for https:// and cleartext
// (h2c, prior knowledge) for http://, as ctrl's node endpoint serves. Pings
// find a dead connection that would otherwise leave the session hanging.
func newHTTPClient() *http.Client {
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
	return &http.Client{Transport: t}
}

// agent is one run of Run.
type agent struct {
	cfg    Config
	log    *slog.Logger
	store  *state.Store
	client nodev1connect.NodeSessionServiceClient
	// bulk is client without gzip: the block data of a Transfer's parts
	// (sparse images, often random) gains nothing from it and costs the
	// CPU most of a restore's time (bench/transfer's profile).
	bulk        nodev1connect.NodeSessionServiceClient
	incarnation uint64
	bootID      string
	blocks      *blockfile.Manager // nil when e2fsprogs is missing
	pools       map[string]Pool
	lanes       *commandLanes
	artifacts   *artifact.Cache
	vms         *vmSet
	data        *dataServer
	// dataToken is the data token of the latest session welcome.
	dataToken atomic.Pointer[string]
	// current is the control session in use, nil between sessions.
	current atomic.Pointer[session]
	host    *hostWatch
	metrics *nodeMetrics
}

// Enrolled reports whether the state directory dir holds a credential,
// so that an agent started on it needs no enrollment grant. It takes the
// directory's lock for the read: it fails while an agent runs there.
func Enrolled(dir string) (bool, error) {
	store, err := state.Open(dir)
	if err != nil {
		return false, err
	}
	defer store.Close()
	return store.Identity().Credential != "", nil
}

// Run runs the node agent until ctx ends, then returns nil. It returns an
// error when it cannot start (bad configuration, state directory in use,
// no credential and no grant) or when ctrl refuses enrollment for good.
// Connection failures are retried with backoff, never returned.
func Run(ctx context.Context, cfg Config) error {
	return run(ctx, cfg, newHTTPClient())
}

func run(ctx context.Context, cfg Config, httpClient *http.Client) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("node_id", cfg.NodeID)
	if cfg.TracerProvider != nil {
		traced := *httpClient
		traced.Transport = telemetry.Transport(httpClient.Transport, cfg.TracerProvider)
		httpClient = &traced
	}

	store, err := state.Open(cfg.StateDir)
	if err != nil {
		return err
	}
	defer store.Close()

	stored := store.Identity()
	if stored.NodeID != "" && stored.NodeID != cfg.NodeID {
		return fmt.Errorf("state directory %s belongs to node %q, not %q", cfg.StateDir, stored.NodeID, cfg.NodeID)
	}
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = stored.Endpoint
	}
	if endpoint == "" {
		return errors.New("no ctrl endpoint given and none stored in the state directory")
	}
	if err := checkEndpoint(endpoint); err != nil {
		return err
	}
	if stored.Credential == "" && cfg.EnrollmentGrant == "" {
		return errors.New("the node is not enrolled yet: give it an enrollment grant")
	}

	var incarnation uint64
	err = store.Update(func(id *state.Identity) {
		id.NodeID = cfg.NodeID
		id.Endpoint = endpoint
		id.Incarnation++
		incarnation = id.Incarnation
	})
	if err != nil {
		return fmt.Errorf("store incarnation: %w", err)
	}
	log = log.With("incarnation", incarnation)

	a := &agent{
		cfg:    cfg,
		log:    log,
		store:  store,
		client: nodev1connect.NewNodeSessionServiceClient(httpClient, strings.TrimSuffix(endpoint, "/")),
		bulk: nodev1connect.NewNodeSessionServiceClient(httpClient, strings.TrimSuffix(endpoint, "/"),
			connect.WithAcceptCompression("gzip", nil, nil)),
		incarnation: incarnation,
		pools:       map[string]Pool{},
	}
	if a.cfg.Now == nil {
		a.cfg.Now = time.Now
	}
	a.host = newHostWatch(cfg.MemoryTightThreshold, a.cfg.Now)
	a.metrics = newNodeMetrics(func() (int, int) { return a.vms.probeCounts() })
	for _, p := range cfg.Pools {
		a.pools[p.Name] = p
	}
	if a.bootID, err = hostinfo.BootID(); err != nil {
		log.Warn("cannot read the boot id", "err", err)
	}
	if a.blocks, err = blockfile.New(); err != nil {
		log.Warn("block files unavailable: not advertising "+capability.BlockFile, "err", err)
		a.blocks = nil
	}
	for _, p := range cfg.Pools {
		if !hostinfo.Writable(p.Dir) {
			log.Warn("storage pool directory is not writable now; declared unavailable", "pool", p.Name, "dir", p.Dir)
		}
	}
	log.Info("node agent starting", "endpoint", endpoint, "state_dir", cfg.StateDir, "pools", len(cfg.Pools))
	if !slices.ContainsFunc(cfg.Pools, func(p Pool) bool { return p.Default }) {
		// ctrl places a new Workspace without a Volume only on a node with
		// a default pool: its first writable layer goes there.
		log.Warn("no default storage pool (one of several --pool flags NAME=DIR,default): ctrl places here no Workspace whose new writable layer has no Volume to go beside")
	}

	// The executions first: the first hello lists those still running.
	if a.vms, err = newVMSet(ctx, a); err != nil {
		return fmt.Errorf("executions: %w", err)
	}
	defer a.vms.detach()
	if err := a.vms.reattach(); err != nil {
		return fmt.Errorf("re-attach executions: %w", err)
	}
	if ln := cfg.MetricsListener; ln != nil {
		defer a.metrics.serve(ln, log)()
		log.Info("metrics listening", "url", "http://"+ln.Addr().String()+"/metrics")
	}
	a.artifacts, err = artifact.New(ctx, artifact.Config{
		Dir: filepath.Join(cfg.StateDir, "artifacts"),
		// Artifacts are kernels and file system images: compressing them
		// in flight costs far more CPU than it saves, so the node does
		// not accept gzip for them.
		Client: nodev1connect.NewNodeSessionServiceClient(httpClient, strings.TrimSuffix(endpoint, "/"),
			connect.WithAcceptCompression("gzip", nil, nil)),
		Header: a.authHeader,
		Logger: log,
	})
	if err != nil {
		return fmt.Errorf("artifact cache: %w", err)
	}
	if a.data, err = startDataServer(a); err != nil {
		return err
	}
	defer a.data.close()

	if store.Identity().Credential == "" {
		if err := a.enroll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}

	a.lanes = newCommandLanes(a)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.lanes.run(ctx)
	}()
	a.sessions(ctx)
	<-done
	log.Info("node agent stopped")
	return nil
}

// authHeader sets the headers that authenticate the node to ctrl.
func (a *agent) authHeader(h http.Header) {
	h.Set("Authorization", "Bearer "+a.store.Identity().Credential)
	h.Set("Kibotos-Node-Id", a.cfg.NodeID)
}

// enroll exchanges the grant for a credential and stores it, retrying
// while ctrl cannot be reached.
func (a *agent) enroll(ctx context.Context) error {
	b := newBackoff()
	for {
		resp, err := a.client.Enroll(ctx, connect.NewRequest(&nodev1.EnrollRequest{
			GrantSecret: a.cfg.EnrollmentGrant,
			NodeId:      a.cfg.NodeID,
			Incarnation: a.incarnation,
		}))
		if err == nil {
			msg := resp.Msg
			if msg.GetNodeId() != "" && msg.GetNodeId() != a.cfg.NodeID {
				return fmt.Errorf("enroll: ctrl answered node id %q for %q", msg.GetNodeId(), a.cfg.NodeID)
			}
			if msg.GetCredential() == "" {
				return errors.New("enroll: ctrl answered no credential")
			}
			if err := a.store.Update(func(id *state.Identity) { id.Credential = msg.GetCredential() }); err != nil {
				return fmt.Errorf("store credential: %w", err)
			}
			a.log.Info("enrolled")
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch connect.CodeOf(err) {
		case connect.CodePermissionDenied, connect.CodeUnauthenticated, connect.CodeInvalidArgument,
			connect.CodeNotFound, connect.CodeUnimplemented:
			return fmt.Errorf("enroll: %w", err)
		}
		d := b.next()
		a.log.Warn("enroll failed; retrying", "err", err, "retry_in", d)
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
}

// sessions holds the control session until ctx ends, reconnecting with
// backoff.
func (a *agent) sessions(ctx context.Context) {
	b := newBackoff()
	for {
		welcomed, err := a.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if welcomed {
			b.reset()
		}
		d := b.next()
		switch code := connect.CodeOf(err); code {
		case connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeFailedPrecondition:
			a.log.Error("ctrl refused the session; retrying", "code", code, "err", err, "retry_in", d)
		default:
			a.log.Warn("session ended; reconnecting", "err", err, "retry_in", d)
		}
		if !sleep(ctx, d) {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
