// Package ctrl is the control plane process: its listeners, credentials and
// the wiring of the API onto them.
package ctrl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/ctrl/api"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/ctrl/catalog"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/dataplane"
	"github.com/kibotos/kibotos/internal/ctrl/egress"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/metrics"
	"github.com/kibotos/kibotos/internal/ctrl/pool"
	"github.com/kibotos/kibotos/internal/ctrl/session"
	"github.com/kibotos/kibotos/internal/ctrl/transfer"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/telemetry"
)

// Config is what `kibotos ctrl` is started with.
type Config struct {
	// WorkspaceListen, OperatorListen and NodeListen are host:port addresses
	// for the Native Workspace, Operator and node endpoints. Port 0 picks a
	// free port.
	WorkspaceListen string
	OperatorListen  string
	NodeListen      string
	// StateDir holds ctrl's durable state: API keys, and endpoints.env with
	// the endpoints and the credentials made at first start.
	StateDir string
	// Database is a PostgreSQL DSN (postgres://…) or a SQLite file path;
	// empty is SQLite at <StateDir>/ctrl.db.
	Database string
	// Fleet tunes node sessions; zero values take fleet.DefaultConfig.
	Fleet fleet.Config
	// MoveWait is the longest a MoveVolume or MoveWritableLayer call waits
	// for its move to settle; zero is pool.MoveWait (one minute, as the
	// API reference says). Tests shorten it.
	MoveWait time.Duration
	// MaxMessageBytes is the largest request message an endpoint reads: a
	// unary request, each message of a stream (uploads stream chunks of
	// at most 4 MiB). A larger one is resource_exhausted naming the
	// limit. Zero is api.DefaultMaxMessageBytes (8 MiB); flag
	// --max-message-bytes.
	MaxMessageBytes int
	Logger          *slog.Logger
	// TracerProvider traces every endpoint's requests, the command
	// runner's steps and the node operations they send (their trace
	// context goes to the node); nil traces nothing and adds no
	// instrumentation (docs/OBSERVABILITY.md).
	TracerProvider trace.TracerProvider
}

// Server is a running ctrl.
type Server struct {
	cfg     Config
	servers []*http.Server
	errs    chan error
	store   *store.Store
	stop    context.CancelFunc
	done    chan struct{}

	closeOnce sync.Once
	// handlers are the requests being served, on every listener: Close
	// waits for them before it closes the database.
	handlers inflight
	catalog  *catalog.Catalog
	fleet    *fleet.Fleet
	metrics  *metrics.Metrics

	// Endpoints and credentials, as written to endpoints.env.
	Client clientconfig.Config
	// NewKeys is whether this start made the API keys in Client (the
	// first start, or one whose endpoints.env no longer held valid keys):
	// only then does `kibotos ctrl` or `kibotos dev` print them.
	NewKeys bool
	// NodeEndpoint is the URL nodes connect to.
	NodeEndpoint string
}

// EndpointsFile is where ctrl writes its endpoints and credentials.
func EndpointsFile(stateDir string) string { return filepath.Join(stateDir, "endpoints.env") }

