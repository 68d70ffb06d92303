package dataplane

import (
	"context"
	"errors"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/trace"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/guestchan"
	"github.com/kibotos/kibotos/internal/telemetry"
)

// relay reaches the guest agent of a Workspace's current execution through
// its node's data endpoint, which relays kibotos.guest.v1 calls as they are
// (internal/node/dataplane.go). Every data-plane service shares it, so the
// rules of reaching a guest (AVAILABLE, a node with a data endpoint, the
// stage on every error) are written once.
type relay struct {
	workspaces *workspace.Service
	fleet      *fleet.Fleet
	http       *http.Client
}

func newRelay(w *workspace.Service, f *fleet.Fleet, tp trace.TracerProvider) *relay {
	// DisableCompression: the transport would otherwise ask for gzip on
	// every unary call (Accept-Encoding), which a Connect handler takes as
	// leave to compress its answer; see noGzip in target.
	t := &http.Transport{DisableCompression: true}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetUnencryptedHTTP2(true)
	return &relay{workspaces: w, fleet: f, http: &http.Client{Transport: telemetry.Transport(t, tp)}}
}

// target is the guest agent of a Workspace's current execution, and the
// node's own data service on the same endpoint.
type target struct {
	guestv1connect.GuestAgentServiceClient
	node      nodev1connect.NodeDataServiceClient
	workspace *ctrlv1.Workspace
	nodeID    string
	instance  string
}

// guest reaches the guest agent of the Workspace's current execution. A
// Workspace that does not exist is not_found, one that is not AVAILABLE
// failed_precondition with the Workspace as observed, and a node without
// a live control session or a data endpoint unavailable: all at stage.
func (r *relay) guest(ctx context.Context, workspaceID string, stage ctrlv1.FailureStage) (*target, error) {
	w, nodeID, instance, err := r.workspaces.Execution(ctx, workspaceID)
	if err != nil {
		return nil, stageOf(err, stage)
	}
	if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || instance == "" {
		return nil, notAvailable(w, stage)
	}
	// A node whose session lapsed may still answer on its data endpoint,
	// but ctrl no longer knows that it runs the execution.
	live, err := r.fleet.NodeLive(ctx, nodeID)
	if err != nil {
		return nil, stageOf(err, stage)
	}
	if !live {
		return nil, failed(stage, ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, connect.CodeUnavailable,
			"node %s, which runs workspace %s, has no live control session", nodeID, workspaceID)
	}
	endpoint, token, err := r.fleet.NodeData(ctx, nodeID)
	if err != nil || endpoint == "" {
		return nil, failed(stage, ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, connect.CodeUnavailable,
			"node %s has no data endpoint now", nodeID)
	}
	// Neither asks for gzip: the guest would compress every file chunk and
	// output chunk on the Workspace's own CPU (slowly under emulation),
	// for ctrl to inflate at once on a link that gains nothing from it.
	noGzip := connect.WithAcceptCompression("gzip", nil, nil)
	client := guestv1connect.NewGuestAgentServiceClient(r.http, endpoint,
		connect.WithInterceptors(auth.Bearer(token), header{guestchan.InstanceHeader, instance}), noGzip)
	node := nodev1connect.NewNodeDataServiceClient(r.http, endpoint, connect.WithInterceptors(auth.Bearer(token)), noGzip)
	return &target{GuestAgentServiceClient: client, node: node, workspace: w, nodeID: nodeID, instance: instance}, nil
}

func notAvailable(w *ctrlv1.Workspace, stage ctrlv1.FailureStage) error {
	return apierr.New(connect.CodeFailedPrecondition, &ctrlv1.ErrorDetail{
		Stage: stage, Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, ObservedWorkspace: w,
	}, "workspace %s is %s: this call needs an AVAILABLE Workspace (start it first)", w.GetWorkspaceId(), w.GetState())
}

// endedCheck bounds the look at the Workspace after a broken call.
const endedCheck = 5 * time.Second

// ended makes the failure of a call that was open when its execution ended
// (a stop, a delete, the guest powering off) failed_precondition, as the
// API asks; a cut the execution survived stays unavailable. ctrl knows of
// the end once the stop began or the node reported it, so a guest that
// powered itself off a moment ago may still read as a cut.
func (r *relay) ended(err error, t *target, stage ctrlv1.FailureStage) error {
	if connect.CodeOf(err) != connect.CodeUnavailable {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), endedCheck)
	defer cancel()
	w, _, instance, lerr := r.workspaces.Execution(ctx, t.workspace.GetWorkspaceId())
	if lerr != nil || (w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE && instance == t.instance) {
		return err
	}
	return notAvailable(w, stage)
}

