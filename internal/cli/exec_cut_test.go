package cli_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// brokenProcesses is cuttingProcesses whose ExecProcess stream is not
// ended with an error but broken off: the connection under it goes, as
// when ctrl is killed mid-stream.
type brokenProcesses struct{ *cuttingProcesses }

func (p brokenProcesses) ExecProcess(_ context.Context, _ *connect.Request[ctrlv1.ExecProcessRequest], s *connect.ServerStream[ctrlv1.ExecProcessResponse]) error {
	for _, m := range []*ctrlv1.ExecProcessResponse{
		{Event: &ctrlv1.ExecProcessResponse_Started{Started: &ctrlv1.ProcessStarted{ProcessId: "proc-1"}}},
		{Event: &ctrlv1.ExecProcessResponse_Output{Output: output(ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT, 0, "hello ")}},
		{Event: &ctrlv1.ExecProcessResponse_Output{Output: output(ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDERR, 0, "warn\n")}},
	} {
		if err := s.Send(m); err != nil {
			return err
		}
	}
	panic(http.ErrAbortHandler) // net/http's way to break a response off
}

// ProcessService: "a stream cut by a transient fault ... is resumed with
// StreamProcessOutput from the offsets already received." A stream whose
// connection broke ends with an error the client library makes up
// (connect-go: invalid_argument for a message cut short, internal for a
// reset stream), not one ctrl sent: exec resumes it as it does an
// unavailable one.
func TestExecResumesAStreamWhoseConnectionBroke(t *testing.T) {
	p := brokenProcesses{&cuttingProcesses{}}
	code, out, errOut := execAgainst(t, p)
	if code != 3 || out != "hello world\n" || !strings.Contains(errOut, "warn\n") || !strings.Contains(errOut, "resuming") {
		t.Errorf("exec across a broken connection: exit %d, stdout %q, stderr %q; want 3, the output once, and a word that it resumed", code, out, errOut)
	}
	if len(p.resumes) != 2 || p.resumes[1].GetStdoutOffset() != 6 || p.resumes[1].GetStderrOffset() != 5 {
		t.Errorf("resumes %v, want two from stdout 6, stderr 5", p.resumes)
	}
}
