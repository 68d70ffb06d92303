package dataplane_test

// ProcessService through ctrl (docs/spec-coverage/dataplane.md, PS and
// DP rows): ctrl's ProcessService on a real store, relaying to real guest
// agents that run real processes here. What stands in for a node is its
// data endpoint only (dataEndpoint): the node's own relay needs a running
// VM, and it passes guest calls through as they are.

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/dataplane"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/guest"
	"github.com/kibotos/kibotos/internal/guestchan"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

// One reaper for the test binary, as in a guest: the agents' processes
// are its children.
var reaper = guest.NewReaper()

func TestMain(m *testing.M) {
	ctx, cancel := context.WithCancel(context.Background())
	go reaper.Run(ctx)
	code := m.Run()
	cancel()
	os.Exit(code)
}

const dataToken = "data-token-1"

// dataEndpoint is a node's data endpoint as ctrl sees it: the node's data
// token, and guest calls routed by their Kibotos-Instance header to that
// execution's guest agent (here, agents in this process).
type dataEndpoint struct {
	mu     sync.Mutex
	guests map[string]http.Handler
	// answered, when set, runs after a guest has answered StartProcess
	// and before its answer goes back to ctrl.
	answered func(*http.Request)
	// headers are those of every call ctrl made here.
	headers []http.Header
}

func (d *dataEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	g, answered := d.guests[r.Header.Get(guestchan.InstanceHeader)], d.answered
	d.headers = append(d.headers, r.Header.Clone())
	d.mu.Unlock()
	errs := connect.NewErrorWriter()
	switch {
	case r.Header.Get("Authorization") != "Bearer "+dataToken:
		errs.Write(w, r, connect.NewError(connect.CodeUnauthenticated, nil))
		return
	case g == nil:
		errs.Write(w, r, connect.NewError(connect.CodeNotFound, nil))
		return
	}
	if answered == nil || r.URL.Path != guestv1connect.GuestAgentServiceStartProcessProcedure {
		g.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	g.ServeHTTP(rec, r)
	answered(r)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

type env struct {
	st    *store.Store
	data  *dataEndpoint
	guest *httptest.Server // node-a's data endpoint
	procs ctrlv1connect.ProcessServiceClient
}

// newEnv is ctrl on a new database with one live node, node-a, whose data
// endpoint serves the guests that execution adds.
func newEnv(t *testing.T, dsn string) *env {
	t.Helper()
	e := &env{st: storetest.Open(t, dsn), data: &dataEndpoint{guests: map[string]http.Handler{}}}
	e.guest = testenv.H2CServer(t, e.data)
	storetest.PutLiveNode(t, e.st, "node-a", "pool-a")
	e.tx(t, func(tx *store.Tx) error { return tx.SetNodeData("node-a", e.guest.URL, dataToken) })
	e.procs = e.ctrl(t)
	return e
}

func (e *env) tx(t *testing.T, fn func(*store.Tx) error) {
	t.Helper()
	if err := e.st.Tx(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

// ctrl serves ProcessService on the env's database as ctrl's server does;
// another call is another ctrl (or the same restarted) on that database.
func (e *env) ctrl(t *testing.T) ctrlv1connect.ProcessServiceClient {
	t.Helper()
	srv := e.serve(t)
	return ctrlv1connect.NewProcessServiceClient(srv.Client(), srv.URL)
}

// serve serves ProcessService and FileService on one relay, as ctrl's
// server does.
func (e *env) serve(t *testing.T) *httptest.Server {
	t.Helper()
	runner := command.NewRunner(e.st, "test", slog.Default())
	f := fleet.New(e.st, runner, slog.Default(), fleet.DefaultConfig, fleet.Deps{})
	ws := workspace.New(e.st, f, volume.New(e.st, f, runner, volume.DefaultProfile), runner)
	procs := dataplane.NewProcesses(e.st, ws, f, nil)
	mux := http.NewServeMux()
	mux.Handle(ctrlv1connect.NewProcessServiceHandler(procs))
	mux.Handle(ctrlv1connect.NewFileServiceHandler(procs.Files()))
	return testenv.H2CServer(t, mux)
}

// execution makes instance (workspace.instance-number) the current
// execution of its Workspace, AVAILABLE at generation on node, with a
// guest agent of its own: a new execution is a new boot.
func (e *env) execution(t *testing.T, instance, node string, generation uint64) string {
	t.Helper()
	id := workspace.WorkspaceOf(instance)
	e.tx(t, func(tx *store.Tx) error {
		if err := tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: id, State: ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, Generation: generation}); err != nil {
			return err
		}
		return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: id, InstanceId: instance, NodeId: node, Starts: generation})
	})
	e.data.mu.Lock()
	e.data.guests[instance] = (&guest.Agent{Reaper: reaper}).Handler()
	e.data.mu.Unlock()
	return id
}

