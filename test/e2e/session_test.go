package e2e_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/clientconfig"
)

func (d *dev) sessions(token string) ctrlv1connect.SessionServiceClient {
	return ctrlv1connect.NewSessionServiceClient(httpClientWithToken(token), d.env[clientconfig.EnvWorkspaceEndpoint])
}

// execWith runs argv in the Workspace with token as the credential and
// returns its stdout, or the error.
func (d *dev) execWith(token, workspaceID string, argv ...string) (string, error) {
	c := ctrlv1connect.NewProcessServiceClient(httpClientWithToken(token), d.env[clientconfig.EnvWorkspaceEndpoint])
	stream, err := c.ExecProcess(context.Background(), connect.NewRequest(&ctrlv1.ExecProcessRequest{WorkspaceId: workspaceID, Spec: &ctrlv1.ProcessSpec{Argv: argv}}))
	if err != nil {
		return "", err
	}
	defer stream.Close()
	var out strings.Builder
	for stream.Receive() {
		if o := stream.Msg().GetOutput(); o != nil {
			out.Write(o.GetData())
		}
	}
	return out.String(), stream.Err()
}

// checkDenied checks a call failed with code and the data-plane
// authorisation failure reason.
func checkDenied(t *testing.T, what string, err error, code connect.Code, reason ctrlv1.FailureReason) {
	t.Helper()
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != code {
		t.Errorf("%s: %v, want %v", what, err, code)
		return
	}
	for _, d := range cerr.Details() {
		if m, err := d.Value(); err == nil {
			if detail, ok := m.(*ctrlv1.ErrorDetail); ok {
				if detail.GetReason() != reason || detail.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE && detail.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_ROTATING_DATA_PLANE {
					t.Errorf("%s: detail %v, want reason %v", what, detail, reason)
				}
				return
			}
		}
	}
	t.Errorf("%s: %v carries no ErrorDetail", what, err)
}

