package api_test

// The data plane's credential checks and stages on the Native Workspace
// endpoint (docs/spec-coverage/dataplane.md), wired as ctrl's server wires
// it (auth.Gate with Sessions.Gate, and Sessions.Interceptor), on a
// Workspace record put in the store directly (no node: calls that pass the
// checks fail reaching the guest).

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/api"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/ctrl/dataplane"
	"github.com/kibotos/kibotos/internal/ctrl/session"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

type dpEnv struct {
	srv    *httptest.Server
	key    string
	st     *store.Store
	sess   *session.Service
	mu     sync.Mutex
	now    time.Time
	client func(token string) *http.Client
}

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func newDPEnv(t *testing.T) *dpEnv {
	t.Helper()
	b := newBackend(t)
	// The backend's own store is private: a second Backend field set on the
	// same store is what the session and process services need.
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	b.Sessions = session.New(st, "http://endpoint")
	b.Processes = dataplane.NewProcesses(st, b.Workspaces, b.Fleet, nil)
	e := &dpEnv{st: st, sess: b.Sessions, now: time.Now()}
	b.Sessions.SetClock(func() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return e.now })
	keys := &auth.Keyring{}
	e.key, _ = auth.NewToken()
	keys.Add(auth.ScopeWorkspace, e.key)
	h := auth.Gate(api.NewWorkspaceHandler(b, b.Sessions.Interceptor(keys)), b.Sessions.Gate(keys))
	e.srv = testenv.H2CServer(t, h) // HTTP/1.1 and h2c: bidi streams need HTTP/2
	e.client = func(token string) *http.Client { return &http.Client{Transport: bearerRT{token}} }
	if err := st.Tx(context.Background(), func(tx *store.Tx) error {
		return tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: "ws-1", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, Generation: 1})
	}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *dpEnv) advance(d time.Duration) { e.mu.Lock(); e.now = e.now.Add(d); e.mu.Unlock() }

func (e *dpEnv) files(token string) ctrlv1connect.FileServiceClient {
	return ctrlv1connect.NewFileServiceClient(e.client(token), e.srv.URL)
}

func (e *dpEnv) sessions(token string) ctrlv1connect.SessionServiceClient {
	return ctrlv1connect.NewSessionServiceClient(e.client(token), e.srv.URL)
}

func (e *dpEnv) issue(t *testing.T, ttl time.Duration) *ctrlv1.DataPlaneSession {
	t.Helper()
	res, err := e.sessions(e.key).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: "ws-1", Ttl: durationpb.New(ttl)}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetSession()
}

func (e *dpEnv) stat(token, workspaceID string) error {
	_, err := e.files(token).StatFile(context.Background(), connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: workspaceID, Path: "/"}))
	return err
}

func wantDetail(t *testing.T, what string, err error, code connect.Code, reason ctrlv1.FailureReason, stage ctrlv1.FailureStage) {
	t.Helper()
	d := apierr.DetailOf(err)
	if connect.CodeOf(err) != code || d.GetReason() != reason || d.GetStage() != stage {
		t.Errorf("%s: %v (reason %v, stage %v), want %v, %v at %v", what, err, d.GetReason(), d.GetStage(), code, reason, stage)
	}
}

// session.proto: "A failed check carries FAILURE_STAGE_AUTHORIZING_DATA_PLANE:
// no or unknown credential: unauthenticated, FAILURE_REASON_UNAUTHENTICATED".
func TestNoCredentialIsRefusedAtAuthorizingDataPlane(t *testing.T) {
	e := newDPEnv(t)
	wantDetail(t, "StatFile without a credential", e.stat("", "ws-1"), connect.CodeUnauthenticated,
		ctrlv1.FailureReason_FAILURE_REASON_UNAUTHENTICATED, ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE)
	wantDetail(t, "StatFile with an unknown token", e.stat("kbs_unknown", "ws-1"), connect.CodeUnauthenticated,
		ctrlv1.FailureReason_FAILURE_REASON_UNAUTHENTICATED, ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE)
}

// file.proto: "Errors (ErrorDetail stage is the call's ...)": "A missing
// Workspace is not_found".
func TestAMissingWorkspaceIsNotFoundAtTheCallsStage(t *testing.T) {
	e := newDPEnv(t)
	wantDetail(t, "StatFile of ws-none", e.stat(e.key, "ws-none"), connect.CodeNotFound,
		ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, ctrlv1.FailureStage_FAILURE_STAGE_INSPECTING_FILE)
}