// wantDetail checks an error's code, and its ErrorDetail's stage and
// (when given) field.
func wantDetail(t *testing.T, what string, err error, code connect.Code, stage ctrlv1.FailureStage, field string) {
	t.Helper()
	d := apierr.DetailOf(err)
	if connect.CodeOf(err) != code || d.GetStage() != stage || (field != "" && d.GetField() != field) {
		t.Errorf("%s: %v (stage %v, field %q), want %v at %v naming %q", what, err, d.GetStage(), d.GetField(), code, stage, field)
	}
}

func drain[M any](s *connect.ServerStreamForClient[M]) ([]*M, error) {
	defer s.Close()
	var got []*M
	for s.Receive() {
		got = append(got, s.Msg())
	}
	return got, s.Err()
}

func start(t *testing.T, c ctrlv1connect.ProcessServiceClient, ws, commandID string, spec *ctrlv1.ProcessSpec) *ctrlv1.StartProcessResponse {
	t.Helper()
	res, err := c.StartProcess(context.Background(), connect.NewRequest(&ctrlv1.StartProcessRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: commandID}, WorkspaceId: ws, Spec: spec}))
	if err != nil {
		t.Fatalf("start %v: %v", spec.GetArgv(), err)
	}
	return res.Msg
}

func getProcess(c ctrlv1connect.ProcessServiceClient, ws, id string) (*ctrlv1.Process, error) {
	res, err := c.GetProcess(context.Background(), connect.NewRequest(&ctrlv1.GetProcessRequest{WorkspaceId: ws, ProcessId: id}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetProcess(), nil
}

// call is one ProcessService RPC on a Workspace and a process, and the
// stage its failures carry.
type call struct {
	name  string
	stage ctrlv1.FailureStage
	do    func(c ctrlv1connect.ProcessServiceClient, ws, id string) error
}

var (
	stageStart  = ctrlv1.FailureStage_FAILURE_STAGE_STARTING_PROCESS
	stageStream = ctrlv1.FailureStage_FAILURE_STAGE_STREAMING_PROCESS
	stageUse    = ctrlv1.FailureStage_FAILURE_STAGE_USING_PROCESS
	bg          = context.Background()
	trueSpec    = &ctrlv1.ProcessSpec{Argv: []string{"true"}}
)

// everyCall is every ProcessService RPC, with the stage ProcessService's
// comment gives it.
var everyCall = []call{
	{"StartProcess", stageStart, func(c ctrlv1connect.ProcessServiceClient, ws, _ string) error {
		_, err := c.StartProcess(bg, connect.NewRequest(&ctrlv1.StartProcessRequest{WorkspaceId: ws, Spec: trueSpec}))
		return err
	}},
	{"ExecProcess", stageStart, func(c ctrlv1connect.ProcessServiceClient, ws, _ string) error {
		s, err := c.ExecProcess(bg, connect.NewRequest(&ctrlv1.ExecProcessRequest{WorkspaceId: ws, Spec: trueSpec}))
		if err == nil {
			_, err = drain(s)
		}
		return err
	}},
	{"StreamProcessOutput", stageStream, func(c ctrlv1connect.ProcessServiceClient, ws, id string) error {
		s, err := c.StreamProcessOutput(bg, connect.NewRequest(&ctrlv1.StreamProcessOutputRequest{WorkspaceId: ws, ProcessId: id}))
		if err == nil {
			_, err = drain(s)
		}
		return err
	}},
	{"WaitProcess", stageStream, func(c ctrlv1connect.ProcessServiceClient, ws, id string) error {
		_, err := c.WaitProcess(bg, connect.NewRequest(&ctrlv1.WaitProcessRequest{WorkspaceId: ws, ProcessId: id}))
		return err
	}},
	{"SendProcessInput", stageUse, func(c ctrlv1connect.ProcessServiceClient, ws, id string) error {
		_, err := c.SendProcessInput(bg, connect.NewRequest(&ctrlv1.SendProcessInputRequest{WorkspaceId: ws, ProcessId: id, Data: []byte("x")}))
		return err
	}},
	{"ResizeProcessPty", stageUse, func(c ctrlv1connect.ProcessServiceClient, ws, id string) error {
		_, err := c.ResizeProcessPty(bg, connect.NewRequest(&ctrlv1.ResizeProcessPtyRequest{WorkspaceId: ws, ProcessId: id, Size: &ctrlv1.ProcessPty{Rows: 24, Cols: 80}}))
		return err
	}},
	{"SignalProcess", stageUse, func(c ctrlv1connect.ProcessServiceClient, ws, id string) error {
		_, err := c.SignalProcess(bg, connect.NewRequest(&ctrlv1.SignalProcessRequest{WorkspaceId: ws, ProcessId: id, Signal: ctrlv1.ProcessSignal_PROCESS_SIGNAL_SIGTERM}))
		return err
	}},
	{"GetProcess", stageUse, func(c ctrlv1connect.ProcessServiceClient, ws, id string) error {
		_, err := getProcess(c, ws, id)
		return err
	}},
	{"ListProcesses", stageUse, func(c ctrlv1connect.ProcessServiceClient, ws, _ string) error {
		_, err := c.ListProcesses(bg, connect.NewRequest(&ctrlv1.ListProcessesRequest{WorkspaceId: ws}))
		return err
	}},
}

// ProcessService: "The Workspace must be AVAILABLE. Any other state is
// failed_precondition with the call's stage"; "A guest that does not
// answer, or a node whose control session is not live, is unavailable with
// the call's stage"; the stages of every call (FailureStage
// STARTING_PROCESS, STREAMING_PROCESS, USING_PROCESS).
func TestEveryCallNeedsAnAvailableWorkspaceAndALiveGuest(t *testing.T) {
	e := newEnv(t, storetest.SQLiteDSN(t))
	e.unreachable(t)
	for _, c := range everyCall {
		wantDetail(t, c.name+" on a STOPPED Workspace", c.do(e.procs, "ws-stopped", "proc-1"), connect.CodeFailedPrecondition, c.stage, "")
		wantDetail(t, c.name+" on a node without a live session", c.do(e.procs, "ws-lapsed", "proc-1"), connect.CodeUnavailable, c.stage, "")
		wantDetail(t, c.name+" to a guest that does not answer", c.do(e.procs, "ws-silent", "proc-1"), connect.CodeUnavailable, c.stage, "")
	}
}

// unreachable adds the Workspaces no call reaches a guest of:
// "ws-stopped", STOPPED; "ws-lapsed", running on node-b, registered
// without a live control session; and "ws-silent", running on node-c,
// live, at whose data endpoint nothing answers (a guest that does not).
func (e *env) unreachable(t *testing.T) {
	t.Helper()
	e.tx(t, func(tx *store.Tx) error {
		return tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: "ws-stopped", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED, Generation: 1})
	})
	storetest.PutNodeWithPool(t, e.st, "node-b", "pool-a")
	e.tx(t, func(tx *store.Tx) error { return tx.SetNodeData("node-b", e.guest.URL, dataToken) })
	e.execution(t, "ws-lapsed.1", "node-b", 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent := "http://" + ln.Addr().String()
	ln.Close()
	storetest.PutLiveNode(t, e.st, "node-c", "pool-a")
	e.tx(t, func(tx *store.Tx) error { return tx.SetNodeData("node-c", silent, dataToken) })
	e.execution(t, "ws-silent.1", "node-c", 1)
}

// Every failure past the Workspace's checks "carries the call's stage in
// ErrorDetail"; StartProcess: "Malformed input is invalid_argument. Stage
// FAILURE_STAGE_STARTING_PROCESS"; ProcessSpec.argv "is required";
// ExecProcess: "Failures before `started` carry
// FAILURE_STAGE_STARTING_PROCESS".
func TestRefusalsOfAGuestCarryTheCallsStage(t *testing.T) {
	e := newEnv(t, storetest.SQLiteDSN(t))
	ws := e.execution(t, "ws-1.1", "node-a", 1)
	for _, tc := range []struct {
		what  string
		spec  *ctrlv1.ProcessSpec
		code  connect.Code
		field string
	}{
		{"no argv", &ctrlv1.ProcessSpec{}, connect.CodeInvalidArgument, "spec.argv"},
		{"an empty argv[0]", &ctrlv1.ProcessSpec{Argv: []string{""}}, connect.CodeInvalidArgument, "spec.argv"},
		{"a relative cwd", &ctrlv1.ProcessSpec{Argv: []string{"true"}, Cwd: "tmp"}, connect.CodeInvalidArgument, "spec.cwd"},
		{"a program that does not exist", &ctrlv1.ProcessSpec{Argv: []string{"no-such-program"}}, connect.CodeFailedPrecondition, "spec.argv"},
	} {
		_, err := e.procs.StartProcess(bg, connect.NewRequest(&ctrlv1.StartProcessRequest{WorkspaceId: ws, Spec: tc.spec}))
		wantDetail(t, "StartProcess of "+tc.what, err, tc.code, stageStart, tc.field)
		s, err := e.procs.ExecProcess(bg, connect.NewRequest(&ctrlv1.ExecProcessRequest{WorkspaceId: ws, Spec: tc.spec}))
		if err == nil {
			var events []*ctrlv1.ExecProcessResponse
			events, err = drain(s)
			if len(events) != 0 {
				t.Errorf("ExecProcess of %s sent %v before failing, want no `started`", tc.what, events)
			}
		}
		wantDetail(t, "ExecProcess of "+tc.what, err, tc.code, stageStart, tc.field)
	}

	p := start(t, e.procs, ws, "", &ctrlv1.ProcessSpec{Argv: []string{"sleep", "60"}})
	t.Cleanup(func() {
		_, _ = e.procs.SignalProcess(bg, connect.NewRequest(&ctrlv1.SignalProcessRequest{WorkspaceId: ws, ProcessId: p.GetProcessId(), Signal: ctrlv1.ProcessSignal_PROCESS_SIGNAL_SIGKILL}))
	})
	for _, c := range everyCall[2:] { // the calls on a process
		if c.name == "ListProcesses" {
			continue
		}
		wantDetail(t, c.name+" of an unknown process", c.do(e.procs, ws, "proc-unknown"), connect.CodeNotFound, c.stage, "process_id")
	}
	wantDetail(t, "SendProcessInput without stdin", everyCall[4].do(e.procs, ws, p.GetProcessId()), connect.CodeFailedPrecondition, stageUse, "")
	wantDetail(t, "ResizeProcessPty without a pty", everyCall[5].do(e.procs, ws, p.GetProcessId()), connect.CodeFailedPrecondition, stageUse, "")
	_, err := e.procs.SignalProcess(bg, connect.NewRequest(&ctrlv1.SignalProcessRequest{WorkspaceId: ws, ProcessId: p.GetProcessId()}))
	wantDetail(t, "SignalProcess without a signal", err, connect.CodeInvalidArgument, stageUse, "signal")
	s, err := e.procs.StreamProcessOutput(bg, connect.NewRequest(&ctrlv1.StreamProcessOutputRequest{WorkspaceId: ws, ProcessId: p.GetProcessId(), StdoutOffset: 1}))
	if err == nil {
		_, err = drain(s)
	}
	wantDetail(t, "StreamProcessOutput past the output", err, connect.CodeOutOfRange, stageStream, "stdout_offset")
}

// WaitProcess: "A caller deadline that runs out is deadline_exceeded and
// leaves the process running. Stage FAILURE_STAGE_STREAMING_PROCESS." The
// deadline travels as the protocol's timeout header, which is what ctrl
// sees of any caller's deadline; the caller sets no deadline of its own
// here, so that it reads ctrl's answer instead of giving up first.
func TestAWaitPastTheCallersDeadline(t *testing.T) {
	e := newEnv(t, storetest.SQLiteDSN(t))
	ws := e.execution(t, "ws-1.1", "node-a", 1)
	p := start(t, e.procs, ws, "", &ctrlv1.ProcessSpec{Argv: []string{"sleep", "60"}})
	t.Cleanup(func() {
		_, _ = e.procs.SignalProcess(bg, connect.NewRequest(&ctrlv1.SignalProcessRequest{WorkspaceId: ws, ProcessId: p.GetProcessId(), Signal: ctrlv1.ProcessSignal_PROCESS_SIGNAL_SIGKILL}))
	})
	req := connect.NewRequest(&ctrlv1.WaitProcessRequest{WorkspaceId: ws, ProcessId: p.GetProcessId()})
	req.Header().Set("Connect-Timeout-Ms", "300")
	_, err := e.procs.WaitProcess(bg, req)
	wantDetail(t, "WaitProcess past a 300 ms deadline", err, connect.CodeDeadlineExceeded, stageStream, "")
	if got, err := getProcess(e.procs, ws, p.GetProcessId()); err != nil || got.GetState() != ctrlv1.ProcessState_PROCESS_STATE_RUNNING {
		t.Errorf("the process after the wait's deadline: %v %v, want RUNNING", got.GetState(), err)
	}
}

// execEvents runs ExecProcess to its end.
func execEvents(t *testing.T, c ctrlv1connect.ProcessServiceClient, ws, commandID string, spec *ctrlv1.ProcessSpec) []*ctrlv1.ExecProcessResponse {
	t.Helper()
	s, err := c.ExecProcess(bg, connect.NewRequest(&ctrlv1.ExecProcessRequest{Command: &ctrlv1.CommandMetadata{CommandId: commandID}, WorkspaceId: ws, Spec: spec}))
	if err != nil {
		t.Fatal(err)
	}
	events, err := drain(s)
	if err != nil {
		t.Fatalf("ExecProcess %s: %v", commandID, err)
	}
	return events
}

// ExecProcess: "A replay of the command attaches to the same process and
// streams it again from the earliest retained byte"; StartProcess: "A
// replay of the command returns the same process_id and starts nothing,
// even after the process ended"; StartProcessResponse "holds only facts
// that never change, so a replay returns exactly the same response".
func TestReplaysAnswerTheSameProcess(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b.DSN(t))
			ws := e.execution(t, "ws-1.1", "node-a", 1)
			runs := filepath.Join(t.TempDir(), "runs")
			spec := &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "echo run >> " + runs + "; echo out; echo err >&2"}}
			first := execEvents(t, e.procs, ws, "cmd-exec", spec)
			again := execEvents(t, e.procs, ws, "cmd-exec", spec)
			if len(first) == 0 || len(again) == 0 || !sameStarted(first[0].GetStarted(), again[0].GetStarted()) {
				t.Fatalf("the replay's first event %v, want the first's started %v", again[0], first[0])
			}
			if got, want := execOutput(again), "stdout 0 out\n|stderr 0 err\n|exit 0"; got != want {
				t.Errorf("the replay streamed %q, want everything from offset 0 and the exit: %q", got, want)
			}

			started := start(t, e.procs, ws, "cmd-start", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "echo run >> " + runs}})
			if _, err := e.procs.WaitProcess(bg, connect.NewRequest(&ctrlv1.WaitProcessRequest{WorkspaceId: ws, ProcessId: started.GetProcessId()})); err != nil {
				t.Fatal(err)
			}
			replayed := start(t, e.procs, ws, "cmd-start", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "echo run >> " + runs}})
			if replayed.GetProcessId() != started.GetProcessId() || replayed.GetPid() != started.GetPid() ||
				!replayed.GetStartedAt().AsTime().Equal(started.GetStartedAt().AsTime()) || replayed.GetGeneration() != started.GetGeneration() {
				t.Errorf("a replay after the process ended answered %v, want %v", replayed, started)
			}
			if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") != 2 {
				t.Errorf("two commands, each replayed once, ran %d processes, want 2", strings.Count(string(b), "run"))
			}
		})
	}
}

