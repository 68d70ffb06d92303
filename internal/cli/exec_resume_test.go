package cli_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

// cuttingProcesses is a ProcessService whose ExecProcess stream is cut as
// unavailable after the process started and printed, before started when
// cutEarly; its first StreamProcessOutput is cut too, with nothing sent,
// and the next sends the rest from the offsets asked for.
type cuttingProcesses struct {
	ctrlv1connect.UnimplementedProcessServiceHandler
	cutEarly bool
	mu       sync.Mutex
	resumes  []*ctrlv1.StreamProcessOutputRequest
}

func output(stream ctrlv1.ProcessOutputStream, offset uint64, data string) *ctrlv1.ProcessOutputChunk {
	return &ctrlv1.ProcessOutputChunk{Stream: stream, Offset: offset, Data: []byte(data)}
}

func (p *cuttingProcesses) ExecProcess(_ context.Context, _ *connect.Request[ctrlv1.ExecProcessRequest], s *connect.ServerStream[ctrlv1.ExecProcessResponse]) error {
	cut := connect.NewError(connect.CodeUnavailable, errors.New("the node's session was replaced"))
	if p.cutEarly {
		return cut
	}
	for _, m := range []*ctrlv1.ExecProcessResponse{
		{Event: &ctrlv1.ExecProcessResponse_Started{Started: &ctrlv1.ProcessStarted{ProcessId: "proc-1"}}},
		{Event: &ctrlv1.ExecProcessResponse_Output{Output: output(ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT, 0, "hello ")}},
		{Event: &ctrlv1.ExecProcessResponse_Output{Output: output(ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDERR, 0, "warn\n")}},
	} {
		if err := s.Send(m); err != nil {
			return err
		}
	}
	return cut
}

func (p *cuttingProcesses) StreamProcessOutput(_ context.Context, req *connect.Request[ctrlv1.StreamProcessOutputRequest], s *connect.ServerStream[ctrlv1.StreamProcessOutputResponse]) error {
	p.mu.Lock()
	p.resumes = append(p.resumes, req.Msg)
	first := len(p.resumes) == 1
	p.mu.Unlock()
	if first {
		return connect.NewError(connect.CodeUnavailable, errors.New("ctrl is restarting"))
	}
	if err := s.Send(&ctrlv1.StreamProcessOutputResponse{Event: &ctrlv1.StreamProcessOutputResponse_Output{
		Output: output(ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT, req.Msg.GetStdoutOffset(), "world\n")}}); err != nil {
		return err
	}
	return s.Send(&ctrlv1.StreamProcessOutputResponse{Event: &ctrlv1.StreamProcessOutputResponse_Exit{Exit: &ctrlv1.ProcessExitStatus{ExitCode: 3}}})
}

// execAgainst runs `kibotos workspace exec` against a Workspace endpoint
// serving p alone.
func execAgainst(t *testing.T, p ctrlv1connect.ProcessServiceHandler) (int, string, string) {
	t.Helper()
	return cliAgainst(t, p, "workspace", "exec", "ws-1", "--", "sh", "-c", "work")
}

// cliAgainst runs the CLI with args against a Workspace endpoint serving
// p alone.
func cliAgainst(t *testing.T, p ctrlv1connect.ProcessServiceHandler, args ...string) (int, string, string) {
	t.Helper()
	onFakeEndpoint(t, func(m *http.ServeMux) { m.Handle(ctrlv1connect.NewProcessServiceHandler(p)) })
	return runCLI(args...)
}

// ProcessOutputChunk: "a stream cut by a transient fault fails as
// unavailable and is resumed with StreamProcessOutput from the offsets
// already received." exec does so, again after a resume that is cut
// itself, and the output and exit status come out whole, once. A stream
// cut before the process started has no process to resume: exec fails.
func TestExecResumesACutStream(t *testing.T) {
	p := &cuttingProcesses{}
	code, out, errOut := execAgainst(t, p)
	if code != 3 || out != "hello world\n" || !strings.Contains(errOut, "warn\n") || !strings.Contains(errOut, "resuming") {
		t.Errorf("exec across two cuts: exit %d, stdout %q, stderr %q; want 3, the output once, and a word that it resumed", code, out, errOut)
	}
	if len(p.resumes) != 2 {
		t.Fatalf("%d resumes, want 2", len(p.resumes))
	}
	for _, r := range p.resumes {
		if r.GetProcessId() != "proc-1" || r.GetWorkspaceId() != "ws-1" || r.GetStdoutOffset() != 6 || r.GetStderrOffset() != 5 || r.GetSnapshot() {
			t.Errorf("a resume asked %v, want proc-1 of ws-1 from stdout 6, stderr 5, following", r)
		}
	}

	early := &cuttingProcesses{cutEarly: true}
	if code, _, errOut := execAgainst(t, early); code == 0 || !strings.Contains(errOut, "unavailable") || len(early.resumes) != 0 {
		t.Errorf("a stream cut before the process started: exit %d, %q, %d resumes; want an unavailable failure, none", code, errOut, len(early.resumes))
	}
}

