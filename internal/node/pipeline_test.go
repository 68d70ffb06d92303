package node_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/node/vm"
	"github.com/kibotos/kibotos/internal/node/vm/fake"
	"github.com/kibotos/kibotos/internal/testenv"
)

// fakeHarness is a harness whose node runs the fake VM provider: the start
// pipeline runs whole (artifacts fetched from the fake ctrl, the writable
// layer made by e2fsprogs), only no VM boots.
func fakeHarness(t *testing.T) (*harness, *fake.Provider, node.Config) {
	t.Helper()
	needE2fsprogs(t)
	h := newHarness(t)
	p := fake.New()
	cfg := h.config()
	cfg.Provider = p
	return h, p, cfg
}

// fakeStartOp is a start of the fake provider: its "template root" is a
// text file listing the guest's paths.
func (h *harness) fakeStartOp(instanceID string) *nodev1.StartExecution {
	h.t.Helper()
	dir := h.t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			h.t.Fatal(err)
		}
		return path
	}
	return &nodev1.StartExecution{
		InstanceId:         instanceID,
		BootId:             "boot-" + instanceID,
		Kernel:             h.serve(write("vmlinux", "kernel of "+instanceID), "vmlinux"),
		Initrd:             h.serve(write("initrd", "initrd of "+instanceID), "initrd"),
		TemplateRoot:       h.serve(write("root.txt", "/etc/os-release\n"), "root.img"),
		Layer:              &nodev1.BlockFileRef{StoragePool: "local", Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_WRITABLE_LAYER, ObjectId: "ws-" + instanceID},
		LayerCapacityBytes: 64 * MiB,
		Vcpus:              1,
		MemoryBytes:        256 * MiB,
	}
}