// Start binds every listener and serves until ctx ends or Close is called.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	tokens, keys, newKeys, err := ensureCredentials(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	dsn := cfg.Database
	if dsn == "" {
		dsn = "sqlite:" + filepath.Join(cfg.StateDir, "ctrl.db")
	}
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if st.Exclusive() {
		// Nobody else can hold a lease on this database: the leases are
		// those of a ctrl that died, and its commands resume now.
		if err := st.Tx(ctx, func(tx *store.Tx) error { return tx.ReleaseLeases() }); err != nil {
			st.Close()
			return nil, err
		}
	}
	// The listeners first: the session service is built knowing the
	// Native Workspace endpoint's URL.
	var lns []net.Listener
	for _, l := range []struct{ name, addr string }{
		{"workspace", cfg.WorkspaceListen}, {"operator", cfg.OperatorListen}, {"node", cfg.NodeListen},
	} {
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			st.Close()
			return nil, fmt.Errorf("%s endpoint: %w", l.name, err)
		}
		lns = append(lns, ln)
	}
	// One registry per Server: tests run several ctrls in one process.
	// The background work carries it in its context (command admission
	// finds it there); the RPC interceptor puts it in each call's.
	m := metrics.New()
	// The tracer provider travels the same way, for the runner's spans.
	// The logger too, for command admission's line.
	workCtx, stop := context.WithCancel(telemetry.WithLogger(telemetry.NewContext(metrics.NewContext(context.WithoutCancel(ctx), m), cfg.TracerProvider), cfg.Logger))
	s := &Server{cfg: cfg, errs: make(chan error, 3), store: st, stop: stop, done: make(chan struct{}), NewKeys: newKeys, metrics: m}
	backend, err := newBackend(st, cfg, "http://"+lns[0].Addr().String(), m)
	if err == nil && st.Exclusive() {
		// Nobody else can hold a node's session either.
		err = backend.api.Fleet.EndOrphanedSessions(ctx)
	}
	if err == nil {
		err = m.Register(append(metrics.Store(st), metrics.NodeSessions(backend.api.Fleet.LiveSessions), metrics.Workspaces(st),
			metrics.QueueDepth(st), metrics.Pools(st), metrics.Guests(backend.api.Fleet.Guests))...)
	}
	if err != nil {
		stop()
		for _, ln := range lns {
			ln.Close()
		}
		st.Close()
		return nil, err
	}
	// GET /metrics takes the operator key, as the Operator endpoint's
	// services do (its Gate checks it first; this check keeps it so were
	// the handler mounted elsewhere). docs/METRICS.md says how to give a
	// scraper the key.
	backend.api.Metrics = auth.Gate(m.Handler(), auth.HeaderCheck(keys, auth.ScopeOperator))
	s.catalog, s.fleet = backend.catalog, backend.api.Fleet
	go func() {
		defer close(s.done)
		var background sync.WaitGroup
		defer background.Wait()
		background.Go(func() { backend.api.Workspaces.RunExpiration(workCtx, time.Second, cfg.Logger) })
		background.Go(func() { backend.api.Transfers.Run(workCtx, time.Second, cfg.Logger) })
		background.Go(func() { backend.api.Fleet.PollOperations(workCtx, time.Second) })
		background.Go(func() { backend.catalog.Run(workCtx) })
		backend.runner.Run(workCtx)
	}()
	cfg.Logger.Info("database", "kind", st.Dialect())
	listeners := []struct {
		name    string
		handler http.Handler
		url     *string
		// public: callers do not choose the trace (telemetry.Handler).
		public bool
		// frame is the largest HTTP/2 frame it takes, 0 for Go's default.
		frame int
	}{
		// Gate checks credentials from the headers before a body is read;
		// the interceptors check each call in full.
		// The metrics interceptor comes before authentication, so it
		// counts the calls that one refuses.
		{"workspace", auth.Gate(api.NewWorkspaceHandler(backend.api, telemetry.ErrorStatus(), m.Interceptor(), backend.api.Sessions.Interceptor(keys)), backend.api.Sessions.Gate(keys)), &s.Client.WorkspaceEndpoint, true, 0},
		{"operator", auth.Gate(api.NewOperatorHandler(backend.api, telemetry.ErrorStatus(), m.Interceptor(), auth.NewInterceptor(keys, auth.ScopeOperator)), auth.HeaderCheck(keys, auth.ScopeOperator)), &s.Client.OperatorEndpoint, true, 0},
		{"node", auth.Gate(api.NewNodeHandler(backend.api, telemetry.ErrorStatus(), m.Interceptor()), backend.api.Fleet.Gate()), &s.NodeEndpoint, false, nodeFrame},
	}
	// Every request's context carries the logger (command admission logs
	// with it), and nothing else of ctx: a request is not cancelled with it.
	requestBase := telemetry.WithLogger(context.Background(), cfg.Logger)
	for i, l := range listeners {
		ln := lns[i]
		*l.url = "http://" + ln.Addr().String()
		srv := newHTTPServer(s.handlers.track(telemetry.Handler(l.handler, cfg.TracerProvider, l.public)), requestBase, l.frame)
		s.servers = append(s.servers, srv)
		go func() { s.errs <- srv.Serve(ln) }()
		cfg.Logger.Info("listening", "endpoint", l.name, "url", *l.url)
	}
	s.Client.Token = tokens[auth.ScopeWorkspace]
	s.Client.OperatorToken = tokens[auth.ScopeOperator]
	if err := clientconfig.Write(EndpointsFile(cfg.StateDir), s.Client); err != nil {
		s.Close()
		return nil, fmt.Errorf("write endpoints: %w", err)
	}
	go func() {
		<-ctx.Done()
		s.Close()
	}()
	return s, nil
}

