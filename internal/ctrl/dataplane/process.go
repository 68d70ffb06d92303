// Package dataplane serves the data plane of the Native Workspace endpoint
// (processes, later files): ctrl authorises the call, finds the node that
// runs the Workspace's current execution and relays the call to that
// node's data endpoint, which relays it to the guest agent.
//
// Authorisation is per Workspace in the sense that a call names one
// Workspace and reaches only its current execution; every key of scope
// "workspace" may call any Workspace (per-Workspace keys and data-plane
// sessions are not built yet).
package dataplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
)

// Processes serves ProcessService. ExecProcess is built; the other RPCs
// answer unimplemented.
type Processes struct {
	ctrlv1connect.UnimplementedProcessServiceHandler
	*relay
}

// NewProcesses makes the process service.
func NewProcesses(w *workspace.Service, f *fleet.Fleet) *Processes {
	return &Processes{relay: newRelay(w, f)}
}

// Files is the file service on the same relay. It hangs off Processes so
// that the API's backend, which already carries Processes, needs no new
// wiring.
func (p *Processes) Files() *Files { return &Files{relay: p.relay} }

// ExecProcess runs a process in the Workspace's guest and streams it.
func (p *Processes) ExecProcess(ctx context.Context, req *connect.Request[ctrlv1.ExecProcessRequest], stream *connect.ServerStream[ctrlv1.ExecProcessResponse]) error {
	msg := req.Msg
	if len(msg.GetSpec().GetArgv()) == 0 || msg.GetSpec().GetArgv()[0] == "" {
		return apierr.Invalid("spec.argv", "must name a program")
	}
	if msg.GetSpec().GetPty() != nil || msg.GetSpec().GetUser() != "" || msg.GetSpec().GetStdin() {
		return failed(ctrlv1.FailureStage_FAILURE_STAGE_STARTING_PROCESS, ctrlv1.FailureReason_FAILURE_REASON_UNSUPPORTED, connect.CodeUnimplemented,
			"spec.pty, spec.user and spec.stdin are not built yet")
	}
	g, _, err := p.guest(ctx, msg.GetWorkspaceId(), ctrlv1.FailureStage_FAILURE_STAGE_STARTING_PROCESS)
	if err != nil {
		return err
	}
	node, err := g.Exec(ctx, connect.NewRequest(&guestv1.ExecRequest{
		Argv: msg.GetSpec().GetArgv(), Env: msg.GetSpec().GetEnv(), Cwd: msg.GetSpec().GetCwd(),
	}))
	if err != nil {
		return stageOf(err, ctrlv1.FailureStage_FAILURE_STAGE_STARTING_PROCESS)
	}
	defer node.Close()
	return relayExec(node, stream)
}

// relayExec turns the guest's exec events into the API's.
func relayExec(node *connect.ServerStreamForClient[guestv1.ExecResponse], stream *connect.ServerStream[ctrlv1.ExecProcessResponse]) error {
	processID := newProcessID()
	offsets := map[ctrlv1.ProcessOutputStream]uint64{}
	started := false
	for node.Receive() {
		var out *ctrlv1.ExecProcessResponse
		switch ev := node.Msg().GetEvent().(type) {
		case *guestv1.ExecResponse_Started:
			started = true
			out = &ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Started{Started: &ctrlv1.ProcessStarted{
				ProcessId: processID, Pid: ev.Started.GetPid(), StartedAt: timestamppb.Now(),
			}}}
		case *guestv1.ExecResponse_Output:
			s := ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT
			if ev.Output.GetStream() == guestv1.ExecStream_EXEC_STREAM_STDERR {
				s = ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDERR
			}
			out = &ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Output{Output: &ctrlv1.ProcessOutputChunk{
				Stream: s, Offset: offsets[s], Data: ev.Output.GetData(),
			}}}
			offsets[s] += uint64(len(ev.Output.GetData()))
		case *guestv1.ExecResponse_Exited:
			cause := ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_EXITED
			if ev.Exited.GetSignal() != 0 {
				cause = ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_SIGNALED
			}
			out = &ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Exit{Exit: &ctrlv1.ProcessExitStatus{
				Cause: cause, ExitCode: ev.Exited.GetExitCode(), Signal: ev.Exited.GetSignal(), EndedAt: timestamppb.New(time.Now()),
			}}}
		default:
			continue
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
	if err := node.Err(); err != nil {
		stage := ctrlv1.FailureStage_FAILURE_STAGE_STREAMING_PROCESS
		if !started {
			stage = ctrlv1.FailureStage_FAILURE_STAGE_STARTING_PROCESS
		}
		return stageOf(err, stage)
	}
	return nil
}

func newProcessID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "proc-" + hex.EncodeToString(b)
}
