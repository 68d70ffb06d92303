// Package dataplane serves the data plane of the Native Workspace endpoint
// (processes and files): ctrl authorises the call, finds the node that
// runs the Workspace's current execution and relays the call to that
// node's data endpoint, which relays it to the guest agent.
//
// Authorisation happens before a call gets here (internal/ctrl/session's
// guard on the endpoint): an API key of scope workspace, or a data-plane
// session of the Workspace the call names; a call reaches only that
// Workspace's current execution.
package dataplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/store"
)

// Processes serves ProcessService: the guest agent keeps the processes
// (internal/guest/processes.go); ctrl names them, records the starts made
// under a command_id, checks the Workspace and adds the stage. Every RPC
// is built.
type Processes struct {
	*relay
	store *store.Store
}

var _ ctrlv1connect.ProcessServiceHandler = (*Processes)(nil)

// NewProcesses makes the process service. tp (nil: off) traces its calls
// to the nodes' data endpoints, which continue the trace.
func NewProcesses(st *store.Store, w *workspace.Service, f *fleet.Fleet, tp trace.TracerProvider) *Processes {
	return &Processes{relay: newRelay(w, f, tp), store: st}
}

// Files is the file service on the same relay. It hangs off Processes so
// that the API's backend, which already carries Processes, needs no new
// wiring.
func (p *Processes) Files() *Files { return &Files{relay: p.relay} }

// Stages of the process calls (ProcessService's comments).
const (
	stageStart  = ctrlv1.FailureStage_FAILURE_STAGE_STARTING_PROCESS
	stageStream = ctrlv1.FailureStage_FAILURE_STAGE_STREAMING_PROCESS
	stageUse    = ctrlv1.FailureStage_FAILURE_STAGE_USING_PROCESS
)

