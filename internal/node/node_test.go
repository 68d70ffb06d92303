package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/node/blockfile"
	"github.com/kibotos/kibotos/internal/node/hostinfo"
	"github.com/kibotos/kibotos/internal/node/netslot/usernet"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
	"github.com/kibotos/kibotos/internal/testenv"
)

const (
	nodeID     = "node-1"
	grant      = "grant-secret"
	credential = "node-credential"
	timeout    = 20 * time.Second
	MiB        = 1 << 20
)

// fakeCtrl is a small in-process NodeSessionService.
type fakeCtrl struct {
	nodev1connect.UnimplementedNodeSessionServiceHandler
	interval time.Duration
	enrolls  chan *nodev1.EnrollRequest
	sessions chan *fakeSession
	refuse   error // Enroll answers it when set

	mu        sync.Mutex
	artifacts map[string]string // digest → file FetchArtifact serves
	// fetchGate, when set, holds every FetchArtifact until it is closed.
	fetchGate chan struct{}
	welcomes  int // sessions welcomed, for a data token each
}

type fakeSession struct {
	header    http.Header
	hello     *nodev1.NodeHello
	dataToken string
	// seen are the messages expect consumed, oldest first.
	seen []*nodev1.SessionRequest
	in   chan *nodev1.SessionRequest
	out  chan *nodev1.SessionResponse
	drop chan struct{}
}

func (f *fakeCtrl) Enroll(_ context.Context, req *connect.Request[nodev1.EnrollRequest]) (*connect.Response[nodev1.EnrollResponse], error) {
	f.enrolls <- req.Msg
	if f.refuse != nil {
		return nil, f.refuse
	}
	if req.Msg.GetGrantSecret() != grant {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("unknown grant"))
	}
	return connect.NewResponse(&nodev1.EnrollResponse{NodeId: req.Msg.GetNodeId(), Credential: credential}), nil
}

func (f *fakeCtrl) Session(ctx context.Context, stream *connect.BidiStream[nodev1.SessionRequest, nodev1.SessionResponse]) error {
	h := stream.RequestHeader()
	if h.Get("Authorization") != "Bearer "+credential || h.Get("Kibotos-Node-Id") != nodeID {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("bad node credential"))
	}
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	if first.GetHello() == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("first message is not hello"))
	}
	f.mu.Lock()
	f.welcomes++
	token := fmt.Sprintf("data-token-%d", f.welcomes)
	f.mu.Unlock()
	err = stream.Send(&nodev1.SessionResponse{Message: &nodev1.SessionResponse_Welcome{
		Welcome: &nodev1.SessionWelcome{ObservationInterval: durationpb.New(f.interval), DataToken: token},
	}})
	if err != nil {
		return err
	}
	s := &fakeSession{
		header:    h.Clone(),
		hello:     first.GetHello(),
		dataToken: token,
		in:        make(chan *nodev1.SessionRequest),
		out:       make(chan *nodev1.SessionResponse),
		drop:      make(chan struct{}),
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			msg, err := stream.Receive()
			if err != nil {
				return
			}
			select {
			case s.in <- msg:
			case <-done:
				return
			}
		}
	}()
	select {
	case f.sessions <- s:
	case <-ctx.Done():
		return nil
	}
	for {
		select {
		case msg := <-s.out:
			if err := stream.Send(msg); err != nil {
				return err
			}
		case <-s.drop:
			return connect.NewError(connect.CodeUnavailable, errors.New("dropped by the test"))
		case <-ctx.Done():
			return nil
		}
	}
}

// FetchArtifact serves the files registered in artifacts.
func (f *fakeCtrl) FetchArtifact(ctx context.Context, req *connect.Request[nodev1.FetchArtifactRequest], stream *connect.ServerStream[nodev1.FetchArtifactResponse]) error {
	h := req.Header()
	if h.Get("Authorization") != "Bearer "+credential || h.Get("Kibotos-Node-Id") != nodeID {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("bad node credential"))
	}
	f.mu.Lock()
	path, ok := f.artifacts[req.Msg.GetDigest()]
	gate := f.fetchGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !ok {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("no artifact %s", req.Msg.GetDigest()))
	}
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for off := int64(req.Msg.GetOffset()); off < fi.Size(); {
		n, err := file.ReadAt(buf, off)
		if n == 0 && err != nil {
			return err
		}
		if err := stream.Send(&nodev1.FetchArtifactResponse{Offset: uint64(off), Data: buf[:n], TotalBytes: uint64(fi.Size())}); err != nil {
			return err
		}
		off += int64(n)
	}
	return nil
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func (s *fakeSession) send(t *testing.T, msg *nodev1.SessionResponse) {
	t.Helper()
	select {
	case s.out <- msg:
	case <-time.After(timeout):
		t.Fatal("timed out sending to the node")
	}
}

