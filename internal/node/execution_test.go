package node_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/guestchan"
	"github.com/kibotos/kibotos/internal/testenv"
)

// bootWait bounds a StartExecution that boots a VM under TCG on a loaded
// machine.
const bootWait = 4 * time.Minute

func needQEMU(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU not installed")
	}
}

// newVMHarness is a harness whose node boots real microVMs, and the
// artifacts they boot from. When the test ends it kills every VM the node
// left running in its state directory: a failed test must not leave VMs
// behind (they run in sessions of their own).
func newVMHarness(t *testing.T) (*harness, *testenv.VMArtifacts) {
	t.Helper()
	needE2fsprogs(t)
	needQEMU(t)
	art := testenv.BuildVMArtifacts(t)
	h := newHarness(t)
	t.Cleanup(func() {
		if n := testenv.PowerOffVMs(h.stateDir); n > 0 {
			t.Logf("killed %d VMs left running", n)
		}
	})
	return h, art
}

// serve registers a file with the fake ctrl and returns it as an artifact.
func (h *harness) serve(path, name string) *nodev1.Artifact {
	h.t.Helper()
	f, err := os.Open(path)
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	sum := sha256.New()
	n, err := io.Copy(sum, f)
	if err != nil {
		h.t.Fatal(err)
	}
	digest := "sha256:" + hex.EncodeToString(sum.Sum(nil))
	h.ctrl.mu.Lock()
	h.ctrl.artifacts[digest] = path
	h.ctrl.mu.Unlock()
	return &nodev1.Artifact{Digest: digest, SizeBytes: uint64(n), Name: name}
}

func (h *harness) startOp(art *testenv.VMArtifacts, instanceID, bootID string) *nodev1.StartExecution {
	return &nodev1.StartExecution{
		InstanceId:         instanceID,
		BootId:             bootID,
		Kernel:             h.serve(art.Kernel(), "vmlinux"),
		Initrd:             h.serve(art.Initrd(), "initrd"),
		TemplateRoot:       h.serve(art.Template.Path, "root.img"),
		Layer:              &nodev1.BlockFileRef{StoragePool: "local", Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_WRITABLE_LAYER, ObjectId: "ws-" + instanceID},
		LayerCapacityBytes: 256 * MiB,
		Vcpus:              1,
		MemoryBytes:        256 * MiB,
	}
}

// startFailure is the StartFailure a failed start's answer carries.
func startFailure(t *testing.T, res *nodev1.CommandResult) *nodev1.StartFailure {
	t.Helper()
	f := &nodev1.StartFailure{}
	if res.GetCode() == 0 || res.GetResult() == nil {
		t.Fatalf("a failed start's answer: %v, want a failure carrying a StartFailure", res)
	}
	if err := res.GetResult().UnmarshalTo(f); err != nil {
		t.Fatal(err)
	}
	return f
}

func executionStatus(t *testing.T, res *nodev1.CommandResult) *nodev1.ExecutionStatus {
	t.Helper()
	if res.GetCode() != 0 {
		t.Fatalf("StartExecution failed: %v %s", connect.Code(res.GetCode()), res.GetMessage())
	}
	var st nodev1.ExecutionStatus
	if err := res.GetResult().UnmarshalTo(&st); err != nil {
		t.Fatalf("result %v: %v", res, err)
	}
	return &st
}

func stopResult(t *testing.T, res *nodev1.CommandResult) *nodev1.StopResult {
	t.Helper()
	if res.GetCode() != 0 {
		t.Fatalf("StopExecution failed: %v %s", connect.Code(res.GetCode()), res.GetMessage())
	}
	var st nodev1.StopResult
	if err := res.GetResult().UnmarshalTo(&st); err != nil {
		t.Fatalf("result %v: %v", res, err)
	}
	return &st
}

// dataClient calls guest agents through the node's data endpoint with a
// bearer token ("" for none).
type dataClient struct{ endpoint, token string }

