package api_test

// Which calls a data-plane session may make, and with which scope
// (session.proto: "The data plane is ProcessService, FileService,
// DesktopService, MetricsService and ExposureService.ConnectService";
// DataPlaneScope), asked of every method of kibotos.ctrl.v1 through the
// dpEnv endpoint.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
)

// h2c speaks cleartext HTTP/2, which bidi streams (ConnectService) need.
func h2c() *http.Client {
	t := &http.Transport{}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: t}
}

// ctrlMethods are the methods of every kibotos.ctrl.v1 service.
func ctrlMethods(t *testing.T) []protoreflect.MethodDescriptor {
	t.Helper()
	var out []protoreflect.MethodDescriptor
	protoregistry.GlobalFiles.RangeFilesByPackage("kibotos.ctrl.v1", func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			for j := range fd.Services().Get(i).Methods().Len() {
				out = append(out, fd.Services().Get(i).Methods().Get(j))
			}
		}
		return true
	})
	if len(out) == 0 {
		t.Fatal("no kibotos.ctrl.v1 method registered")
	}
	return out
}

// callAny calls md with token (none when empty), sending one request
// message that names workspaceID, in whatever shape the method streams,
// and returns how the call ended.
func (e *dpEnv) callAny(md protoreflect.MethodDescriptor, token, workspaceID string) error {
	req := dynamicpb.NewMessage(md.Input())
	if f := md.Input().Fields().ByName("workspace_id"); f != nil {
		req.Set(f, protoreflect.ValueOfString(workspaceID))
	}
	if f := md.Input().Fields().ByName("spec"); f != nil && f.Message() != nil && f.Message().Fields().ByName("argv") != nil {
		// A process call names a program, or ctrl's own check of argv
		// answers before the Workspace is looked up.
		req.Mutable(f).Message().Mutable(f.Message().Fields().ByName("argv")).List().Append(protoreflect.ValueOfString("true"))
	}
	url := e.srv.URL + "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
	// The answer is read as Empty: only how the call ends matters here.
	c := connect.NewClient[dynamicpb.Message, emptypb.Empty](h2c(), url, connect.WithInterceptors(auth.Bearer(token)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case md.IsStreamingClient() && md.IsStreamingServer():
		s := c.CallBidiStream(ctx)
		_ = s.Send(req) // a refusal shows in Receive
		_ = s.CloseRequest()
		for {
			if _, err := s.Receive(); err != nil {
				return ended(err)
			}
		}
	case md.IsStreamingClient():
		s := c.CallClientStream(ctx)
		_ = s.Send(req)
		_, err := s.CloseAndReceive()
		return err
	case md.IsStreamingServer():
		s, err := c.CallServerStream(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	}
	_, err := c.CallUnary(ctx, connect.NewRequest(req))
	return err
}

// ended is a bidi stream's end: nil when it ended OK.
func ended(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// dataPlaneScope is the scope the proto gives each data-plane call; false
// for every other call.
func dataPlaneScope(md protoreflect.MethodDescriptor) (ctrlv1.DataPlaneScope, bool) {
	switch md.Parent().FullName() {
	case "kibotos.ctrl.v1.ProcessService":
		return ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_PROCESS, true
	case "kibotos.ctrl.v1.FileService":
		return ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_FILE, true
	case "kibotos.ctrl.v1.DesktopService":
		return ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_DESKTOP, true
	case "kibotos.ctrl.v1.MetricsService":
		return ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_METRICS, true
	}
	if md.FullName() == "kibotos.ctrl.v1.ExposureService.ConnectService" {
		return ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_SERVICE, true
	}
	return 0, false
}

// refusedByTheGuard says whether err is a credential check's refusal.
func refusedByTheGuard(err error) bool {
	code := connect.CodeOf(err)
	return code == connect.CodeUnauthenticated || code == connect.CodePermissionDenied ||
		apierr.DetailOf(err).GetStage() == ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE
}

// issueScopes issues a session of ws-1 holding scopes.
func (e *dpEnv) issueScopes(t *testing.T, scopes []ctrlv1.DataPlaneScope) *ctrlv1.DataPlaneSession {
	t.Helper()
	res, err := e.sessions(e.key).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{
		WorkspaceId: "ws-1", Ttl: durationpb.New(time.Hour), Scopes: scopes}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetSession()
}

// SessionService: "The data plane is ProcessService, FileService,
// DesktopService, MetricsService and ExposureService.ConnectService ...
// Each data-plane call accepts ... the token of a data-plane session of
// that Workspace"; DataPlaneScope: PROCESS is ProcessService, FILE
// FileService, DESKTOP DesktopService, SERVICE ConnectService, METRICS
// MetricsService. Every method is asked: a session of every scope passes
// the check exactly on the data plane, and a session holding every scope
// but a call's own is permission_denied there.
func TestASessionReachesTheDataPlaneAndEachScopeItsOwnCalls(t *testing.T) {
	e := newDPEnv(t)
	all := e.issue(t, time.Hour)
	allBut := map[ctrlv1.DataPlaneScope]*ctrlv1.DataPlaneSession{}
	for _, sc := range []ctrlv1.DataPlaneScope{ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_PROCESS, ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_FILE,
		ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_DESKTOP, ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_SERVICE, ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_METRICS} {
		others := slices.DeleteFunc(slices.Clone(all.GetScopes()), func(o ctrlv1.DataPlaneScope) bool { return o == sc })
		allBut[sc] = e.issueScopes(t, others)
	}
	for _, md := range ctrlMethods(t) {
		if md.Parent().FullName() == ctrlv1connect.SessionServiceName {
			continue // its own rules: session_rows_test.go
		}
		name := string(md.FullName())
		err := e.callAny(md, all.GetToken(), "ws-1")
		scope, dataPlane := dataPlaneScope(md)
		if !dataPlane {
			if connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Errorf("%s with a session token: %v, want unauthenticated (it needs an API key)", name, err)
			}
			continue
		}
		if refusedByTheGuard(err) {
			t.Errorf("%s with a session of every scope: refused, %v", name, err)
		}
		wantDetail(t, name+" without scope "+scope.String(), e.callAny(md, allBut[scope].GetToken(), "ws-1"), connect.CodePermissionDenied,
			ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED, ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE)
	}
}

// callStage is each built data-plane call's stage (types.proto's
// FailureStage table; process.proto for ProcessService: StartProcess and
// ExecProcess before `started` STARTING_PROCESS, StreamProcessOutput and
// WaitProcess STREAMING_PROCESS, the rest USING_PROCESS).
var callStage = map[protoreflect.FullName]ctrlv1.FailureStage{
	"kibotos.ctrl.v1.FileService.ReadFile":               ctrlv1.FailureStage_FAILURE_STAGE_READING_FILE,
	"kibotos.ctrl.v1.FileService.WriteFile":              ctrlv1.FailureStage_FAILURE_STAGE_WRITING_FILE,
	"kibotos.ctrl.v1.FileService.StatFile":               ctrlv1.FailureStage_FAILURE_STAGE_INSPECTING_FILE,
	"kibotos.ctrl.v1.FileService.ListDirectory":          ctrlv1.FailureStage_FAILURE_STAGE_INSPECTING_FILE,
	"kibotos.ctrl.v1.FileService.MakeDirectory":          ctrlv1.FailureStage_FAILURE_STAGE_CREATING_DIRECTORY,
	"kibotos.ctrl.v1.FileService.MoveFile":               ctrlv1.FailureStage_FAILURE_STAGE_MOVING_FILE,
	"kibotos.ctrl.v1.FileService.DeleteFile":             ctrlv1.FailureStage_FAILURE_STAGE_DELETING_FILE,
	"kibotos.ctrl.v1.FileService.WatchDirectory":         ctrlv1.FailureStage_FAILURE_STAGE_WATCHING_DIRECTORY,
	"kibotos.ctrl.v1.MetricsService.GetWorkspaceMetrics": ctrlv1.FailureStage_FAILURE_STAGE_READING_METRICS,
	"kibotos.ctrl.v1.ProcessService.StartProcess":        ctrlv1.FailureStage_FAILURE_STAGE_STARTING_PROCESS,
	"kibotos.ctrl.v1.ProcessService.ExecProcess":         ctrlv1.FailureStage_FAILURE_STAGE_STARTING_PROCESS,
	"kibotos.ctrl.v1.ProcessService.StreamProcessOutput": ctrlv1.FailureStage_FAILURE_STAGE_STREAMING_PROCESS,
	"kibotos.ctrl.v1.ProcessService.WaitProcess":         ctrlv1.FailureStage_FAILURE_STAGE_STREAMING_PROCESS,
	"kibotos.ctrl.v1.ProcessService.SendProcessInput":    ctrlv1.FailureStage_FAILURE_STAGE_USING_PROCESS,
	"kibotos.ctrl.v1.ProcessService.ResizeProcessPty":    ctrlv1.FailureStage_FAILURE_STAGE_USING_PROCESS,
	"kibotos.ctrl.v1.ProcessService.SignalProcess":       ctrlv1.FailureStage_FAILURE_STAGE_USING_PROCESS,
	"kibotos.ctrl.v1.ProcessService.GetProcess":          ctrlv1.FailureStage_FAILURE_STAGE_USING_PROCESS,
	"kibotos.ctrl.v1.ProcessService.ListProcesses":       ctrlv1.FailureStage_FAILURE_STAGE_USING_PROCESS,
}

// "Every data-plane refusal names its call's stage": a credential check's
// refusal is at AUTHORIZING_DATA_PLANE (no credential, an unknown token,
// another Workspace's session), and a missing Workspace is not_found at
// the call's own stage, for every data-plane method. DesktopService and
// ConnectService are not built (unimplemented) past the check.
func TestEveryDataPlaneRefusalNamesItsCallsStage(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Hour)
	unauth, authorizing := ctrlv1.FailureReason_FAILURE_REASON_UNAUTHENTICATED, ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE
	built := 0
	for _, md := range ctrlMethods(t) {
		if _, dataPlane := dataPlaneScope(md); !dataPlane {
			continue
		}
		name := string(md.FullName())
		wantDetail(t, name+" without a credential", e.callAny(md, "", "ws-1"), connect.CodeUnauthenticated, unauth, authorizing)
		wantDetail(t, name+" with an unknown token", e.callAny(md, "kbs_unknown", "ws-1"), connect.CodeUnauthenticated, unauth, authorizing)
		stage, ok := callStage[md.FullName()]
		if !ok {
			if err := e.callAny(md, e.key, "ws-none"); connect.CodeOf(err) != connect.CodeUnimplemented {
				t.Errorf("%s answers %v: the test has no stage for it", name, err)
			}
			continue
		}
		built++
		wantDetail(t, name+" with another Workspace's session", e.callAny(md, s.GetToken(), "ws-2"), connect.CodePermissionDenied,
			ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED, authorizing)
		wantDetail(t, name+" of a missing Workspace", e.callAny(md, e.key, "ws-none"), connect.CodeNotFound,
			ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, stage)
	}
	if built != len(callStage) {
		t.Errorf("%d built data-plane methods asked, want %d", built, len(callStage))
	}
}