// expect returns the next message from the node that match accepts,
// skipping others (observations arrive at any time).
func (s *fakeSession) expect(t *testing.T, what string, match func(*nodev1.SessionRequest) bool) *nodev1.SessionRequest {
	t.Helper()
	return s.expectWithin(t, timeout, what, match)
}

func (s *fakeSession) expectWithin(t *testing.T, d time.Duration, what string, match func(*nodev1.SessionRequest) bool) *nodev1.SessionRequest {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case msg := <-s.in:
			s.seen = append(s.seen, msg)
			if match(msg) {
				return msg
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (s *fakeSession) command(t *testing.T, opID string, body proto.Message) *nodev1.CommandResult {
	t.Helper()
	return s.commandWithin(t, timeout, opID, body)
}

// commandWithin sends a command and waits up to d for its result.
func (s *fakeSession) commandWithin(t *testing.T, d time.Duration, opID string, body proto.Message) *nodev1.CommandResult {
	t.Helper()
	a, err := anypb.New(body)
	if err != nil {
		t.Fatal(err)
	}
	s.send(t, &nodev1.SessionResponse{Message: &nodev1.SessionResponse_Command{
		Command: &nodev1.NodeCommand{OperationId: opID, CommandId: "cmd-" + opID, Body: a},
	}})
	msg := s.expectWithin(t, d, "result of "+opID, func(m *nodev1.SessionRequest) bool {
		return m.GetCommandResult().GetOperationId() == opID
	})
	return msg.GetCommandResult()
}

type harness struct {
	t        *testing.T
	ctrl     *fakeCtrl
	url      string
	stateDir string
	poolDir  string
}

func newHarness(t *testing.T) *harness {
	ctrl := &fakeCtrl{
		interval:  20 * time.Millisecond,
		enrolls:   make(chan *nodev1.EnrollRequest, 10),
		sessions:  make(chan *fakeSession),
		artifacts: map[string]string{},
	}
	mux := http.NewServeMux()
	mux.Handle(nodev1connect.NewNodeSessionServiceHandler(ctrl))
	srv := testenv.H2CServer(t, mux) // ctrl's node endpoint serves h2c; so does the fake
	return &harness{t: t, ctrl: ctrl, url: srv.URL, stateDir: t.TempDir(), poolDir: t.TempDir()}
}

func (h *harness) config() node.Config {
	log := slog.New(slog.NewTextHandler(h.t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	return node.Config{
		Endpoint:        h.url,
		NodeID:          nodeID,
		StateDir:        h.stateDir,
		EnrollmentGrant: grant,
		Pools:           []node.Pool{{Name: "local", Dir: h.poolDir, Default: true}},
		Provider:        qemu.New(log, qemu.WithAccel(testenv.Accel(h.t))),
		Network:         usernet.New(),
		Logger:          log,
	}
}

// start runs the agent until the returned stop is called (or the test
// ends); stop returns Run's error.
func (h *harness) start(cfg node.Config) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := node.Run(ctx, cfg)
		if ctx.Err() == nil {
			// Ended on its own: say why, or a test waiting for its session
			// only times out.
			h.t.Logf("node.Run returned before its stop: %v", err)
		}
		done <- err
	}()
	var err error
	stopped := false
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			err = recv(h.t, done, "Run to return")
		}
		return err
	}
	h.t.Cleanup(func() { stop() })
	return stop
}

func ensureOp(pool, objectID string, capacity uint64) *nodev1.EnsureBlockFile {
	return &nodev1.EnsureBlockFile{
		Ref:           &nodev1.BlockFileRef{StoragePool: pool, Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME, ObjectId: objectID},
		CapacityBytes: capacity,
	}
}

func status(t *testing.T, res *nodev1.CommandResult) *nodev1.BlockFileStatus {
	t.Helper()
	var st nodev1.BlockFileStatus
	if err := res.GetResult().UnmarshalTo(&st); err != nil {
		t.Fatalf("result %v: %v", res, err)
	}
	return &st
}