// newHTTPServer serves HTTP/1.1 and cleartext HTTP/2, so gRPC clients work
// without TLS on a trusted network. Put TLS in front for anything else.
// frame is the largest HTTP/2 frame it takes (0: Go's default, 1 MiB).
func newHTTPServer(h http.Handler, base context.Context, frame int) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return base }}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	if frame != 0 {
		srv.HTTP2 = &http.HTTP2Config{MaxReadFrameSize: frame}
	}
	return srv
}

// nodeFrame is the largest HTTP/2 frame the node endpoint takes. A Go
// client writing a stream whose length it does not know (a node's control
// session) holds a buffer as large as the frames its server takes, up to
// 512 KiB, for the stream's whole life: with Go's default of 1 MiB, 1,000
// simulated nodes in ctrl's process held 512 MiB of them, ctrl's garbage
// was never collected during a placement benchmark, and its heap grew
// into fresh memory instead (a page fault every few KiB allocated). 64 KiB
// keeps a node's part uploads (UploadTransferPart) as fast as before;
// 16 KiB, HTTP/2's default, slowed them by a seventh (docs/PERFORMANCE.md).
const nodeFrame = 64 << 10

// Wait blocks until a listener fails or the server is closed.
func (s *Server) Wait() error {
	err := <-s.errs
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops every listener and waits for the requests they were
// serving, stops the command runner and the background work, then closes
// the database: nothing uses it any more once Close returns. Admitted
// commands stay admitted: the next start resumes them.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for i, srv := range s.servers {
			// Node sessions are long-lived streams a node re-opens on its
			// own: cut them rather than wait for them to end.
			if i == nodeListener {
				_ = srv.Close()
				continue
			}
			if err := srv.Shutdown(ctx); err != nil {
				_ = srv.Close()
			}
		}
		// http.Server.Close does not wait for the handlers it cut off: a
		// node session's handler still records the lost session, and
		// would write after the database was closed (on SQLite, into
		// files the caller may be removing). They end once their
		// connection is gone; one that does not is given up on.
		select {
		case <-s.handlers.drained():
		case <-time.After(handlerDrain):
			s.cfg.Logger.Warn("requests still served after the listeners closed; closing the database under them")
		}
		s.stop()
		<-s.done
		s.store.Close()
	})
}

// handlerDrain bounds Close's wait for the requests its listeners were
// serving.
const handlerDrain = 10 * time.Second

// nodeListener is the index of the node endpoint among the listeners.
const nodeListener = 2

type backend struct {
	api     *api.Backend
	runner  *command.Runner
	catalog *catalog.Catalog
}