// agent is a client of one execution's guest agent through the relay.
func (d dataClient) agent(instanceID string) guestv1connect.GuestAgentServiceClient {
	return guestv1connect.NewGuestAgentServiceClient(&http.Client{Transport: instanceHeader(instanceID)}, d.endpoint,
		connect.WithInterceptors(bearerInterceptor(d.token)))
}

// instanceHeader names the execution on every request.
type instanceHeader string

func (h instanceHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(guestchan.InstanceHeader, string(h))
	return http.DefaultTransport.RoundTrip(r)
}

type bearerInterceptor string

func (b bearerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if b != "" {
			req.Header().Set("Authorization", "Bearer "+string(b))
		}
		return next(ctx, req)
	}
}
func (b bearerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if b != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		}
		return conn
	}
}
func (b bearerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// run runs argv in the execution through the data endpoint and returns its
// output and exit code.
func run(c dataClient, instanceID string, argv ...string) (string, int32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := c.agent(instanceID).Exec(ctx, connect.NewRequest(&guestv1.ExecRequest{Argv: argv}))
	if err != nil {
		return "", 0, err
	}
	defer stream.Close()
	var out strings.Builder
	code := int32(-100)
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *guestv1.ExecResponse_Output:
			out.Write(ev.Output.GetData())
		case *guestv1.ExecResponse_Exited:
			code = ev.Exited.GetExitCode()
		}
	}
	return out.String(), code, stream.Err()
}

// report finds the first observation since the message numbered from
// whose report of instanceID match accepts, among the messages seen
// already (the observation may have come before a command's result), or
// waits for it.
func (s *fakeSession) report(t *testing.T, from int, instanceID, what string, match func(*nodev1.NodeObservation, *nodev1.ExecutionReport) bool) *nodev1.ExecutionReport {
	t.Helper()
	var found *nodev1.ExecutionReport
	matches := func(m *nodev1.SessionRequest) bool {
		obs := m.GetObservation()
		if obs == nil {
			return false
		}
		for _, r := range obs.GetExecutions() {
			if r.GetInstanceId() == instanceID && match(obs, r) {
				found = r
				return true
			}
		}
		return false
	}
	for _, m := range s.seen[from:] {
		if matches(m) {
			return found
		}
	}
	s.expectWithin(t, time.Minute, what, matches)
	return found
}