func needE2fsprogs(t *testing.T) {
	if _, err := blockfile.FindTools(); err != nil {
		t.Skipf("e2fsprogs not available: %v", err)
	}
}

func TestSession(t *testing.T) {
	needE2fsprogs(t)
	h := newHarness(t)
	h.start(h.config())

	enroll := recv(t, h.ctrl.enrolls, "Enroll")
	if enroll.GetGrantSecret() != grant || enroll.GetNodeId() != nodeID || enroll.GetIncarnation() != 1 {
		t.Fatalf("enroll request %v", enroll)
	}

	s := recv(t, h.ctrl.sessions, "session")
	hello := s.hello
	if hello.GetNodeId() != nodeID || hello.GetIncarnation() != 1 {
		t.Fatalf("hello %v", hello)
	}
	if !slices.Contains(hello.GetCapabilities(), capability.BlockFile) {
		t.Errorf("capabilities %v", hello.GetCapabilities())
	}
	if want := uint32(hostinfo.CPUs() * 1000); hello.GetResources().GetCpuMillis() != want {
		t.Errorf("cpu_millis %d, want %d", hello.GetResources().GetCpuMillis(), want)
	}
	if hello.GetResources().GetMemoryBytes() == 0 || hello.GetResources().GetDiskBytes() == 0 {
		t.Errorf("resources %v", hello.GetResources())
	}
	if bootID, _ := hostinfo.BootID(); hello.GetBootId() != bootID || bootID == "" {
		t.Errorf("boot_id %q, want %q", hello.GetBootId(), bootID)
	}
	if hello.GetAgentVersion() == "" {
		t.Error("no agent_version")
	}
	pools := hello.GetStoragePools()
	if len(pools) != 1 {
		t.Fatalf("storage pools %v", pools)
	}
	if p := pools[0]; p.GetStoragePool() != "local" || !p.GetDefaultPool() || !p.GetAvailable() ||
		p.FilesystemSizeBytes == nil || p.FilesystemFreeBytes == nil || p.GetFilesystemFreeBytes() > p.GetFilesystemSizeBytes() {
		t.Errorf("pool declaration %v", p)
	}

	obs := s.expect(t, "observation", func(m *nodev1.SessionRequest) bool { return m.GetObservation() != nil }).GetObservation()
	if obs.MemoryAvailableBytes == nil || len(obs.GetStoragePools()) != 1 {
		t.Errorf("observation %v", obs)
	}
	if _, err := os.Stat("/proc/pressure/memory"); err == nil && obs.MemoryPressureSomeBasisPoints == nil {
		t.Errorf("observation without memory pressure: %v", obs)
	}

	before := time.Now()
	s.send(t, &nodev1.SessionResponse{Message: &nodev1.SessionResponse_ClockProbe{ClockProbe: &nodev1.ClockProbe{ProbeId: 7}}})
	reply := s.expect(t, "clock reply", func(m *nodev1.SessionRequest) bool { return m.GetClockReply() != nil }).GetClockReply()
	after := time.Now()
	if reply.GetProbeId() != 7 {
		t.Errorf("clock reply for probe %d", reply.GetProbeId())
	}
	if nt := reply.GetNodeTime().AsTime(); nt.Before(before) || nt.After(after) {
		t.Errorf("node_time %v outside [%v, %v]", nt, before, after)
	}
	if reply.GetSynchronization() == nodev1.ClockSynchronization_CLOCK_SYNCHRONIZATION_UNSPECIFIED {
		t.Errorf("clock synchronization unspecified")
	}

	res := s.command(t, "op-1", ensureOp("local", "vol-1", 64*MiB))
	if res.GetCode() != 0 {
		t.Fatalf("EnsureBlockFile: %v", res)
	}
	if st := status(t, res); !st.GetExists() || st.GetCapacityBytes() != 64*MiB || st.GetAllocatedBytes() == 0 {
		t.Errorf("status %v", st)
	}
	path := filepath.Join(h.poolDir, "volumes", "vol-1.img")
	if n, err := blockfile.FilesystemBytes(path); err != nil || n != 64*MiB {
		t.Fatalf("volume filesystem %d bytes, %v", n, err)
	}

	// The stream drops: the agent reconnects with the same incarnation.
	close(s.drop)
	s = recv(t, h.ctrl.sessions, "second session")
	if s.hello.GetIncarnation() != 1 || s.hello.GetNodeId() != nodeID {
		t.Fatalf("hello after reconnect %v", s.hello)
	}
	if len(h.ctrl.enrolls) != 0 {
		t.Fatal("the agent enrolled again")
	}

	res = s.command(t, "op-2", &nodev1.RemoveBlockFile{Ref: ensureOp("local", "vol-1", 0).GetRef()})
	if res.GetCode() != 0 || status(t, res).GetExists() {
		t.Fatalf("RemoveBlockFile: %v", res)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("volume still there: %v", err)
	}
}