// start starts a process in the Workspace's guest and returns the client
// that reaches it. Under a command_id the start is a command (kind and
// request identify its input): a replay answers the recorded process and
// starts nothing, even after the process or its execution ended; other
// input under the same command_id is already_exists. A start the guest
// refuses is not recorded. Without a command_id nothing is recorded and a
// retry starts another process.
func (p *Processes) start(ctx context.Context, kind string, req proto.Message, command *ctrlv1.CommandMetadata, workspaceID string, spec *ctrlv1.ProcessSpec) (*target, *ctrlv1.StartProcessResponse, error) {
	if len(spec.GetArgv()) == 0 || spec.GetArgv()[0] == "" {
		return nil, nil, apierr.New(connect.CodeInvalidArgument, &ctrlv1.ErrorDetail{Stage: stageStart,
			Reason: ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST, Field: "spec.argv"}, "spec.argv: must name a program")
	}
	recorded := &ctrlv1.StartProcessResponse{ProcessId: newProcessID()}
	if command.GetCommandId() != "" {
		var err error
		if recorded, err = p.admitStart(ctx, kind, req, command, workspaceID); err != nil {
			return nil, nil, err
		}
	}
	g, err := p.guest(ctx, workspaceID, stageStart)
	if err != nil && recorded.GetStartedAt() != nil {
		// A replay of a start that completed: the process is what was
		// recorded, though its execution is gone.
		return nil, recorded, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if recorded.GetStartedAt() != nil {
		return g, recorded, nil
	}
	res, err := g.StartProcess(ctx, connect.NewRequest(&guestv1.StartProcessRequest{
		ProcessId: recorded.GetProcessId(), CommandId: command.GetCommandId(), Generation: g.workspace.GetGeneration(), Spec: spec,
	}))
	if err != nil {
		p.forgetStart(ctx, command)
		return nil, nil, relayErr(err, stageStart)
	}
	started := res.Msg.GetResponse()
	if err := p.completeStart(ctx, command, started); err != nil {
		return nil, nil, err
	}
	return g, started, nil
}

// Command kinds of the process starts: one command_id serves one of them,
// never both.
const (
	kindStart = "StartProcess"
	kindExec  = "ExecProcess"
)

// admitStart admits a start under its command_id with the process id it
// will have, or returns what was recorded: the whole answer once the guest
// started it, only the process id while that is not known.
func (p *Processes) admitStart(ctx context.Context, kind string, req proto.Message, m *ctrlv1.CommandMetadata, workspaceID string) (*ctrlv1.StartProcessResponse, error) {
	if err := command.ValidateID("command.command_id", m); err != nil {
		return nil, err
	}
	var out *ctrlv1.StartProcessResponse
	err := command.Do(ctx, p.store, func(tx *store.Tx) error {
		res, err := command.Admit(tx, time.Now(), m.GetCommandId(), kind, req, func() (command.Effect, error) {
			return command.Effect{Target: workspaceID, Result: &ctrlv1.StartProcessResponse{ProcessId: newProcessID()}}, nil
		})
		if err != nil {
			return err
		}
		out = res.(*ctrlv1.StartProcessResponse)
		return nil
	})
	return out, err
}

// completeStart records the guest's answer, so replays answer it without
// asking the guest.
func (p *Processes) completeStart(ctx context.Context, m *ctrlv1.CommandMetadata, started *ctrlv1.StartProcessResponse) error {
	if m.GetCommandId() == "" {
		return nil
	}
	return p.store.Tx(ctx, func(tx *store.Tx) error {
		c, err := tx.GetCommand(m.GetCommandId(), true)
		if err != nil {
			return err
		}
		if c.Result, err = anypb.New(started); err != nil {
			return err
		}
		return tx.UpdateCommand(c)
	})
}

// forgetStart drops the record of a start the guest refused: it had no
// effect. A start recorded complete by a concurrent replay stays.
func (p *Processes) forgetStart(ctx context.Context, m *ctrlv1.CommandMetadata) {
	if m.GetCommandId() == "" {
		return
	}
	_ = p.store.Tx(ctx, func(tx *store.Tx) error {
		c, err := tx.GetCommand(m.GetCommandId(), true)
		if err != nil {
			return err
		}
		var res ctrlv1.StartProcessResponse
		if err := c.GetResult().UnmarshalTo(&res); err != nil || res.GetStartedAt() != nil {
			return err
		}
		return tx.DeleteCommand(m.GetCommandId())
	})
}

// StartProcess starts a process and answers once it runs.
func (p *Processes) StartProcess(ctx context.Context, req *connect.Request[ctrlv1.StartProcessRequest]) (*connect.Response[ctrlv1.StartProcessResponse], error) {
	_, started, err := p.start(ctx, kindStart, req.Msg, req.Msg.GetCommand(), req.Msg.GetWorkspaceId(), req.Msg.GetSpec())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(started), nil
}

// ExecProcess starts a process and streams it from offset zero. Ending the
// stream leaves the process running.
func (p *Processes) ExecProcess(ctx context.Context, req *connect.Request[ctrlv1.ExecProcessRequest], stream *connect.ServerStream[ctrlv1.ExecProcessResponse]) error {
	g, started, err := p.start(ctx, kindExec, req.Msg, req.Msg.GetCommand(), req.Msg.GetWorkspaceId(), req.Msg.GetSpec())
	if err != nil {
		return err
	}
	if g == nil {
		// A replay whose execution is gone: its output went with it.
		_, err := p.guest(ctx, req.Msg.GetWorkspaceId(), stageStream)
		return err
	}
	if err := stream.Send(&ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Started{Started: &ctrlv1.ProcessStarted{
		ProcessId: started.GetProcessId(), Pid: started.GetPid(), StartedAt: started.GetStartedAt(),
	}}}); err != nil {
		return err
	}
	in, err := g.StreamProcessOutput(ctx, connect.NewRequest(&guestv1.StreamProcessOutputRequest{Request: &ctrlv1.StreamProcessOutputRequest{
		ProcessId: started.GetProcessId(),
	}}))
	if err != nil {
		return p.ended(relayErr(err, stageStream), g, stageStream)
	}
	defer in.Close()
	return p.ended(relayStream(in, execEvent, stream.Send, stageStream), g, stageStream)
}

// execEvent is a StreamProcessOutput event as ExecProcess sends it.
func execEvent(m *guestv1.StreamProcessOutputResponse) *ctrlv1.ExecProcessResponse {
	switch ev := m.GetResponse().GetEvent().(type) {
	case *ctrlv1.StreamProcessOutputResponse_Output:
		return &ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Output{Output: ev.Output}}
	case *ctrlv1.StreamProcessOutputResponse_Exit:
		return &ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Exit{Exit: ev.Exit}}
	}
	return &ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Keepalive{Keepalive: &ctrlv1.ProcessKeepalive{}}}
}