// `process logs` reads a process's output with StreamProcessOutput from
// offset zero, resumed as exec's stream is when cut: without --follow a
// snapshot that exits 0 whatever the process did, with it the live output
// to the process's end and its status.
func TestProcessLogsReadsTheRetainedOutputAndFollowsWithFollow(t *testing.T) {
	for _, follow := range []bool{false, true} {
		p := &cuttingProcesses{}
		args := []string{"workspace", "process", "logs", "ws-1", "proc-1"}
		want := 0
		if follow {
			args, want = append(args, "--follow"), 3
		}
		code, out, errOut := cliAgainst(t, p, args...)
		if code != want || out != "world\n" {
			t.Errorf("logs (follow %v): exit %d, stdout %q, stderr %q; want %d and the output", follow, code, out, errOut, want)
		}
		if len(p.resumes) != 2 {
			t.Fatalf("logs (follow %v): %d streams opened, want 2 (the first is cut)", follow, len(p.resumes))
		}
		for _, r := range p.resumes {
			if r.GetProcessId() != "proc-1" || r.GetWorkspaceId() != "ws-1" || r.GetStdoutOffset() != 0 || r.GetStderrOffset() != 0 || r.GetSnapshot() == follow {
				t.Errorf("logs (follow %v) asked %v, want proc-1 of ws-1 from zero, snapshot %v", follow, r, !follow)
			}
		}
	}
}

// gappyProcesses is a ProcessService whose process's stdout skips bytes
// 2 to 4 (the guest dropped them) and exits with code.
type gappyProcesses struct {
	ctrlv1connect.UnimplementedProcessServiceHandler
	code int32
}

func (p gappyProcesses) events() []*ctrlv1.ProcessOutputChunk {
	return []*ctrlv1.ProcessOutputChunk{
		output(ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT, 0, "ab"),
		output(ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT, 5, "cd"),
	}
}

func (p gappyProcesses) ExecProcess(_ context.Context, _ *connect.Request[ctrlv1.ExecProcessRequest], s *connect.ServerStream[ctrlv1.ExecProcessResponse]) error {
	if err := s.Send(&ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Started{Started: &ctrlv1.ProcessStarted{ProcessId: "proc-1"}}}); err != nil {
		return err
	}
	for _, o := range p.events() {
		if err := s.Send(&ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Output{Output: o}}); err != nil {
			return err
		}
	}
	return s.Send(&ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Exit{Exit: &ctrlv1.ProcessExitStatus{ExitCode: p.code}}})
}

func (p gappyProcesses) StreamProcessOutput(_ context.Context, _ *connect.Request[ctrlv1.StreamProcessOutputRequest], s *connect.ServerStream[ctrlv1.StreamProcessOutputResponse]) error {
	for _, o := range p.events() {
		if err := s.Send(&ctrlv1.StreamProcessOutputResponse{Event: &ctrlv1.StreamProcessOutputResponse_Output{Output: o}}); err != nil {
			return err
		}
	}
	return s.Send(&ctrlv1.StreamProcessOutputResponse{Event: &ctrlv1.StreamProcessOutputResponse_Exit{Exit: &ctrlv1.ProcessExitStatus{ExitCode: p.code}}})
}

// ProcessOutputChunk: "A chunk whose offset is above the offset asked for
// means the bytes in between were dropped." exec says which, and an exec
// whose process exited 0 fails: its output is not whole. A process's own
// failure keeps its status; process logs says it and exits as before.
func TestExecSaysWhatOutputTheGuestDroppedAndFailsOnIt(t *testing.T) {
	for _, tc := range []struct {
		p    gappyProcesses
		args []string
		want int
	}{
		{gappyProcesses{code: 0}, []string{"workspace", "exec", "ws-1", "--", "cat", "big"}, 1},
		{gappyProcesses{code: 3}, []string{"workspace", "exec", "ws-1", "--", "cat", "big"}, 3},
		{gappyProcesses{code: 0}, []string{"workspace", "process", "logs", "ws-1", "proc-1"}, 0},
		{gappyProcesses{code: 0}, []string{"workspace", "process", "logs", "-f", "ws-1", "proc-1"}, 0},
	} {
		code, out, errOut := cliAgainst(t, tc.p, tc.args...)
		if code != tc.want || out != "abcd" || !strings.Contains(errOut, "stdout: the guest dropped bytes 2 to 4 before this command read them") ||
			!strings.Contains(errOut, "the output shown is not whole: the guest dropped 3 bytes of stdout") {
			t.Errorf("%v (the process exits %d): exit %d, stdout %q, stderr %q; want %d, the bytes received, and what was dropped", tc.args, tc.p.code, code, out, errOut, tc.want)
		}
	}
}