func TestCommandErrors(t *testing.T) {
	needE2fsprogs(t)
	h := newHarness(t)
	cfg := h.config()
	lateDir := filepath.Join(h.poolDir, "late") // not there yet, like an unmounted pool
	cfg.Pools = append(cfg.Pools, node.Pool{Name: "late", Dir: lateDir})
	h.start(cfg)
	s := recv(t, h.ctrl.sessions, "session")
	if p := s.hello.GetStoragePools(); len(p) != 2 || p[1].GetAvailable() || p[1].FilesystemSizeBytes != nil {
		t.Errorf("pool declarations %v, want late unavailable", p)
	}

	for _, tc := range []struct {
		opID string
		body proto.Message
		code connect.Code
	}{
		{"unknown", &nodev1.ClockProbe{ProbeId: 1}, connect.CodeUnimplemented},
		{"no-pool", ensureOp("elsewhere", "vol-1", 8*MiB), connect.CodeNotFound},
		{"bad-id", ensureOp("local", "../vol", 8*MiB), connect.CodeInvalidArgument},
		{"no-kind", &nodev1.EnsureBlockFile{Ref: &nodev1.BlockFileRef{StoragePool: "local", ObjectId: "v"}, CapacityBytes: 8 * MiB}, connect.CodeInvalidArgument},
		{"tiny", ensureOp("local", "vol-1", 1), connect.CodeInvalidArgument},
	} {
		res := s.command(t, tc.opID, tc.body)
		if connect.Code(res.GetCode()) != tc.code || res.GetMessage() == "" {
			t.Errorf("%s: code %v %q, want %v", tc.opID, connect.Code(res.GetCode()), res.GetMessage(), tc.code)
		}
	}

	if res := s.command(t, "grow", ensureOp("local", "vol-1", 16*MiB)); res.GetCode() != 0 {
		t.Fatalf("create: %v", res)
	}
	res := s.command(t, "shrink", ensureOp("local", "vol-1", 8*MiB))
	if connect.Code(res.GetCode()) != connect.CodeFailedPrecondition {
		t.Fatalf("shrink: %v", res)
	}
	if st := status(t, res); st.GetCapacityBytes() != 16*MiB {
		t.Errorf("shrink answered status %v, want the file's", st)
	}

	// A failure is not recorded: the same operation, once possible, applies.
	res = s.command(t, "late-op", ensureOp("late", "vol-2", 8*MiB))
	if connect.Code(res.GetCode()) != connect.CodeUnavailable {
		t.Fatalf("ensure in a missing pool directory: %v", res)
	}
	if _, err := os.Stat(lateDir); !os.IsNotExist(err) {
		t.Fatalf("the agent created the pool directory: %v", err)
	}
	if err := os.Mkdir(lateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if res := s.command(t, "late-op", ensureOp("late", "vol-2", 8*MiB)); res.GetCode() != 0 {
		t.Fatalf("the same operation once the pool is there: %v", res)
	}
}

func TestOperationAppliedOnce(t *testing.T) {
	needE2fsprogs(t)
	h := newHarness(t)
	stop := h.start(h.config())
	s := recv(t, h.ctrl.sessions, "session")

	first := s.command(t, "op-create", ensureOp("local", "vol-1", 32*MiB))
	if first.GetCode() != 0 {
		t.Fatalf("EnsureBlockFile: %v", first)
	}
	path := filepath.Join(h.poolDir, "volumes", "vol-1.img")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}

	again := s.command(t, "op-create", ensureOp("local", "vol-1", 32*MiB))
	if !proto.Equal(first, again) {
		t.Fatalf("replay answered %v, want the recorded %v", again, first)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the replayed operation recreated the file: %v", err)
	}

	// The record outlives the agent: a restart (new incarnation, no
	// enrollment) answers from it too.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	cfg := h.config()
	cfg.EnrollmentGrant = ""
	cfg.Endpoint = "" // the stored one
	h.start(cfg)
	s = recv(t, h.ctrl.sessions, "session after restart")
	if s.hello.GetIncarnation() != 2 {
		t.Fatalf("incarnation after restart %d, want 2", s.hello.GetIncarnation())
	}
	again = s.command(t, "op-create", ensureOp("local", "vol-1", 32*MiB))
	if !proto.Equal(first, again) {
		t.Fatalf("replay after restart answered %v, want %v", again, first)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the replayed operation recreated the file: %v", err)
	}
	if len(h.ctrl.enrolls) != 1 {
		t.Fatalf("%d enrollments, want 1", len(h.ctrl.enrolls))
	}
}