func sameStarted(a, b *ctrlv1.ProcessStarted) bool {
	return a != nil && b != nil && a.GetProcessId() == b.GetProcessId() && a.GetPid() == b.GetPid() && a.GetStartedAt().AsTime().Equal(b.GetStartedAt().AsTime())
}

// execOutput is an exec's events after `started`, as "stream offset data"
// and "exit code", joined by "|".
func execOutput(events []*ctrlv1.ExecProcessResponse) string {
	var parts []string
	for _, ev := range events[1:] {
		switch {
		case ev.GetOutput() != nil:
			o := ev.GetOutput()
			parts = append(parts, strings.ToLower(strings.TrimPrefix(o.GetStream().String(), "PROCESS_OUTPUT_STREAM_"))+" "+strconv.FormatUint(o.GetOffset(), 10)+" "+string(o.GetData()))
		case ev.GetExit() != nil:
			parts = append(parts, "exit "+strconv.Itoa(int(ev.GetExit().GetExitCode())))
		}
	}
	return strings.Join(parts, "|")
}

// StartProcess: "the guest tags each process with its command_id so that a
// replay after a ctrl restart finds the process instead of starting a
// second one". The first ctrl goes away after the guest started the
// process and before it recorded the answer (its call is cut there); a
// new ctrl on the same database answers the replay.
func TestAReplayAfterACtrlRestartFindsTheProcess(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b.DSN(t))
			ws := e.execution(t, "ws-1.1", "node-a", 1)
			runs := filepath.Join(t.TempDir(), "runs")
			spec := &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "echo run >> " + runs + "; exec sleep 60"}}
			ctx, cut := context.WithCancel(bg)
			e.data.mu.Lock()
			e.data.answered = func(r *http.Request) {
				cut()
				<-r.Context().Done() // the first ctrl gave up on the answer
			}
			e.data.mu.Unlock()
			_, err := e.procs.StartProcess(ctx, connect.NewRequest(&ctrlv1.StartProcessRequest{
				Command: &ctrlv1.CommandMetadata{CommandId: "cmd-1"}, WorkspaceId: ws, Spec: spec}))
			if connect.CodeOf(err) != connect.CodeCanceled {
				t.Fatalf("the cut start: %v, want canceled", err)
			}
			e.data.mu.Lock()
			e.data.answered = nil
			e.data.mu.Unlock()

			restarted := e.ctrl(t)
			p := start(t, restarted, ws, "cmd-1", spec)
			t.Cleanup(func() {
				_, _ = restarted.SignalProcess(bg, connect.NewRequest(&ctrlv1.SignalProcessRequest{WorkspaceId: ws, ProcessId: p.GetProcessId(), Signal: ctrlv1.ProcessSignal_PROCESS_SIGNAL_SIGKILL}))
			})
			list, err := restarted.ListProcesses(bg, connect.NewRequest(&ctrlv1.ListProcessesRequest{WorkspaceId: ws}))
			if err != nil {
				t.Fatal(err)
			}
			if ps := list.Msg.GetProcesses(); len(ps) != 1 || ps[0].GetProcessId() != p.GetProcessId() || ps[0].GetCommandId() != "cmd-1" {
				t.Errorf("the guest runs %v, want only the replay's answer %s, tagged cmd-1", ps, p.GetProcessId())
			}
			testenv.WaitFor(t, "the process to have run", func() bool { b, _ := os.ReadFile(runs); return len(b) > 0 })
			if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") != 1 {
				t.Errorf("the process ran %d times, want once", strings.Count(string(b), "run"))
			}
		})
	}
}

