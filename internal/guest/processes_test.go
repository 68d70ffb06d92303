package guest_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/internal/guest"
)

var processSeq atomic.Int64

func startProcess(t *testing.T, c guestv1connect.GuestAgentServiceClient, commandID string, spec *ctrlv1.ProcessSpec) *ctrlv1.StartProcessResponse {
	t.Helper()
	res, err := c.StartProcess(context.Background(), connect.NewRequest(&guestv1.StartProcessRequest{
		ProcessId: fmt.Sprintf("proc-%d", processSeq.Add(1)), CommandId: commandID, Generation: 3, Spec: spec,
	}))
	if err != nil {
		t.Fatalf("start %v: %v", spec.GetArgv(), err)
	}
	return res.Msg.GetResponse()
}

// output streams a process from offset zero to its exit.
func output(t *testing.T, c guestv1connect.GuestAgentServiceClient, id string) (stdout, stderr string, exit *ctrlv1.ProcessExitStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.StreamProcessOutput(ctx, connect.NewRequest(&guestv1.StreamProcessOutputRequest{Request: &ctrlv1.StreamProcessOutputRequest{ProcessId: id}}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out, errOut strings.Builder
	for s.Receive() {
		switch ev := s.Msg().GetResponse().GetEvent().(type) {
		case *ctrlv1.StreamProcessOutputResponse_Output:
			if ev.Output.GetStream() == ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDERR {
				errOut.Write(ev.Output.GetData())
			} else {
				out.Write(ev.Output.GetData())
			}
		case *ctrlv1.StreamProcessOutputResponse_Exit:
			exit = ev.Exit
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), exit
}

func input(c guestv1connect.GuestAgentServiceClient, id, data string, offset *uint64, closeIt bool) (uint64, error) {
	res, err := c.SendProcessInput(context.Background(), connect.NewRequest(&guestv1.SendProcessInputRequest{Request: &ctrlv1.SendProcessInputRequest{
		ProcessId: id, Data: []byte(data), Offset: offset, Close: closeIt,
	}}))
	if err != nil {
		return 0, err
	}
	return res.Msg.GetResponse().GetStdinOffset(), nil
}

func TestProcessWithStdinRunsToItsExit(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "cmd-1", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "cat; echo err >&2; exit 3"}, Stdin: true, Env: map[string]string{"X": "1"}})
	if p.GetPid() <= 0 || p.GetGeneration() != 3 {
		t.Errorf("started: %v", p)
	}
	if again := startProcess(t, c, "cmd-1", &ctrlv1.ProcessSpec{Argv: []string{"false"}}); again.GetProcessId() != p.GetProcessId() {
		t.Errorf("a replayed command started %v, want %v", again, p)
	}
	if n, err := input(c, p.GetProcessId(), "hello ", nil, false); err != nil || n != 6 {
		t.Fatalf("input: %d %v", n, err)
	}
	// A retry of the same bytes at offset 0 writes only what is new.
	zero := uint64(0)
	if n, err := input(c, p.GetProcessId(), "hello world", &zero, true); err != nil || n != 11 {
		t.Fatalf("input at an offset: %d %v", n, err)
	}
	stdout, stderr, exit := output(t, c, p.GetProcessId())
	if stdout != "hello world" || stderr != "err\n" || exit.GetCause() != ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_EXITED || exit.GetExitCode() != 3 {
		t.Errorf("output %q %q exit %v", stdout, stderr, exit)
	}
	if _, err := input(c, p.GetProcessId(), "late", nil, false); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("input to an ended process: %v", err)
	}
	got, err := c.GetProcess(context.Background(), connect.NewRequest(&guestv1.GetProcessRequest{Request: &ctrlv1.GetProcessRequest{ProcessId: p.GetProcessId()}}))
	if pr := got.Msg.GetResponse().GetProcess(); err != nil || pr.GetState() != ctrlv1.ProcessState_PROCESS_STATE_EXITED || pr.GetStdoutEndOffset() != 11 ||
		pr.GetStdinOffset() != 11 || len(pr.GetEnvKeys()) != 1 || pr.GetStdinOpen() || pr.GetUser() != "root" {
		t.Errorf("get: %v %v", pr, err)
	}
	list, err := c.ListProcesses(context.Background(), connect.NewRequest(&guestv1.ListProcessesRequest{Request: &ctrlv1.ListProcessesRequest{}}))
	for _, pr := range list.Msg.GetResponse().GetProcesses() {
		if pr.GetProcessId() == p.GetProcessId() {
			t.Errorf("an ended process listed without include_exited: %v", err)
		}
	}
}