func failed(stage ctrlv1.FailureStage, reason ctrlv1.FailureReason, code connect.Code, format string, args ...any) error {
	return apierr.New(code, &ctrlv1.ErrorDetail{Stage: stage, Reason: reason, Retryable: code == connect.CodeUnavailable}, format, args...)
}

// reasons is the reason of a guest or node error that names none.
var reasons = map[connect.Code]ctrlv1.FailureReason{
	connect.CodeInvalidArgument:    ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST,
	connect.CodeOutOfRange:         ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST,
	connect.CodeNotFound:           ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND,
	connect.CodeAlreadyExists:      ctrlv1.FailureReason_FAILURE_REASON_CONFLICT,
	connect.CodeFailedPrecondition: ctrlv1.FailureReason_FAILURE_REASON_CONFLICT,
	connect.CodePermissionDenied:   ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED,
	connect.CodeResourceExhausted:  ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED,
	connect.CodeDeadlineExceeded:   ctrlv1.FailureReason_FAILURE_REASON_TIMED_OUT,
	connect.CodeCanceled:           ctrlv1.FailureReason_FAILURE_REASON_CANCELLED,
	connect.CodeUnimplemented:      ctrlv1.FailureReason_FAILURE_REASON_UNSUPPORTED,
	connect.CodeInternal:           ctrlv1.FailureReason_FAILURE_REASON_INTERNAL,
	connect.CodeUnavailable:        ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE,
	connect.CodeUnknown:            ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE,
	connect.CodeUnauthenticated:    ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE,
	connect.CodeDataLoss:           ctrlv1.FailureReason_FAILURE_REASON_INTERNAL,
	connect.CodeAborted:            ctrlv1.FailureReason_FAILURE_REASON_CONFLICT,
}

// stageOf keeps a guest's (or node's) canonical code, message and
// ErrorDetail, and names the stage. The node's own refusals of ctrl
// (unauthenticated: a stale data token) are ctrl's fault, not the caller's:
// unavailable. A failure that is not a Connect error is the channel's:
// unavailable.
func stageOf(err error, stage ctrlv1.FailureStage) error {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return failed(stage, ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, connect.CodeUnavailable, "%s", err.Error())
	}
	code := cerr.Code()
	if code == connect.CodeUnknown || code == connect.CodeUnauthenticated {
		code = connect.CodeUnavailable
	}
	detail := &ctrlv1.ErrorDetail{}
	for _, d := range cerr.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*ctrlv1.ErrorDetail); ok {
				detail = ed
			}
		}
	}
	detail.Stage = stage
	if detail.Reason == ctrlv1.FailureReason_FAILURE_REASON_UNSPECIFIED {
		detail.Reason = reasons[code]
	}
	detail.Retryable = code == connect.CodeUnavailable
	return apierr.New(code, detail, "%s", cerr.Message())
}

// relayErr is the failure of a call relayed to a guest. What the guest or
// the node answered is theirs (stageOf); an error the client made of a
// broken channel (a connection cut mid-stream reads as a protocol error)
// is a transient fault: unavailable, so that the caller resumes. The
// caller's own deadline and cancellation, and a message over the read
// limit, stay what they are.
func relayErr(err error, stage ctrlv1.FailureStage) error {
	var cerr *connect.Error
	if errors.As(err, &cerr) && !connect.IsWireError(cerr) {
		switch cerr.Code() {
		case connect.CodeCanceled, connect.CodeDeadlineExceeded, connect.CodeResourceExhausted:
		default:
			return failed(stage, ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, connect.CodeUnavailable,
				"the relay to the guest broke: %s", cerr.Message())
		}
	}
	return stageOf(err, stage)
}

// header sets one request header on every call, unary and streaming.
type header struct{ name, value string }

func (h header) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set(h.name, h.value)
		return next(ctx, req)
	}
}

func (h header) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set(h.name, h.value)
		return conn
	}
}

func (h header) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// unary calls a guest RPC whose request and response wrap the API's own
// (kibotos.guest.v1's file and process calls): it wraps req, calls, and
// unwraps the answer, naming stage on a failure.
func unary[GReq, GRes, Res any](ctx context.Context, stage ctrlv1.FailureStage, call func(context.Context, *connect.Request[GReq]) (*connect.Response[GRes], error), req *GReq, unwrap func(*GRes) *Res) (*connect.Response[Res], error) {
	res, err := call(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, relayErr(err, stage)
	}
	return connect.NewResponse(unwrap(res.Msg)), nil
}
