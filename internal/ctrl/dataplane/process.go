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
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
)

// Processes serves ProcessService. ExecProcess is built; the other RPCs
// answer unimplemented.
type Processes struct {
	ctrlv1connect.UnimplementedProcessServiceHandler
	workspaces *workspace.Service
	fleet      *fleet.Fleet
	http       *http.Client
}

// NewProcesses makes the process service.
func NewProcesses(w *workspace.Service, f *fleet.Fleet) *Processes {
	t := &http.Transport{}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetUnencryptedHTTP2(true)
	return &Processes{workspaces: w, fleet: f, http: &http.Client{Transport: t}}
}

func failed(stage ctrlv1.FailureStage, reason ctrlv1.FailureReason, code connect.Code, format string, args ...any) error {
	return apierr.New(code, &ctrlv1.ErrorDetail{Stage: stage, Reason: reason, Retryable: code == connect.CodeUnavailable}, format, args...)
}

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
	w, nodeID, instance, err := p.workspaces.Execution(ctx, msg.GetWorkspaceId())
	if err != nil {
		return err
	}
	if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || instance == "" {
		return apierr.New(connect.CodeFailedPrecondition, &ctrlv1.ErrorDetail{
			Stage: ctrlv1.FailureStage_FAILURE_STAGE_STARTING_PROCESS, Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, ObservedWorkspace: w,
		}, "workspace %s is %s: a process needs an AVAILABLE Workspace (start it first)", w.GetWorkspaceId(), w.GetState())
	}
	endpoint, token, err := p.fleet.NodeData(ctx, nodeID)
	if err != nil || endpoint == "" {
		return failed(ctrlv1.FailureStage_FAILURE_STAGE_STARTING_PROCESS, ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, connect.CodeUnavailable,
			"node %s has no data endpoint now", nodeID)
	}
	client := nodev1connect.NewNodeDataServiceClient(p.http, endpoint, connect.WithInterceptors(auth.Bearer(token)))
	node, err := client.Exec(ctx, connect.NewRequest(&nodev1.ExecRequest{InstanceId: instance, Exec: &guestv1.ExecRequest{
		Argv: msg.GetSpec().GetArgv(), Env: msg.GetSpec().GetEnv(), Cwd: msg.GetSpec().GetCwd(),
	}}))
	if err != nil {
		return stageOf(err, ctrlv1.FailureStage_FAILURE_STAGE_STARTING_PROCESS)
	}
	defer node.Close()
	return relay(node, stream)
}

// relay turns the guest's exec events into the API's.
func relay(node *connect.ServerStreamForClient[nodev1.ExecResponse], stream *connect.ServerStream[ctrlv1.ExecProcessResponse]) error {
	processID := newProcessID()
	offsets := map[ctrlv1.ProcessOutputStream]uint64{}
	started := false
	for node.Receive() {
		var out *ctrlv1.ExecProcessResponse
		switch ev := node.Msg().GetEvent().GetEvent().(type) {
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

// stageOf keeps a node's canonical code and message and names the stage.
func stageOf(err error, stage ctrlv1.FailureStage) error {
	var cerr *connect.Error
	code := connect.CodeUnavailable
	msg := err.Error()
	if errors.As(err, &cerr) {
		code, msg = cerr.Code(), cerr.Message()
	}
	reason := ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE
	if code == connect.CodeFailedPrecondition || code == connect.CodeNotFound || code == connect.CodeInvalidArgument {
		reason = ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST
	}
	return failed(stage, reason, code, "%s", msg)
}

func newProcessID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "proc-" + hex.EncodeToString(b)
}