func TestSignalAndWait(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "sleep 60 & wait"}})
	_, err := input(c, p.GetProcessId(), "x", nil, false)
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("input without stdin: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err = c.WaitProcess(ctx, connect.NewRequest(&guestv1.WaitProcessRequest{Request: &ctrlv1.WaitProcessRequest{ProcessId: p.GetProcessId()}}))
	cancel()
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("wait with a short deadline: %v", err)
	}
	signal := func() bool {
		res, err := c.SignalProcess(context.Background(), connect.NewRequest(&guestv1.SignalProcessRequest{Request: &ctrlv1.SignalProcessRequest{
			ProcessId: p.GetProcessId(), Signal: ctrlv1.ProcessSignal_PROCESS_SIGNAL_SIGTERM}}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.GetResponse().GetDelivered()
	}
	if !signal() {
		t.Error("SIGTERM to a running process: not delivered")
	}
	res, err := c.WaitProcess(context.Background(), connect.NewRequest(&guestv1.WaitProcessRequest{Request: &ctrlv1.WaitProcessRequest{ProcessId: p.GetProcessId()}}))
	if exit := res.Msg.GetResponse().GetExit(); err != nil || exit.GetCause() != ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_SIGNALED || exit.GetSignal() != 15 {
		t.Errorf("wait: %v %v", exit, err)
	}
	if signal() {
		t.Error("a signal to an ended process was delivered")
	}
	_, err = c.SignalProcess(context.Background(), connect.NewRequest(&guestv1.SignalProcessRequest{Request: &ctrlv1.SignalProcessRequest{ProcessId: p.GetProcessId()}}))
	wantErr(t, "no signal", err, connect.CodeInvalidArgument, "signal")
	_, err = c.GetProcess(context.Background(), connect.NewRequest(&guestv1.GetProcessRequest{Request: &ctrlv1.GetProcessRequest{ProcessId: "nope"}}))
	wantErr(t, "an unknown process", err, connect.CodeNotFound, "process_id")
}

func TestPtyProcess(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", `tty >/dev/null && echo tty-ok; read line; echo "got $line"; stty size`},
		Pty: &ctrlv1.ProcessPty{Rows: 24, Cols: 80}})
	if _, err := c.ResizeProcessPty(context.Background(), connect.NewRequest(&guestv1.ResizeProcessPtyRequest{Request: &ctrlv1.ResizeProcessPtyRequest{
		ProcessId: p.GetProcessId(), Size: &ctrlv1.ProcessPty{Rows: 40, Cols: 100}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := input(c, p.GetProcessId(), "line\n", nil, false); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, exit := output(t, c, p.GetProcessId())
	if !strings.Contains(stdout, "tty-ok") || !strings.Contains(stdout, "got line") || !strings.Contains(stdout, "40 100") || stderr != "" || exit.GetExitCode() != 0 {
		t.Errorf("pty output %q %q exit %v", stdout, stderr, exit)
	}
	_, err := c.ResizeProcessPty(context.Background(), connect.NewRequest(&guestv1.ResizeProcessPtyRequest{Request: &ctrlv1.ResizeProcessPtyRequest{
		ProcessId: p.GetProcessId(), Size: &ctrlv1.ProcessPty{Rows: 1, Cols: 1}}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("resize of an ended process: %v", err)
	}
}

func TestProcessAsUserAndStartFailures(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "id -u; echo $USER $HOME"}, User: "nobody", Cwd: "/"})
	if stdout, _, _ := output(t, c, p.GetProcessId()); !strings.HasPrefix(stdout, "65534\nnobody ") {
		t.Errorf("as nobody: %q", stdout)
	}
	for _, tc := range []struct {
		spec  *ctrlv1.ProcessSpec
		code  connect.Code
		field string
	}{
		{&ctrlv1.ProcessSpec{Argv: []string{"no-such-program"}}, connect.CodeFailedPrecondition, "spec.argv"},
		{&ctrlv1.ProcessSpec{Argv: []string{"true"}, Cwd: "/no/such/dir"}, connect.CodeFailedPrecondition, "spec.cwd"},
		{&ctrlv1.ProcessSpec{Argv: []string{"true"}, User: "no-such-user"}, connect.CodeFailedPrecondition, "spec.user"},
		{&ctrlv1.ProcessSpec{Argv: []string{"true"}, Cwd: "relative"}, connect.CodeInvalidArgument, "spec.cwd"},
		{&ctrlv1.ProcessSpec{Argv: []string{"true"}, Env: map[string]string{"A=B": "c"}}, connect.CodeInvalidArgument, "spec.env"},
		{&ctrlv1.ProcessSpec{Argv: []string{"true"}, Pty: &ctrlv1.ProcessPty{Rows: 0, Cols: 80}}, connect.CodeInvalidArgument, "spec.pty"},
	} {
		_, err := c.StartProcess(context.Background(), connect.NewRequest(&guestv1.StartProcessRequest{ProcessId: "bad", Spec: tc.spec}))
		wantErr(t, fmt.Sprint(tc.spec), err, tc.code, tc.field)
	}
}

// A process that never reads its stdin: input waits at most the caller's
// deadline, and its output is collected meanwhile.
func TestInputToAProcessThatDoesNotRead(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "head -c 2000000 /dev/zero; sleep 1"}, Stdin: true})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := c.SendProcessInput(ctx, connect.NewRequest(&guestv1.SendProcessInputRequest{Request: &ctrlv1.SendProcessInputRequest{
		ProcessId: p.GetProcessId(), Data: make([]byte, 1<<20)}}))
	cancel()
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("input nobody reads: %v, want deadline_exceeded", err)
	}
	stdout, _, exit := output(t, c, p.GetProcessId())
	if exit.GetExitCode() != 0 {
		t.Errorf("exit %v", exit)
	}
	// The window keeps the last MiB at least.
	got, err := c.GetProcess(context.Background(), connect.NewRequest(&guestv1.GetProcessRequest{Request: &ctrlv1.GetProcessRequest{ProcessId: p.GetProcessId()}}))
	if err != nil || got.Msg.GetResponse().GetProcess().GetStdoutEndOffset() != 2000000 || len(stdout) < 1<<20 || len(stdout) > 2000000 {
		t.Errorf("output: %d bytes streamed, record %v %v", len(stdout), got, err)
	}
}

// A process the memory watch kills ends as MEMORY_KILLED.
func TestProcessKilledByTheMemoryWatch(t *testing.T) {
	fake := newFakeProc(t)
	watch := &guest.MemoryWatch{ProcDir: fake.dir, Kill: func(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }}
	c := serve(t, &guest.Agent{Reaper: reaper, Memory: watch})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sleep", "60"}})
	fake.process(int(p.GetPid()), "sleep", 500000)
	t0 := time.Unix(1_700_000_000, 0)
	total := uint64(0)
	for s := 0; s < 120 && watch.Report().GetKillCount() == 0; s++ {
		total += 900_000 // stalled 90% of every second
		fake.pressure(total)
		watch.Sample(t0.Add(time.Duration(s) * time.Second))
	}
	res, err := c.WaitProcess(context.Background(), connect.NewRequest(&guestv1.WaitProcessRequest{Request: &ctrlv1.WaitProcessRequest{ProcessId: p.GetProcessId()}}))
	if exit := res.Msg.GetResponse().GetExit(); err != nil || exit.GetCause() != ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_MEMORY_KILLED || exit.GetSignal() != 9 {
		t.Errorf("exit %v %v, want MEMORY_KILLED", exit, err)
	}
}