// checkDataPlaneSessions issues, uses, rotates and revokes data-plane
// sessions of a running Workspace, and returns a session token of its
// current execution for the caller to check after a stop.
func checkDataPlaneSessions(t *testing.T, d *dev, id string) string {
	apiKey := d.env[clientconfig.EnvToken]
	issued, err := d.sessions(apiKey).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: id}))
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	s := issued.Msg.GetSession()
	if s.GetToken() == "" || len(s.GetScopes()) != 5 || s.GetGeneration() == 0 || s.GetEndpoint() != d.env[clientconfig.EnvWorkspaceEndpoint] ||
		s.GetExpiresAt().AsTime().Sub(s.GetIssuedAt().AsTime()) != 15*time.Minute {
		t.Errorf("issued session %v", s)
	}
	if out, err := d.execWith(s.GetToken(), id, "echo", "with a session"); err != nil || !strings.Contains(out, "with a session") {
		t.Errorf("exec with the session token: %q, %v", out, err)
	}
	// The session is for this Workspace and its own scopes only, and cannot
	// be used on the rest of the API.
	_, err = d.execWith(s.GetToken(), "ws-another", "true")
	checkDenied(t, "another Workspace", err, connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED)
	_, err = ctrlv1connect.NewWorkspaceServiceClient(httpClientWithToken(s.GetToken()), d.env[clientconfig.EnvWorkspaceEndpoint]).
		GetWorkspace(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("GetWorkspace with a session token: %v", err)
	}
	_, err = d.sessions(s.GetToken()).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: id}))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a session issuing a session: %v, want permission_denied", err)
	}
	files, err := d.sessions(apiKey).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{
		WorkspaceId: id, Scopes: []ctrlv1.DataPlaneScope{ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_FILE}, Ttl: durationpb.New(time.Hour)}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.execWith(files.Msg.GetSession().GetToken(), id, "true")
	checkDenied(t, "a FILE-only session running a process", err, connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED)

	// Bad input changes nothing.
	for _, req := range []*ctrlv1.IssueDataPlaneSessionRequest{
		{WorkspaceId: id, Ttl: durationpb.New(30 * time.Second)},
		{WorkspaceId: id, Ttl: durationpb.New(25 * time.Hour)},
		{WorkspaceId: id, Scopes: []ctrlv1.DataPlaneScope{ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_UNSPECIFIED}},
		{WorkspaceId: id, Scopes: []ctrlv1.DataPlaneScope{ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_FILE, ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_FILE}},
	} {
		if _, err := d.sessions(apiKey).IssueDataPlaneSession(context.Background(), connect.NewRequest(req)); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("issue %v: %v, want invalid_argument", req, err)
		}
	}
	if _, err := d.sessions(apiKey).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: "ws-none"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("issue for a missing Workspace: %v", err)
	}

	// Rotation: the session's own token may rotate it; the old token keeps
	// working for the grace.
	rotated, err := d.sessions(s.GetToken()).RotateDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RotateDataPlaneSessionRequest{WorkspaceId: id, SessionId: s.GetSessionId()}))
	if err != nil {
		t.Fatalf("rotate: %v", err)
	}
	if grace := rotated.Msg.GetPreviousTokenExpiresAt().AsTime().Sub(rotated.Msg.GetSession().GetIssuedAt().AsTime()); grace > time.Minute || grace <= 0 {
		t.Errorf("previous token works for %s after rotation", grace)
	}
	for name, token := range map[string]string{"old": s.GetToken(), "new": rotated.Msg.GetSession().GetToken()} {
		if _, err := d.execWith(token, id, "true"); err != nil {
			t.Errorf("exec with the %s token after rotation: %v", name, err)
		}
	}
	_, err = d.sessions(files.Msg.GetSession().GetToken()).RevokeDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RevokeDataPlaneSessionRequest{WorkspaceId: id, SessionId: s.GetSessionId()}))
	checkDenied(t, "revoking another session with a session token", err, connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED)

	// Revocation ends every token of the session at once; revoking again
	// succeeds.
	for range 2 {
		if _, err := d.sessions(apiKey).RevokeDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RevokeDataPlaneSessionRequest{WorkspaceId: id, SessionId: s.GetSessionId()})); err != nil {
			t.Fatalf("revoke: %v", err)
		}
	}
	for _, token := range []string{s.GetToken(), rotated.Msg.GetSession().GetToken()} {
		_, err = d.execWith(token, id, "true")
		checkDenied(t, "a revoked session", err, connect.CodeUnauthenticated, ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED)
	}
	checkRevocationEndsStreams(t, d, id)
	_, err = d.execWith("kbs_unknown", id, "true")
	checkDenied(t, "an unknown token", err, connect.CodeUnauthenticated, ctrlv1.FailureReason_FAILURE_REASON_UNAUTHENTICATED)
	return files.Msg.GetSession().GetToken()
}

// checkSessionEndedWithExecution checks a session of an execution that
// has ended no longer works.
func checkSessionEndedWithExecution(t *testing.T, d *dev, id, token string) {
	c := ctrlv1connect.NewFileServiceClient(httpClientWithToken(token), d.env[clientconfig.EnvWorkspaceEndpoint])
	_, err := c.StatFile(context.Background(), connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: id, Path: "/"}))
	checkDenied(t, "a session whose execution ended", err, connect.CodeUnauthenticated, ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED)
}