// ProcessService: "A process_id of an ended execution is not_found";
// Process.process_id "is assigned by ctrl and is never reused within the
// Workspace, across executions"; generation "is the Workspace.generation
// of the execution it runs in".
func TestProcessesBelongToOneExecution(t *testing.T) {
	e := newEnv(t, storetest.SQLiteDSN(t))
	ws := e.execution(t, "ws-1.1", "node-a", 4)
	ids := map[string]bool{}
	var old *ctrlv1.StartProcessResponse
	for range 10 {
		old = start(t, e.procs, ws, "", trueSpec)
		ids[old.GetProcessId()] = true
	}
	if got, err := getProcess(e.procs, ws, old.GetProcessId()); err != nil || old.GetGeneration() != 4 || got.GetGeneration() != 4 {
		t.Errorf("generation in execution 4: started %d, GetProcess %d %v", old.GetGeneration(), got.GetGeneration(), err)
	}

	e.execution(t, "ws-1.2", "node-a", 5) // stopped and started again
	for _, c := range everyCall[2:] {
		if c.name == "ListProcesses" {
			continue
		}
		wantDetail(t, c.name+" of a process of the ended execution", c.do(e.procs, ws, old.GetProcessId()), connect.CodeNotFound, c.stage, "process_id")
	}
	for range 10 {
		p := start(t, e.procs, ws, "", trueSpec)
		if ids[p.GetProcessId()] || p.GetGeneration() != 5 {
			t.Errorf("a start in execution 5: %v, want a process_id never given before, generation 5", p)
		}
		ids[p.GetProcessId()] = true
	}
}