func pidOf(t *testing.T, stateDir, instanceID string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "executions", instanceID, "qemu.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitRunDirGone waits until the node removed the run directory of an
// execution whose end it reported.
func waitRunDirGone(t *testing.T, stateDir, instanceID string) {
	t.Helper()
	dir := filepath.Join(stateDir, "executions", instanceID)
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := os.Stat(dir)
		if os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			entries, _ := os.ReadDir(dir)
			t.Fatalf("run directory %s still there a minute after its end was reported (%d entries, %v)", dir, len(entries), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether pid is a live QEMU (not a zombie, not reused).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && strings.Contains(string(b), "qemu")
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("QEMU (pid %d) still runs", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The whole life of an execution against a fake ctrl: artifacts fetched
// from it, a real microVM booted, a process run through the data endpoint,
// the agent restarted under the running VM, a clean stop.
func TestExecutionLifecycle(t *testing.T) {
	t.Parallel()
	h, art := newVMHarness(t)
	stop := h.start(h.config())
	s := recv(t, h.ctrl.sessions, "session")
	if !slices.Contains(s.hello.GetCapabilities(), capability.QEMU) {
		t.Errorf("capabilities %v, want %s", s.hello.GetCapabilities(), capability.QEMU)
	}
	if s.hello.GetDataEndpoint() == "" || len(s.hello.GetInstanceIds()) != 0 {
		t.Fatalf("hello %v", s.hello)
	}

	// Refusals that boot nothing.
	op := h.startOp(art, "inst-1", "boot-1")
	noVolume := h.startOp(art, "inst-x", "boot-x")
	noVolume.Volume = &nodev1.BlockFileRef{StoragePool: "local", Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME, ObjectId: "vol-missing"}
	noVolume.VolumeMountPath = "/data"
	unknownArtifact := h.startOp(art, "inst-x", "boot-x")
	unknownArtifact.TemplateRoot = &nodev1.Artifact{Digest: "sha256:" + strings.Repeat("0", 64), Name: "gone.img"}
	otherPool := h.startOp(art, "inst-x", "boot-x")
	otherPool.Layer.StoragePool = "elsewhere"
	for _, tc := range []struct {
		opID string
		body *nodev1.StartExecution
		code connect.Code
	}{
		{"start-no-volume", noVolume, connect.CodeFailedPrecondition},
		{"start-unknown-artifact", unknownArtifact, connect.CodeNotFound},
		{"start-other-pool", otherPool, connect.CodeNotFound},
		{"start-bad-id", &nodev1.StartExecution{InstanceId: "../x"}, connect.CodeInvalidArgument},
	} {
		res := s.commandWithin(t, time.Minute, tc.opID, tc.body)
		if connect.Code(res.GetCode()) != tc.code || res.GetMessage() == "" {
			t.Errorf("%s: %v %q, want %v", tc.opID, connect.Code(res.GetCode()), res.GetMessage(), tc.code)
		}
	}
	if _, err := os.Stat(filepath.Join(h.poolDir, "layers", "ws-inst-x.img")); !os.IsNotExist(err) {
		t.Errorf("a refused start left a layer: %v", err)
	}
	if st := stopResult(t, s.command(t, "stop-unknown", &nodev1.StopExecution{InstanceId: "inst-x"})); st.GetDurable() || st.GetMessage() != "not running" {
		t.Errorf("stop of an unknown execution: %v", st)
	}

	// Boot.
	mark := len(s.seen)
	st := executionStatus(t, s.commandWithin(t, bootWait, "start-1", op))
	if st.GetInstanceId() != "inst-1" || !st.GetRunning() || !st.GetLayerCreated() || st.GetBootId() != "boot-1" ||
		st.GetLayerCapacityBytes() != 256*MiB || (st.GetAccel() != "kvm" && st.GetAccel() != "tcg") {
		t.Errorf("status %v", st)
	}
	s.report(t, mark, "inst-1", "a running report", func(obs *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool {
		return r.GetRunning() && r.GetResponding() && slices.Equal(obs.GetInstanceIds(), []string{"inst-1"})
	})

	// A platform that does not boot: QEMU refuses the kernel. The answer
	// says why, and the layer the start made is gone again.
	badKernel := h.startOp(art, "inst-bad", "boot-bad")
	badKernel.Kernel = badKernel.Initrd
	res := s.commandWithin(t, bootWait, "start-bad", badKernel)
	if connect.Code(res.GetCode()) != connect.CodeUnavailable || !strings.Contains(res.GetMessage(), "QEMU") {
		t.Errorf("start with a broken kernel: %v %q, want unavailable with QEMU's error", connect.Code(res.GetCode()), res.GetMessage())
	}
	if _, err := os.Stat(filepath.Join(h.poolDir, "layers", "ws-inst-bad.img")); !os.IsNotExist(err) {
		t.Errorf("a failed start left its new layer: %v", err)
	}

	// The data endpoint: only with the session's data token.
	data := dataClient{s.hello.GetDataEndpoint(), s.dataToken}
	out, code, err := run(data, "inst-1", "uname", "-r")
	if err != nil || code != 0 || strings.TrimSpace(out) != art.Platform.KernelVersion {
		t.Fatalf("uname -r: %q exit %d %v, want %s", out, code, err, art.Platform.KernelVersion)
	}
	for name, c := range map[string]dataClient{
		"no token":    dataClient{s.hello.GetDataEndpoint(), ""},
		"wrong token": dataClient{s.hello.GetDataEndpoint(), "data-token-0"},
	} {
		if _, _, err := run(c, "inst-1", "true"); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s: %v, want unauthenticated", name, err)
		}
	}
	if _, _, err := run(data, "inst-2", "true"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("unknown instance: %v, want not_found", err)
	}
	// Only StopExecution shuts a guest down: the relay refuses Shutdown.
	if _, err := data.agent("inst-1").Shutdown(context.Background(), connect.NewRequest(&guestv1.ShutdownRequest{})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("Shutdown through the data endpoint: %v, want permission_denied", err)
	}
	// Only a VM that keeps running keeps a file in its tmpfs.
	if _, code, err := run(data, "inst-1", "sh", "-c", "echo still-here > /tmp/marker"); err != nil || code != 0 {
		t.Fatalf("write /tmp/marker: exit %d %v", code, err)
	}

	// The agent restarts; the VM does not.
	pid := pidOf(t, h.stateDir, "inst-1")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !alive(pid) {
		t.Fatal("stopping the agent stopped the VM")
	}
	cfg := h.config()
	cfg.EnrollmentGrant, cfg.Endpoint = "", ""
	h.start(cfg)
	s = recv(t, h.ctrl.sessions, "session after restart")
	if s.hello.GetIncarnation() != 2 || !slices.Equal(s.hello.GetInstanceIds(), []string{"inst-1"}) {
		t.Fatalf("hello after restart: incarnation %d, instance_ids %v", s.hello.GetIncarnation(), s.hello.GetInstanceIds())
	}
	if _, _, err := run(dataClient{s.hello.GetDataEndpoint(), "data-token-1"}, "inst-1", "true"); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("the previous session's data token: %v, want unauthenticated", err)
	}
	// A StartExecution for the running instance answers its status.
	again := executionStatus(t, s.commandWithin(t, bootWait, "start-2", op))
	if !again.GetRunning() || again.GetBootId() != "boot-1" || !again.GetLayerCreated() || again.GetAccel() != st.GetAccel() {
		t.Errorf("status of the running execution %v, want %v", again, st)
	}
	if pidOf(t, h.stateDir, "inst-1") != pid {
		t.Fatal("StartExecution booted the running instance again")
	}
	data = dataClient{s.hello.GetDataEndpoint(), s.dataToken}
	if out, _, err := run(data, "inst-1", "cat", "/tmp/marker"); err != nil || strings.TrimSpace(out) != "still-here" {
		t.Fatalf("after the restart: %q %v, want the same VM", out, err)
	}

	// A clean stop.
	mark = len(s.seen)
	stopped := stopResult(t, s.commandWithin(t, 2*time.Minute, "stop-1", &nodev1.StopExecution{InstanceId: "inst-1"}))
	if !stopped.GetDurable() {
		t.Errorf("stop: %v, want durable", stopped)
	}
	waitGone(t, pid)
	s.report(t, mark, "inst-1", "the stop reported", func(obs *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool {
		return !r.GetRunning() && r.GetEnd() == nodev1.ExecutionEnd_EXECUTION_END_STOPPED && len(obs.GetInstanceIds()) == 0
	})
	// Its end reported, the node forgets it: no run directory is left.
	waitRunDirGone(t, h.stateDir, "inst-1")
	if _, _, err := run(data, "inst-1", "true"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("exec in a stopped execution: %v, want not_found", err)
	}
	if st := stopResult(t, s.command(t, "stop-2", &nodev1.StopExecution{InstanceId: "inst-1"})); st.GetDurable() || st.GetMessage() != "not running" {
		t.Errorf("second stop: %v", st)
	}
	// The layer stays for the next start.
	if _, err := os.Stat(filepath.Join(h.poolDir, "layers", "ws-inst-1.img")); err != nil {
		t.Errorf("layer: %v", err)
	}
}

// An execution whose guest powers off by itself is reported as ended at
// once, with how it ended.
func TestExecutionEndsWithoutStop(t *testing.T) {
	t.Parallel()
	h, art := newVMHarness(t)
	stop := h.start(h.config())
	s := recv(t, h.ctrl.sessions, "session")
	op := h.startOp(art, "inst-p", "boot-p")
	executionStatus(t, s.commandWithin(t, bootWait, "start-p", op))
	pid := pidOf(t, h.stateDir, "inst-p")

	data := dataClient{s.hello.GetDataEndpoint(), s.dataToken}
	mark := len(s.seen)
	// PID 1 (kibotos-guest) powers the machine off on SIGTERM. The call
	// may or may not see its process exit before the channel goes.
	_, _, _ = run(data, "inst-p", "kill", "-TERM", "1")
	r := s.report(t, mark, "inst-p", "the end reported", func(_ *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool { return !r.GetRunning() })
	if r.GetEnd() != nodev1.ExecutionEnd_EXECUTION_END_GUEST_SHUTDOWN {
		t.Errorf("end %v, want GUEST_SHUTDOWN", r.GetEnd())
	}
	waitGone(t, pid)
	// Reported once, then gone from the observations.
	s.expectWithin(t, time.Minute, "an observation without it", func(m *nodev1.SessionRequest) bool {
		obs := m.GetObservation()
		return obs != nil && len(obs.GetExecutions()) == 0 && len(obs.GetInstanceIds()) == 0
	})
	waitRunDirGone(t, h.stateDir, "inst-p")
	if _, _, err := run(data, "inst-p", "true"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("exec in an ended execution: %v, want not_found", err)
	}
	if st := stopResult(t, s.command(t, "stop-p", &nodev1.StopExecution{InstanceId: "inst-p", Force: true})); st.GetDurable() || st.GetMessage() != "not running" {
		t.Errorf("stop of an ended execution: %v", st)
	}

	// Started again: the layer is there, so not created.
	st := executionStatus(t, s.commandWithin(t, bootWait, "start-p2", op))
	if st.GetLayerCreated() || !st.GetRunning() {
		t.Errorf("second start: %v, want the existing layer", st)
	}
	pid = pidOf(t, h.stateDir, "inst-p")

	// The VM dies while the agent is away: the next run reports it ended.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	// What an agent killed between answering a stop and reporting it left
	// (the record removed, the directory not yet): nothing runs there.
	stale := filepath.Join(h.stateDir, "executions", "inst-stale")
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "console.log"), []byte("console\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := h.config()
	cfg.EnrollmentGrant = ""
	h.start(cfg)
	s = recv(t, h.ctrl.sessions, "session after restart")
	if len(s.hello.GetInstanceIds()) != 0 {
		t.Errorf("hello lists %v, want no running execution", s.hello.GetInstanceIds())
	}
	r = s.report(t, 0, "inst-p", "the end found at restart", func(_ *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool { return !r.GetRunning() })
	if r.GetEnd() != nodev1.ExecutionEnd_EXECUTION_END_CRASHED {
		t.Errorf("end %v, want CRASHED (a kill the host's OOM killer did not make)", r.GetEnd())
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the run directory of an execution answered before the restart: %v, want it removed", err)
	}
	waitRunDirGone(t, h.stateDir, "inst-p")
	if st := stopResult(t, s.command(t, "stop-p2", &nodev1.StopExecution{InstanceId: "inst-p", Force: true})); st.GetDurable() || st.GetMessage() != "not running" {
		t.Errorf("force stop of an ended execution: %v", st)
	}
}

// Commands on different objects run concurrently; commands on one object
// run in order.
func TestCommandsOnOtherObjectsDoNotWait(t *testing.T) {
	needE2fsprogs(t)
	needQEMU(t)
	h := newHarness(t)
	gate := make(chan struct{})
	h.ctrl.fetchGate = gate
	h.start(h.config())
	s := recv(t, h.ctrl.sessions, "session")
	missing := &nodev1.Artifact{Digest: "sha256:" + strings.Repeat("1", 64)}
	start := &nodev1.StartExecution{
		InstanceId: "inst-slow", BootId: "b", Kernel: missing, Initrd: missing, TemplateRoot: missing,
		Layer:              &nodev1.BlockFileRef{StoragePool: "local", Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_WRITABLE_LAYER, ObjectId: "ws-slow"},
		LayerCapacityBytes: 64 * MiB, Vcpus: 1, MemoryBytes: 64 * MiB,
	}
	for i, body := range []proto.Message{start, &nodev1.StopExecution{InstanceId: "inst-slow", Force: true}} {
		a, err := anypb.New(body)
		if err != nil {
			t.Fatal(err)
		}
		opID := []string{"op-start", "op-stop"}[i]
		s.send(t, &nodev1.SessionResponse{Message: &nodev1.SessionResponse_Command{Command: &nodev1.NodeCommand{OperationId: opID, Body: a}}})
	}
	// The start waits for its artifacts; a volume is made meanwhile.
	if res := s.command(t, "op-volume", ensureOp("local", "vol-1", 8*MiB)); res.GetCode() != 0 {
		t.Fatalf("EnsureBlockFile: %v", res)
	}
	close(gate)
	var order []string
	s.expect(t, "the start's and the stop's results", func(m *nodev1.SessionRequest) bool {
		if id := m.GetCommandResult().GetOperationId(); id != "" {
			order = append(order, id)
		}
		return len(order) == 2
	})
	if !slices.Equal(order, []string{"op-start", "op-stop"}) {
		t.Errorf("results in the order %v, want the start's first", order)
	}
}

// A template that cannot boot fails the start with the guest's last words,
// leaves no new layer, and an existing layer is kept. (A kernel QEMU
// refuses is in TestExecutionLifecycle.)
func TestStartsFromABrokenTemplate(t *testing.T) {
	t.Parallel()
	h, art := newVMHarness(t)
	h.start(h.config())
	s := recv(t, h.ctrl.sessions, "session")
	garbage := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(garbage, bytes.Repeat([]byte("not a file system "), 1<<16), 0o644); err != nil {
		t.Fatal(err)
	}
	broken := h.serve(garbage, "root.img")

	op := h.startOp(art, "inst-bad", "boot-bad")
	op.TemplateRoot = broken
	res := s.commandWithin(t, bootWait, "start-bad", op)
	if connect.Code(res.GetCode()) != connect.CodeUnavailable || !strings.Contains(res.GetMessage(), "the guest powered off: boot failed") {
		t.Errorf("a template that cannot boot: %v %q, want unavailable with the guest's reason", connect.Code(res.GetCode()), res.GetMessage())
	}
	if _, err := os.Stat(filepath.Join(h.poolDir, "layers", "ws-inst-bad.img")); !os.IsNotExist(err) {
		t.Errorf("a failed start left its new layer: %v", err)
	}
	if !startFailure(t, res).GetLayerRemoved() {
		t.Error("the failed start does not say it removed the layer it made")
	}

	// A Workspace that ran keeps its layer when a later start fails.
	executionStatus(t, s.commandWithin(t, bootWait, "start-kept", h.startOp(art, "inst-kept", "boot-kept")))
	stopResult(t, s.command(t, "stop-kept", &nodev1.StopExecution{InstanceId: "inst-kept"}))
	bad := h.startOp(art, "inst-kept", "boot-kept-2")
	bad.TemplateRoot = broken
	res = s.commandWithin(t, bootWait, "start-kept-bad", bad)
	if res.GetCode() == 0 {
		t.Fatal("a start from a broken template succeeded")
	}
	if startFailure(t, res).GetLayerRemoved() {
		t.Error("a failed start says it removed a layer that existed before it")
	}
	st := executionStatus(t, s.commandWithin(t, bootWait, "start-kept-again", h.startOp(art, "inst-kept", "boot-kept-3")))
	if st.GetLayerCreated() {
		t.Error("the failed start lost the existing layer")
	}
}