// The start pipeline on the fake provider: the start answers the status
// once the guest agent answers, the node advertises the provider, reports
// the execution, answers a repeated start with the status, takes the
// execution back after an agent restart, and a stop is durable.
func TestStartPipelineOnAFakeProvider(t *testing.T) {
	t.Parallel()
	h, p, cfg := fakeHarness(t)
	stop := h.start(cfg)
	s := recv(t, h.ctrl.sessions, "session")
	if !slices.Contains(s.hello.GetCapabilities(), capability.Provider(fake.Name)) {
		t.Errorf("capabilities %v, want the provider's", s.hello.GetCapabilities())
	}
	op := h.fakeStartOp("inst-f1")
	mark := len(s.seen)
	st := executionStatus(t, s.commandWithin(t, time.Minute, "start-f1", op))
	if !st.GetRunning() || !st.GetLayerCreated() || st.GetAccel() != "fake" || st.GetBootId() != "boot-inst-f1" || st.GetLayerCapacityBytes() != 64*MiB {
		t.Errorf("status %v", st)
	}
	s.report(t, mark, "inst-f1", "a running report", func(obs *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool {
		return r.GetRunning() && r.GetResponding()
	})
	if again := executionStatus(t, s.commandWithin(t, time.Minute, "start-f1-again", op)); again.GetBootId() != st.GetBootId() || !again.GetLayerCreated() {
		t.Errorf("a repeated start: %v, want %v", again, st)
	}

	if err := stop(); err != nil {
		t.Fatal(err)
	}
	cfg.Provider, cfg.EnrollmentGrant, cfg.Endpoint = p.Restarted(), "", ""
	h.start(cfg)
	s = recv(t, h.ctrl.sessions, "session after restart")
	if !slices.Equal(s.hello.GetInstanceIds(), []string{"inst-f1"}) {
		t.Fatalf("hello after restart lists %v", s.hello.GetInstanceIds())
	}
	mark = len(s.seen)
	if res := stopResult(t, s.commandWithin(t, time.Minute, "stop-f1", &nodev1.StopExecution{InstanceId: "inst-f1"})); !res.GetDurable() {
		t.Errorf("stop: %v, want durable", res)
	}
	s.report(t, mark, "inst-f1", "the stop reported", func(obs *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool {
		return r.GetEnd() == nodev1.ExecutionEnd_EXECUTION_END_STOPPED
	})
}

// A start whose boot fails removes the layer it made and says so, and that
// its guest never became ready; one
// that fails before the layer says it left the layer untouched; so does
// one under a policy the network cannot apply; a guest that resets comes
// back within its execution, counted.
func TestStartPipelineFailuresOnAFakeProvider(t *testing.T) {
	t.Parallel()
	h, p, cfg := fakeHarness(t)
	h.start(cfg)
	s := recv(t, h.ctrl.sessions, "session")
	layer := func(id string) error {
		_, err := os.Stat(filepath.Join(h.poolDir, "layers", "ws-"+id+".img"))
		return err
	}

	p.FailStart = errors.New("no room for the VMM")
	res := s.commandWithin(t, time.Minute, "start-f2", h.fakeStartOp("inst-f2"))
	if connect.Code(res.GetCode()) != connect.CodeUnavailable || !strings.Contains(res.GetMessage(), "no room for the VMM") {
		t.Errorf("a start the provider refused: %v %q", connect.Code(res.GetCode()), res.GetMessage())
	}
	if f := startFailure(t, res); !f.GetLayerRemoved() || f.GetLayerUntouched() || f.GetNotReady() {
		t.Errorf("StartFailure %v, want layer_removed (and not not_ready: no VM was launched)", f)
	}
	if err := layer("inst-f2"); !os.IsNotExist(err) {
		t.Errorf("the failed start's layer: %v, want removed", err)
	}

	p.FailStart, p.Unbootable = nil, true
	res = s.commandWithin(t, time.Minute, "start-f3", h.fakeStartOp("inst-f3"))
	if connect.Code(res.GetCode()) != connect.CodeUnavailable || !strings.Contains(res.GetMessage(), "did not boot") {
		t.Errorf("a guest that did not boot: %v %q", connect.Code(res.GetCode()), res.GetMessage())
	}
	if f := startFailure(t, res); !f.GetLayerRemoved() || !f.GetNotReady() {
		t.Errorf("StartFailure %v, want layer_removed and not_ready", f)
	}

	missing := h.fakeStartOp("inst-f4")
	missing.Volume = &nodev1.BlockFileRef{StoragePool: "local", Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME, ObjectId: "vol-missing"}
	missing.VolumeMountPath = "/data"
	res = s.commandWithin(t, time.Minute, "start-f4", missing)
	if connect.Code(res.GetCode()) != connect.CodeFailedPrecondition {
		t.Errorf("a start without its Volume: %v %q", connect.Code(res.GetCode()), res.GetMessage())
	}
	if f := startFailure(t, res); !f.GetLayerUntouched() {
		t.Errorf("StartFailure %v, want layer_untouched", f)
	}
	if err := layer("inst-f4"); !os.IsNotExist(err) {
		t.Errorf("a start refused before the layer made one: %v", err)
	}

	p.Unbootable = false
	public := h.fakeStartOp("inst-f6")
	public.NetworkPolicy = &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET}
	res = s.commandWithin(t, time.Minute, "start-f6", public)
	if connect.Code(res.GetCode()) != connect.CodeUnimplemented || !strings.Contains(res.GetMessage(), "PUBLIC_INTERNET cannot be applied") {
		t.Errorf("a policy the network cannot apply: %v %q", connect.Code(res.GetCode()), res.GetMessage())
	}
	if f := startFailure(t, res); !f.GetNetworkUnenforceable() || !f.GetLayerRemoved() {
		t.Errorf("StartFailure %v, want network_unenforceable and layer_removed", f)
	}

	op := h.fakeStartOp("inst-f5")
	executionStatus(t, s.commandWithin(t, time.Minute, "start-f5", op))
	mark := len(s.seen)
	inst, err := p.Attach(filepath.Join(h.stateDir, "executions", "inst-f5"))
	if err != nil {
		t.Fatal(err)
	}
	inst.(*fake.Instance).Reset()
	r := s.report(t, mark, "inst-f5", "the reset reported", func(obs *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool {
		return r.GetRestartCount() == 1
	})
	if !r.GetRunning() || !r.GetResponding() || r.GetComingBack() || r.GetLastResetAt() == nil {
		t.Errorf("a guest that reset and came back at once: %v", r)
	}
}

// A guest that stops answering is reported not responding, with the time
// the first failed probe was sent on this node's clock (unresponsive_since),
// until it answers again; then the time is gone. The execution runs on
// throughout: an unresponsive guest is only reported.
func TestAnUnresponsiveGuestIsReportedSinceItsFirstFailedProbe(t *testing.T) {
	t.Parallel()
	s, inst := runningOnAFakeProvider(t, "inst-u")
	mark, before := len(s.seen), time.Now()
	inst.Hang(true)
	r := s.report(t, mark, "inst-u", "the guest reported unresponsive", func(_ *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool {
		return !r.GetResponding()
	})
	// The first probe to fail may have been sent a moment before the
	// guest hung (it was in flight): at most a probe interval before.
	since := r.GetUnresponsiveSince().AsTime()
	earliest := before.Add(-5 * time.Second)
	if !r.GetRunning() || r.GetProbeError() == "" || r.GetUnresponsiveSince() == nil || since.Before(earliest) || since.After(time.Now()) {
		t.Errorf("a hung guest's report: %v, want running, a probe error, unresponsive_since between %v and now", r, earliest)
	}
	mark = len(s.seen)
	inst.Hang(false)
	r = s.report(t, mark, "inst-u", "the guest answering again", func(_ *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool {
		return r.GetResponding()
	})
	if r.GetUnresponsiveSince() != nil {
		t.Errorf("a guest answering again still has unresponsive_since %v", r.GetUnresponsiveSince())
	}
}

// A guest's memory kills stand while it does not respond (workspaces.md
// O17: "Unlike memory_condition it stands while the guest does not
// respond"): the node keeps reporting the last memory report the guest
// gave, its kill count and latest kill, through failed probes.
func TestAnUnresponsiveGuestKeepsItsLastMemoryReport(t *testing.T) {
	t.Parallel()
	s, inst := runningOnAFakeProvider(t, "inst-m")
	killed := timestamppb.New(time.Now().Add(-time.Minute))
	mark := len(s.seen)
	inst.ReportMemory(&guestv1.MemoryReport{Condition: guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL, KillCount: 2,
		LatestKill: &guestv1.MemoryKill{KilledAt: killed, Pid: 41, Command: "hog", RssBytes: 200 << 20}})
	s.report(t, mark, "inst-m", "the guest's kills reported", func(_ *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool {
		return r.GetMemory().GetKillCount() == 2
	})
	mark = len(s.seen)
	inst.Hang(true)
	r := s.report(t, mark, "inst-m", "the guest reported unresponsive", func(_ *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool {
		return !r.GetResponding()
	})
	if m := r.GetMemory(); m.GetKillCount() != 2 || m.GetLatestKill().GetPid() != 41 || m.GetLatestKill().GetCommand() != "hog" {
		t.Errorf("an unresponsive guest's memory report: %v, want the last one it gave (2 kills, the latest pid 41 hog)", m)
	}
}

// A guest that answers from another boot than the one that started the
// execution, with no reset the provider counted, is reported other_boot
// (ctrl's rebooted) and still responding, restart_count 0.
func TestAGuestAnsweringFromAnotherBootIsReported(t *testing.T) {
	t.Parallel()
	s, inst := runningOnAFakeProvider(t, "inst-b")
	mark := len(s.seen)
	inst.Reboot()
	r := s.report(t, mark, "inst-b", "the other boot reported", func(_ *nodev1.NodeObservation, r *nodev1.ExecutionReport) bool {
		return r.GetOtherBoot()
	})
	if !r.GetRunning() || !r.GetResponding() || r.GetRestartCount() != 0 {
		t.Errorf("a guest answering from another boot: %v, want running, responding, restart_count 0", r)
	}
}

// runningOnAFakeProvider starts a node agent on the fake provider and one
// execution, instanceID, on it: the session and the fake VM.
func runningOnAFakeProvider(t *testing.T, instanceID string) (*fakeSession, *fake.Instance) {
	t.Helper()
	h, p, cfg := fakeHarness(t)
	h.start(cfg)
	s := recv(t, h.ctrl.sessions, "session")
	executionStatus(t, s.commandWithin(t, time.Minute, "start-"+instanceID, h.fakeStartOp(instanceID)))
	inst, err := p.Attach(filepath.Join(h.stateDir, "executions", instanceID))
	if err != nil {
		t.Fatal(err)
	}
	return s, inst.(*fake.Instance)
}

// A forced StopExecution sent while a normal one waits for a guest that
// does not answer (ctrl's FORCE stop superseding a NORMAL one) does not
// queue behind it for the normal stop's timeout: the VM is killed at once,
// the normal stop answers that it was forced, and the forced one finds
// nothing running.
func TestAForcedStopOvertakesANormalStopOfAHungGuest(t *testing.T) {
	t.Parallel()
	s, inst := runningOnAFakeProvider(t, "inst-h")
	inst.Hang(true)
	for i, op := range []struct {
		id   string
		body *nodev1.StopExecution
	}{
		{"stop-normal", &nodev1.StopExecution{InstanceId: "inst-h", TimeoutSeconds: 3600}},
		{"stop-force", &nodev1.StopExecution{InstanceId: "inst-h", Force: true}},
	} {
		a, err := anypb.New(op.body)
		if err != nil {
			t.Fatal(err)
		}
		s.send(t, &nodev1.SessionResponse{Message: &nodev1.SessionResponse_Command{Command: &nodev1.NodeCommand{OperationId: op.id, Body: a}}})
		if i == 0 {
			testenv.WaitFor(t, "the normal stop asking the guest to shut down", func() bool { return inst.Shutdowns() > 0 })
		}
	}
	results := map[string]*nodev1.CommandResult{}
	s.expect(t, "both stops' results", func(m *nodev1.SessionRequest) bool {
		if r := m.GetCommandResult(); r.GetOperationId() != "" {
			results[r.GetOperationId()] = r
		}
		return len(results) == 2
	})
	if st := stopResult(t, results["stop-normal"]); st.GetDurable() || !strings.Contains(st.GetMessage(), "forced stop") {
		t.Errorf("the normal stop: %v, want killed by the forced stop, not durable", st)
	}
	if st := stopResult(t, results["stop-force"]); st.GetDurable() || st.GetMessage() != "not running" {
		t.Errorf("the forced stop: %v, want not running", st)
	}
	if exit := inst.Exit(); exit.Cause != vm.Killed {
		t.Errorf("the VM ended by %v, want killed", exit)
	}
}