// ProcessService: "a stream cut by a transient fault fails as unavailable
// and is resumed with StreamProcessOutput from the offsets already
// received." The fault cuts ctrl's connections to the node's data
// endpoint; the execution goes on.
func TestACutStreamIsUnavailableAndResumes(t *testing.T) {
	e := newEnv(t, storetest.SQLiteDSN(t))
	ws := e.execution(t, "ws-1.1", "node-a", 1)
	p := start(t, e.procs, ws, "", &ctrlv1.ProcessSpec{Argv: []string{"cat"}, Stdin: true})
	send := func(data string, closeIt bool) {
		t.Helper()
		if _, err := e.procs.SendProcessInput(bg, connect.NewRequest(&ctrlv1.SendProcessInputRequest{WorkspaceId: ws, ProcessId: p.GetProcessId(), Data: []byte(data), Close: closeIt})); err != nil {
			t.Fatal(err)
		}
	}
	// Output first: a stream's call returns with its first event.
	send("abc", false)
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	s, err := e.procs.StreamProcessOutput(ctx, connect.NewRequest(&ctrlv1.StreamProcessOutputRequest{WorkspaceId: ws, ProcessId: p.GetProcessId()}))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() || string(s.Msg().GetOutput().GetData()) != "abc" {
		t.Fatalf("first event %v %v, want abc", s.Msg(), s.Err())
	}
	e.guest.CloseClientConnections()
	for s.Receive() {
	}
	wantDetail(t, "a stream whose relay was cut", s.Err(), connect.CodeUnavailable, stageStream, "")
	s.Close()

	send("def", true)
	s, err = e.procs.StreamProcessOutput(ctx, connect.NewRequest(&ctrlv1.StreamProcessOutputRequest{WorkspaceId: ws, ProcessId: p.GetProcessId(), StdoutOffset: 3}))
	if err != nil {
		t.Fatal(err)
	}
	events, err := drain(s)
	if err != nil || len(events) != 2 || string(events[0].GetOutput().GetData()) != "def" || events[0].GetOutput().GetOffset() != 3 || events[1].GetExit() == nil {
		t.Errorf("resumed from offset 3: %v %v, want def at 3, then the exit", events, err)
	}
}