// session.proto: "an expired token: unauthenticated, SESSION_EXPIRED";
// RotateDataPlaneSession: "The previous token keeps working for a grace of
// at most one minute".
func TestASessionExpiresAndARotatedOutTokenAfterItsGrace(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Hour)
	rot, err := e.sessions(e.key).RotateDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RotateDataPlaneSessionRequest{WorkspaceId: "ws-1", SessionId: s.GetSessionId(), Ttl: durationpb.New(2 * time.Minute)}))
	if err != nil {
		t.Fatal(err)
	}
	e.advance(61 * time.Second)
	wantDetail(t, "the rotated-out token after its grace", e.stat(s.GetToken(), "ws-1"), connect.CodeUnauthenticated,
		ctrlv1.FailureReason_FAILURE_REASON_SESSION_EXPIRED, ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE)
	e.advance(2 * time.Minute)
	wantDetail(t, "the current token after its ttl", e.stat(rot.Msg.GetSession().GetToken(), "ws-1"), connect.CodeUnauthenticated,
		ctrlv1.FailureReason_FAILURE_REASON_SESSION_EXPIRED, ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE)
}

// RotateDataPlaneSession: "It is accepted with an API key or with the
// session's own current token". A rotated-out token in its grace is not the
// current token: it must not mint a new one.
func TestARotatedOutTokenCannotRotate(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Hour)
	if _, err := e.sessions(e.key).RotateDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RotateDataPlaneSessionRequest{WorkspaceId: "ws-1", SessionId: s.GetSessionId()})); err != nil {
		t.Fatal(err)
	}
	res, err := e.sessions(s.GetToken()).RotateDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RotateDataPlaneSessionRequest{
		WorkspaceId: "ws-1", SessionId: s.GetSessionId(), Ttl: durationpb.New(24 * time.Hour)}))
	if err == nil {
		t.Errorf("a rotated-out token rotated its session: it got a new token valid until %v", res.Msg.GetSession().GetExpiresAt().AsTime())
	}
	wantDetail(t, "a rotated-out token rotating its session", err, connect.CodePermissionDenied,
		ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED, ctrlv1.FailureStage_FAILURE_STAGE_ROTATING_DATA_PLANE)
}

// RevokeDataPlaneSession: "Revoking an ended session succeeds. It is
// accepted with an API key or the session's own token."
func TestRevokingARevokedSessionWithItsOwnTokenSucceeds(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Hour)
	for i := range 2 {
		if _, err := e.sessions(s.GetToken()).RevokeDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RevokeDataPlaneSessionRequest{WorkspaceId: "ws-1", SessionId: s.GetSessionId()})); err != nil {
			t.Errorf("revoke %d with the session's own token: %v", i+1, err)
		}
	}
}

// session.proto: "A session is bound to one execution: ... a start of a new
// execution ends it" (SESSION_REVOKED).
func TestANewExecutionEndsTheSession(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Hour)
	if err := e.st.Tx(context.Background(), func(tx *store.Tx) error {
		return tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: "ws-1", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, Generation: 2})
	}); err != nil {
		t.Fatal(err)
	}
	wantDetail(t, "a session of generation 1 at generation 2", e.stat(s.GetToken(), "ws-1"), connect.CodeUnauthenticated,
		ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED, ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE)
}

// "Stage FAILURE_STAGE_ISSUING_SESSION" (IssueDataPlaneSession) and
// "FAILURE_STAGE_ROTATING_DATA_PLANE" (Rotate and Revoke): a missing
// Workspace or session is not_found at that stage.
func TestAMissingWorkspaceOrSessionIsNotFoundAtTheSessionCallsStage(t *testing.T) {
	e := newDPEnv(t)
	_, err := e.sessions(e.key).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: "ws-none"}))
	wantDetail(t, "Issue for a missing Workspace", err, connect.CodeNotFound, ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, ctrlv1.FailureStage_FAILURE_STAGE_ISSUING_SESSION)
	_, err = e.sessions(e.key).RotateDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RotateDataPlaneSessionRequest{WorkspaceId: "ws-1", SessionId: "dps-none"}))
	wantDetail(t, "Rotate of a missing session", err, connect.CodeNotFound, ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, ctrlv1.FailureStage_FAILURE_STAGE_ROTATING_DATA_PLANE)
	_, err = e.sessions(e.key).RevokeDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RevokeDataPlaneSessionRequest{WorkspaceId: "ws-1", SessionId: "dps-none"}))
	wantDetail(t, "Revoke of a missing session", err, connect.CodeNotFound, ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, ctrlv1.FailureStage_FAILURE_STAGE_ROTATING_DATA_PLANE)
}