// checkRevocationEndsStreams revokes a session while a stream it opened
// runs: the stream ends.
func checkRevocationEndsStreams(t *testing.T, d *dev, id string) {
	apiKey := d.env[clientconfig.EnvToken]
	issued, err := d.sessions(apiKey).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: id}))
	if err != nil {
		t.Fatal(err)
	}
	s := issued.Msg.GetSession()
	c := ctrlv1connect.NewProcessServiceClient(httpClientWithToken(s.GetToken()), d.env[clientconfig.EnvWorkspaceEndpoint])
	stream, err := c.ExecProcess(context.Background(), connect.NewRequest(&ctrlv1.ExecProcessRequest{WorkspaceId: id, Spec: &ctrlv1.ProcessSpec{Argv: []string{"sleep", "600"}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStarted() == nil {
		t.Fatalf("the stream did not start: %v", stream.Err())
	}
	if _, err := d.sessions(apiKey).RevokeDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RevokeDataPlaneSessionRequest{WorkspaceId: id, SessionId: s.GetSessionId()})); err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
		if stream.Msg().GetExit() != nil {
			t.Fatal("sleep 600 exited on its own")
		}
	}
	if stream.Err() == nil {
		t.Error("the stream of a revoked session ended without an error")
	}
}

// sessionStream is an ExecProcess of `sleep 600` opened with a data-plane
// session's token, read to its end in the background.
type sessionStream struct {
	exit chan *ctrlv1.ProcessExitStatus // the exit event, if one came
	end  chan error                     // the stream's end
}

// openSessionStream issues a PROCESS session for the running Workspace id
// and opens the stream with it.
func openSessionStream(t *testing.T, d *dev, id string) *sessionStream {
	t.Helper()
	issued, err := d.sessions(d.env[clientconfig.EnvToken]).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{
		WorkspaceId: id, Scopes: []ctrlv1.DataPlaneScope{ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_PROCESS}}))
	if err != nil {
		t.Fatal(err)
	}
	c := ctrlv1connect.NewProcessServiceClient(httpClientWithToken(issued.Msg.GetSession().GetToken()), d.env[clientconfig.EnvWorkspaceEndpoint])
	stream, err := c.ExecProcess(context.Background(), connect.NewRequest(&ctrlv1.ExecProcessRequest{WorkspaceId: id, Spec: &ctrlv1.ProcessSpec{Argv: []string{"sleep", "600"}}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stream.Close() })
	if !stream.Receive() || stream.Msg().GetStarted() == nil {
		t.Fatalf("the session's stream did not start: %v", stream.Err())
	}
	s := &sessionStream{exit: make(chan *ctrlv1.ProcessExitStatus, 1), end: make(chan error, 1)}
	go func() {
		for stream.Receive() {
			if e := stream.Msg().GetExit(); e != nil {
				s.exit <- e
			}
		}
		s.end <- stream.Err()
	}()
	return s
}

// checkEndedByAGracefulStop: the graceful stop's SIGTERM ends the process
// as SIGNALED with signal 15 (PS67), which the stream reports before it
// ends as any process's stream does.
func (s *sessionStream) checkEndedByAGracefulStop(t *testing.T) {
	t.Helper()
	select {
	case err := <-s.end:
		if err != nil {
			t.Errorf("the stream of a process the graceful stop ended: %v, want its exit and a clean end", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the stream of a process the graceful stop ended did not end")
	}
	select {
	case e := <-s.exit:
		if e.GetCause() != ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_SIGNALED || e.GetSignal() != 15 {
			t.Errorf("sleep ended by the graceful stop: %v, want SIGNALED by 15", e)
		}
	default:
		t.Error("the stream ended without the process's exit")
	}
}

// checkEndedWithItsExecution: a session's stream runs until its execution
// ends (SS6); a forced stop gives the process no exit, and the stream
// fails failed_precondition at STREAMING_PROCESS, as one opened with an
// API key does.
func (s *sessionStream) checkEndedWithItsExecution(t *testing.T) {
	t.Helper()
	select {
	case err := <-s.end:
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || stageOf(err) != ctrlv1.FailureStage_FAILURE_STAGE_STREAMING_PROCESS {
			t.Errorf("a session's stream open when its execution ended: %v (stage %v)", err, stageOf(err))
		}
	case <-time.After(time.Minute):
		t.Fatal("a session's stream open when its execution ended did not end")
	}
	select {
	case e := <-s.exit:
		t.Errorf("a forced stop gave the session's process an exit: %v", e)
	default:
	}
}