// newBackend wires the domain: one command runner, the fleet, the catalog,
// the Volumes and Workspaces, the data plane.
func newBackend(st *store.Store, cfg Config, workspaceEndpoint string, m *metrics.Metrics) (backend, error) {
	runner := command.NewRunner(st, replicaID(), cfg.Logger, command.WithMetrics(m))
	fc := cfg.Fleet
	if fc == (fleet.Config{}) {
		fc = fleet.DefaultConfig
	}
	cat, err := catalog.New(st, filepath.Join(cfg.StateDir, "artifacts"), runner, fc, cfg.Logger.With("component", "catalog"))
	if err != nil {
		return backend{}, err
	}
	var vols *volume.Service
	var ws *workspace.Service
	var pools *pool.Service
	f := fleet.New(st, runner, cfg.Logger, fc, fleet.Deps{
		Artifacts: cat,
		Executions: func(f *fleet.Fleet) fleet.Executions {
			vols = volume.New(st, f, runner, volume.DefaultProfile)
			ws = workspace.New(st, f, vols, runner)
			return ws
		},
		Moves: func(f *fleet.Fleet) fleet.Moves {
			pools = pool.New(st, runner, f, cfg.Logger.With("component", "pool"), cfg.MoveWait)
			return pools
		},
		Metrics: m,
	})
	transfers, err := transfer.New(st, transfer.Config{Dir: filepath.Join(cfg.StateDir, "artifacts", "transfers")}, transfer.Deps{Runner: runner, Fleet: f, Catalog: cat})
	if err != nil {
		return backend{}, err
	}
	return backend{
		api: &api.Backend{Fleet: f, Volumes: vols, Workspaces: ws, Processes: dataplane.NewProcesses(st, ws, f, cfg.TracerProvider), Sessions: session.New(st, workspaceEndpoint), Catalog: cat,
			Pools: pools, Egresses: egress.New(st, runner), Transfers: transfers, MaxMessageBytes: cfg.MaxMessageBytes},
		runner:  runner,
		catalog: cat,
	}, nil
}

// Catalog is this ctrl's catalog of platforms and templates.
func (s *Server) Catalog() *catalog.Catalog { return s.catalog }

// Fleet is this ctrl's nodes, and Store its database: tests of placement
// place through them directly.
func (s *Server) Fleet() *fleet.Fleet { return s.fleet }

// Store is this ctrl's database.
func (s *Server) Store() *store.Store { return s.store }

// Metrics is this ctrl's registry, served at GET /metrics on the Operator
// endpoint.
func (s *Server) Metrics() *metrics.Metrics { return s.metrics }

// replicaID names this process in command leases.
func replicaID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// ensureCredentials makes sure ctrl has one workspace and one operator key
// whose plaintext it knows (from an earlier endpoints.env), making new ones
// where it does not. It returns the plaintext tokens, the keyring, and
// whether it made a key. The keyring file is made private (0600) if an
// earlier version or a restore left it readable by others.
func ensureCredentials(stateDir string) (map[auth.Scope]string, *auth.Keyring, bool, error) {
	keyPath := filepath.Join(stateDir, "api-keys.json")
	keys, err := auth.LoadKeyring(keyPath)
	if err != nil {
		return nil, nil, false, err
	}
	if err := auth.MakePrivate(keyPath); err != nil {
		return nil, nil, false, err
	}
	known, _ := clientconfig.ReadEnvFile(EndpointsFile(stateDir))
	tokens := map[auth.Scope]string{
		auth.ScopeWorkspace: known[clientconfig.EnvToken],
		auth.ScopeOperator:  known[clientconfig.EnvOperatorToken],
	}
	changed := false
	for scope, token := range tokens {
		if token != "" && keys.Has(scope, token) {
			continue
		}
		token, err := auth.NewToken()
		if err != nil {
			return nil, nil, false, err
		}
		keys.Add(scope, token)
		tokens[scope] = token
		changed = true
	}
	if changed {
		if err := keys.Save(keyPath); err != nil {
			return nil, nil, false, err
		}
	}
	return tokens, keys, changed, nil
}

// inflight counts the requests being served, so Close can wait for them.
// Once Close waits, new requests are refused as unavailable.
type inflight struct {
	mu      sync.Mutex
	n       int
	idle    chan struct{} // closed once closing and no request is served
	closing bool
}

func (f *inflight) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.enter() {
			http.Error(w, "ctrl is shutting down", http.StatusServiceUnavailable)
			return
		}
		defer f.leave()
		h.ServeHTTP(w, r)
	})
}

func (f *inflight) enter() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return false
	}
	f.n++
	return true
}

func (f *inflight) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 && f.closing {
		close(f.idle)
	}
}

// drained refuses new requests and returns a channel closed once none is
// served.
func (f *inflight) drained() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closing {
		f.closing = true
		f.idle = make(chan struct{})
		if f.n == 0 {
			close(f.idle)
		}
	}
	return f.idle
}