func TestEnrollRefused(t *testing.T) {
	h := newHarness(t)
	h.ctrl.refuse = connect.NewError(connect.CodePermissionDenied, errors.New("grant consumed"))
	// Run gives up by itself: the context only bounds the test.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := node.Run(ctx, h.config())
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("Run: %v, want permission_denied", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run returned only when the test's context ended")
	}
	if req := recv(t, h.ctrl.enrolls, "Enroll"); req.GetGrantSecret() != grant {
		t.Fatalf("enroll request %v", req)
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	h := newHarness(t)
	for name, mutate := range map[string]func(*node.Config){
		"no grant":        func(c *node.Config) { c.EnrollmentGrant = "" },
		"bad node id":     func(c *node.Config) { c.NodeID = "Node_1" },
		"no endpoint":     func(c *node.Config) { c.Endpoint = "" },
		"bad endpoint":    func(c *node.Config) { c.Endpoint = "ftp://x" },
		"no state dir":    func(c *node.Config) { c.StateDir = "" },
		"two defaults":    func(c *node.Config) { c.Pools = append(c.Pools, node.Pool{Name: "b", Dir: "/b", Default: true}) },
		"duplicate pools": func(c *node.Config) { c.Pools = append(c.Pools, c.Pools[0]) },
	} {
		cfg := h.config()
		cfg.StateDir = t.TempDir()
		mutate(&cfg)
		if err := node.Run(context.Background(), cfg); err == nil {
			t.Errorf("%s: Run started", name)
		}
	}
}

// A node's only pool is its default; of several, only the one named is.
func TestParsePools(t *testing.T) {
	for _, c := range []struct {
		flags []string
		want  []node.Pool
	}{
		{nil, []node.Pool{}},
		{[]string{"fast=/mnt/fast"}, []node.Pool{{Name: "fast", Dir: "/mnt/fast", Default: true}}},
		{[]string{"fast=/mnt/fast,default"}, []node.Pool{{Name: "fast", Dir: "/mnt/fast", Default: true}}},
		{[]string{"fast=/mnt/fast", "slow=/mnt/slow"}, []node.Pool{{Name: "fast", Dir: "/mnt/fast"}, {Name: "slow", Dir: "/mnt/slow"}}},
		{[]string{"fast=/mnt/fast", "slow=/mnt/slow,default"}, []node.Pool{{Name: "fast", Dir: "/mnt/fast"}, {Name: "slow", Dir: "/mnt/slow", Default: true}}},
	} {
		got, err := node.ParsePools(c.flags)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %+v %v, want %+v", c.flags, got, err, c.want)
		}
	}
	if _, err := node.ParsePools([]string{"fast=/mnt/fast", "bad"}); err == nil || !strings.Contains(err.Error(), "--pool bad") {
		t.Errorf("a bad flag: %v, want an error naming it", err)
	}
}

func TestParsePool(t *testing.T) {
	for in, want := range map[string]node.Pool{
		"local=/var/lib/kibotos/pool":          {Name: "local", Dir: "/var/lib/kibotos/pool"},
		"local=/var/lib/kibotos/pool/,default": {Name: "local", Dir: "/var/lib/kibotos/pool", Default: true},
		"nfs-1=/mnt/a,b":                       {Name: "nfs-1", Dir: "/mnt/a,b"},
	} {
		got, err := node.ParsePool(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "local", "local=relative", "Local=/x", "=/x", "local=", "local=,default"} {
		if _, err := node.ParsePool(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
