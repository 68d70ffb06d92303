package sim_test

import (
	"net/http"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/testenv"
)

// sessionCalls are the SessionService and FileService of c's Workspace
// endpoint, with the API key and with a token.
type sessionCalls struct {
	c        *testenv.Cluster
	sessions ctrlv1connect.SessionServiceClient
}

func newSessionCalls(c *testenv.Cluster) sessionCalls {
	return sessionCalls{c: c, sessions: ctrlv1connect.NewSessionServiceClient(http.DefaultClient, c.Ctrl.Client.WorkspaceEndpoint,
		connect.WithInterceptors(auth.Bearer(c.Ctrl.Client.Token)))}
}

func (s sessionCalls) issue(t *testing.T, id string) *ctrlv1.DataPlaneSession {
	t.Helper()
	res, err := s.sessions.IssueDataPlaneSession(ctx, connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: id}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetSession()
}

// stat is StatFile of / with token's session. A session that works gets
// past the check: simulated nodes serve no data endpoint, so the call is
// then unavailable at INSPECTING_FILE.
func (s sessionCalls) stat(token, id string) error {
	files := ctrlv1connect.NewFileServiceClient(http.DefaultClient, s.c.Ctrl.Client.WorkspaceEndpoint, connect.WithInterceptors(auth.Bearer(token)))
	_, err := files.StatFile(ctx, connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: id, Path: "/"}))
	return err
}

func (s sessionCalls) wantWorks(t *testing.T, what, token, id string) {
	t.Helper()
	if err := s.stat(token, id); apierr.DetailOf(err).GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_INSPECTING_FILE {
		t.Errorf("%s: %v, want past the credential check", what, err)
	}
}

func (s sessionCalls) wantEnded(t *testing.T, what, token, id string) {
	t.Helper()
	err := s.stat(token, id)
	if d := apierr.DetailOf(err); connect.CodeOf(err) != connect.CodeUnauthenticated || d.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED ||
		d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE {
		t.Errorf("%s: %v (%v), want unauthenticated, SESSION_REVOKED at AUTHORIZING_DATA_PLANE", what, err, d)
	}
}

// session.proto: IssueDataPlaneSession "issues a session for the
// Workspace's current execution"; "generation is the Workspace.generation
// of the execution it is bound to"; "A session is bound to one execution
// (Workspace.generation): a stop, a delete or a start of a new execution
// ends it" (SESSION_REVOKED); "A Workspace that is not AVAILABLE is
// failed_precondition"; Rotate: "An ... ended session is
// failed_precondition"; Revoke: "Revoking an ended session succeeds."
// On a Workspace a simulated node runs, through its real lifecycle.
func TestASessionIsBoundToItsExecution(t *testing.T) {
	c, _ := oneNode(t, nil)
	s := newSessionCalls(c)
	id := createWithoutVolume(t, c, "create")
	w := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	first := s.issue(t, id)
	if first.GetGeneration() != w.GetGeneration() || first.GetWorkspaceId() != id {
		t.Errorf("issued for %s generation %d; the Workspace %s is at %d", first.GetWorkspaceId(), first.GetGeneration(), id, w.GetGeneration())
	}
	s.wantWorks(t, "the first execution's session", first.GetToken(), id)

	if _, err := c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: "stop"}, WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	s.wantEnded(t, "the session after a stop", first.GetToken(), id)
	_, err := s.sessions.IssueDataPlaneSession(ctx, connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: id}))
	if d := apierr.DetailOf(err); connect.CodeOf(err) != connect.CodeFailedPrecondition || d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_ISSUING_SESSION ||
		d.GetObservedWorkspace().GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED {
		t.Errorf("Issue for a STOPPED Workspace: %v (%v), want failed_precondition at ISSUING_SESSION observing it STOPPED", err, d)
	}

	if _, err := c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: "start"}, WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	w = waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	s.wantEnded(t, "the first execution's session in the second", first.GetToken(), id)
	second := s.issue(t, id)
	if second.GetGeneration() != w.GetGeneration() || second.GetGeneration() == first.GetGeneration() {
		t.Errorf("issued at generation %d after a start; the Workspace is at %d, the first session was at %d", second.GetGeneration(), w.GetGeneration(), first.GetGeneration())
	}
	s.wantWorks(t, "the second execution's session", second.GetToken(), id)

	if _, err := c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: "delete"}, WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED)
	s.wantEnded(t, "the session after a delete", second.GetToken(), id)
	_, err = s.sessions.RotateDataPlaneSession(ctx, connect.NewRequest(&ctrlv1.RotateDataPlaneSessionRequest{WorkspaceId: id, SessionId: second.GetSessionId()}))
	if d := apierr.DetailOf(err); connect.CodeOf(err) != connect.CodeFailedPrecondition || d.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED ||
		d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_ROTATING_DATA_PLANE {
		t.Errorf("Rotate of the deleted Workspace's session: %v (%v), want failed_precondition SESSION_REVOKED at ROTATING_DATA_PLANE", err, d)
	}
	if _, err := s.sessions.RevokeDataPlaneSession(ctx, connect.NewRequest(&ctrlv1.RevokeDataPlaneSessionRequest{WorkspaceId: id, SessionId: second.GetSessionId()})); err != nil {
		t.Errorf("Revoke of the deleted Workspace's session: %v", err)
	}
}