// StreamProcessOutput streams a process's output from the offsets given.
func (p *Processes) StreamProcessOutput(ctx context.Context, req *connect.Request[ctrlv1.StreamProcessOutputRequest], stream *connect.ServerStream[ctrlv1.StreamProcessOutputResponse]) error {
	g, err := p.guest(ctx, req.Msg.GetWorkspaceId(), stageStream)
	if err != nil {
		return err
	}
	// The headers now, not with the first event, which may be a process's
	// first output minutes away or the 15-s keepalive: a client waiting
	// for the response knows the stream is open. What the guest refuses
	// still ends the stream with its error.
	if err := stream.Send(nil); err != nil {
		return err
	}
	in, err := g.StreamProcessOutput(ctx, connect.NewRequest(&guestv1.StreamProcessOutputRequest{Request: req.Msg}))
	if err != nil {
		return p.ended(relayErr(err, stageStream), g, stageStream)
	}
	defer in.Close()
	return p.ended(relayStream(in, (*guestv1.StreamProcessOutputResponse).GetResponse, stream.Send, stageStream), g, stageStream)
}

// SendProcessInput writes to a process's stdin.
func (p *Processes) SendProcessInput(ctx context.Context, req *connect.Request[ctrlv1.SendProcessInputRequest]) (*connect.Response[ctrlv1.SendProcessInputResponse], error) {
	g, err := p.guest(ctx, req.Msg.GetWorkspaceId(), stageUse)
	if err != nil {
		return nil, err
	}
	return unary(ctx, stageUse, g.SendProcessInput, &guestv1.SendProcessInputRequest{Request: req.Msg}, (*guestv1.SendProcessInputResponse).GetResponse)
}

// ResizeProcessPty sets a process's terminal size.
func (p *Processes) ResizeProcessPty(ctx context.Context, req *connect.Request[ctrlv1.ResizeProcessPtyRequest]) (*connect.Response[ctrlv1.ResizeProcessPtyResponse], error) {
	g, err := p.guest(ctx, req.Msg.GetWorkspaceId(), stageUse)
	if err != nil {
		return nil, err
	}
	return unary(ctx, stageUse, g.ResizeProcessPty, &guestv1.ResizeProcessPtyRequest{Request: req.Msg}, (*guestv1.ResizeProcessPtyResponse).GetResponse)
}

// SignalProcess signals a process's group.
func (p *Processes) SignalProcess(ctx context.Context, req *connect.Request[ctrlv1.SignalProcessRequest]) (*connect.Response[ctrlv1.SignalProcessResponse], error) {
	g, err := p.guest(ctx, req.Msg.GetWorkspaceId(), stageUse)
	if err != nil {
		return nil, err
	}
	return unary(ctx, stageUse, g.SignalProcess, &guestv1.SignalProcessRequest{Request: req.Msg}, (*guestv1.SignalProcessResponse).GetResponse)
}

// GetProcess reads one process.
func (p *Processes) GetProcess(ctx context.Context, req *connect.Request[ctrlv1.GetProcessRequest]) (*connect.Response[ctrlv1.GetProcessResponse], error) {
	g, err := p.guest(ctx, req.Msg.GetWorkspaceId(), stageUse)
	if err != nil {
		return nil, err
	}
	return unary(ctx, stageUse, g.GetProcess, &guestv1.GetProcessRequest{Request: req.Msg}, (*guestv1.GetProcessResponse).GetResponse)
}

// ListProcesses lists the processes of the current execution.
func (p *Processes) ListProcesses(ctx context.Context, req *connect.Request[ctrlv1.ListProcessesRequest]) (*connect.Response[ctrlv1.ListProcessesResponse], error) {
	g, err := p.guest(ctx, req.Msg.GetWorkspaceId(), stageUse)
	if err != nil {
		return nil, err
	}
	return unary(ctx, stageUse, g.ListProcesses, &guestv1.ListProcessesRequest{Request: req.Msg}, (*guestv1.ListProcessesResponse).GetResponse)
}

// WaitProcess returns once a process has ended.
func (p *Processes) WaitProcess(ctx context.Context, req *connect.Request[ctrlv1.WaitProcessRequest]) (*connect.Response[ctrlv1.WaitProcessResponse], error) {
	g, err := p.guest(ctx, req.Msg.GetWorkspaceId(), stageStream)
	if err != nil {
		return nil, err
	}
	res, err := unary(ctx, stageStream, g.WaitProcess, &guestv1.WaitProcessRequest{Request: req.Msg}, (*guestv1.WaitProcessResponse).GetResponse)
	return res, p.ended(err, g, stageStream)
}

func newProcessID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "proc-" + hex.EncodeToString(b)
}