// A StreamProcessOutput whose process has nothing to send yet answers its
// headers at once, not with its first event: a client that waits for the
// response (its headers) knows the stream is open before the process
// writes anything or the first keepalive (15 s) comes. Here the process
// writes only what the test sends it once the headers have come, so its
// first event is that output, not the keepalive that carried the headers
// before.
func TestAnIdleStreamAnswersItsHeadersBeforeAnyEvent(t *testing.T) {
	e := newEnv(t, storetest.SQLiteDSN(t))
	ws := e.execution(t, "ws-1.1", "node-a", 1)
	p := start(t, e.procs, ws, "", &ctrlv1.ProcessSpec{Argv: []string{"cat"}, Stdin: true})
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	s, err := e.procs.StreamProcessOutput(ctx, connect.NewRequest(&ctrlv1.StreamProcessOutputRequest{WorkspaceId: ws, ProcessId: p.GetProcessId()}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := s.Conn()
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.ResponseHeader() // blocks until the response has begun
	if _, err := e.procs.SendProcessInput(bg, connect.NewRequest(&ctrlv1.SendProcessInputRequest{WorkspaceId: ws, ProcessId: p.GetProcessId(), Data: []byte("x"), Close: true})); err != nil {
		t.Fatal(err)
	}
	if !s.Receive() || string(s.Msg().GetOutput().GetData()) != "x" {
		t.Errorf("first event after the headers and then the input: %v %v, want the output x", s.Msg(), s.Err())
	}
}
