package api_test

// SessionService's sentences (session.proto; docs/spec-coverage/dataplane.md
// SS rows) on the dpEnv endpoint, its clock moved by the test.

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store"
)

func (e *dpEnv) clock() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return e.now }

// put stores a Workspace record in the sessions' store.
func (e *dpEnv) put(t *testing.T, w *ctrlv1.Workspace) {
	t.Helper()
	if err := e.st.Tx(context.Background(), func(tx *store.Tx) error { return tx.PutWorkspace(w) }); err != nil {
		t.Fatal(err)
	}
}

func (e *dpEnv) rotate(token, sessionID string, ttl *durationpb.Duration) (*ctrlv1.RotateDataPlaneSessionResponse, error) {
	res, err := e.sessions(token).RotateDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RotateDataPlaneSessionRequest{
		WorkspaceId: "ws-1", SessionId: sessionID, Ttl: ttl}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func (e *dpEnv) revoke(token, workspaceID, sessionID string) error {
	_, err := e.sessions(token).RevokeDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RevokeDataPlaneSessionRequest{
		WorkspaceId: workspaceID, SessionId: sessionID}))
	return err
}

// works says a token passes the credential check: StatFile then fails
// only past it, where dpEnv's Workspace service knows no ws-1.
func (e *dpEnv) works(t *testing.T, what, token string) {
	t.Helper()
	if err := e.stat(token, "ws-1"); refusedByTheGuard(err) {
		t.Errorf("%s: refused, %v", what, err)
	}
}

func (e *dpEnv) expired(t *testing.T, what, token string) {
	t.Helper()
	wantDetail(t, what, e.stat(token, "ws-1"), connect.CodeUnauthenticated,
		ctrlv1.FailureReason_FAILURE_REASON_SESSION_EXPIRED, ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE)
}

func wantTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("%s is %v, want %v", what, got, want)
	}
}

// The FailureStage table gives SessionService ISSUING_SESSION and
// ROTATING_DATA_PLANE, and AUTHORIZING_DATA_PLANE to the data-plane
// services only; IssueDataPlaneSession says "Stage ISSUING_SESSION",
// Rotate and Revoke "Stage ROTATING_DATA_PLANE". So a session call refused
// for its credential names the call's own stage, with the reason a
// data-plane call would give.
func TestSessionCallsRefuseACredentialAtTheirOwnStage(t *testing.T) {
	e := newDPEnv(t)
	e.put(t, &ctrlv1.Workspace{WorkspaceId: "ws-2", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, Generation: 1})
	s, sibling, short := e.issue(t, time.Hour), e.issue(t, time.Hour), e.issue(t, time.Minute)
	res, err := e.sessions(e.key).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: "ws-2"}))
	if err != nil {
		t.Fatal(err)
	}
	ofWs2 := res.Msg.GetSession()
	e.advance(time.Minute) // short has expired
	issuing, rotating := ctrlv1.FailureStage_FAILURE_STAGE_ISSUING_SESSION, ctrlv1.FailureStage_FAILURE_STAGE_ROTATING_DATA_PLANE
	unauth, denied := ctrlv1.FailureReason_FAILURE_REASON_UNAUTHENTICATED, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED
	issue := func(token string) error {
		_, err := e.sessions(token).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: "ws-1"}))
		return err
	}
	wantDetail(t, "Issue without a credential", issue(""), connect.CodeUnauthenticated, unauth, issuing)
	wantDetail(t, "Issue with an unknown token", issue("kbs_unknown"), connect.CodeUnauthenticated, unauth, issuing)
	wantDetail(t, "Issue with a session token", issue(s.GetToken()), connect.CodePermissionDenied, denied, issuing)
	wantDetail(t, "Issue with an expired session token", issue(short.GetToken()), connect.CodeUnauthenticated,
		ctrlv1.FailureReason_FAILURE_REASON_SESSION_EXPIRED, issuing)

	for _, call := range []struct {
		name string
		do   func(token string) error
	}{
		{"Rotate", func(token string) error { _, err := e.rotate(token, s.GetSessionId(), nil); return err }},
		{"Revoke", func(token string) error { return e.revoke(token, "ws-1", s.GetSessionId()) }},
	} {
		wantDetail(t, call.name+" without a credential", call.do(""), connect.CodeUnauthenticated, unauth, rotating)
		wantDetail(t, call.name+" with an unknown token", call.do("kbs_unknown"), connect.CodeUnauthenticated, unauth, rotating)
		wantDetail(t, call.name+" with another session's token", call.do(sibling.GetToken()), connect.CodePermissionDenied, denied, rotating)
		wantDetail(t, call.name+" with another Workspace's session", call.do(ofWs2.GetToken()), connect.CodePermissionDenied, denied, rotating)
	}
	_, err = e.rotate(short.GetToken(), short.GetSessionId(), nil)
	wantDetail(t, "Rotate with its own expired token", err, connect.CodeUnauthenticated, ctrlv1.FailureReason_FAILURE_REASON_SESSION_EXPIRED, rotating)
	e.works(t, "the session no call above could revoke", s.GetToken())
}

// IssueDataPlaneSession: "A Workspace that is not AVAILABLE is
// failed_precondition" at ISSUING_SESSION. The reason and the observed
// Workspace are those a data-plane call answers for the same Workspace
// (relay.go notAvailable): UNAVAILABLE, and the Workspace as stored, so a
// caller can tell what state it is in without another read.
func TestIssueForAWorkspaceThatIsNotAvailableIsFailedPrecondition(t *testing.T) {
	e := newDPEnv(t)
	values := ctrlv1.WorkspaceState(0).Descriptor().Values()
	for i := range values.Len() {
		state := ctrlv1.WorkspaceState(values.Get(i).Number())
		switch state {
		case ctrlv1.WorkspaceState_WORKSPACE_STATE_UNSPECIFIED, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED:
			continue // DELETED is not_found: TestAMissingWorkspaceOrSessionIsNotFoundAtTheSessionCallsStage
		}
		e.put(t, &ctrlv1.Workspace{WorkspaceId: "ws-2", State: state, Generation: 1})
		_, err := e.sessions(e.key).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: "ws-2"}))
		wantDetail(t, "Issue for a "+state.String()+" Workspace", err, connect.CodeFailedPrecondition,
			ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, ctrlv1.FailureStage_FAILURE_STAGE_ISSUING_SESSION)
		if got := apierr.DetailOf(err).GetObservedWorkspace(); got.GetWorkspaceId() != "ws-2" || got.GetState() != state {
			t.Errorf("Issue for a %v Workspace: observed %v", state, got)
		}
	}
	e.put(t, &ctrlv1.Workspace{WorkspaceId: "ws-2", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED, Generation: 1})
	_, err := e.sessions(e.key).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: "ws-2"}))
	wantDetail(t, "Issue for a DELETED Workspace", err, connect.CodeNotFound, ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, ctrlv1.FailureStage_FAILURE_STAGE_ISSUING_SESSION)
}

// "A retried IssueDataPlaneSession issues another session; an unused one
// expires by itself."
func TestARetriedIssueIssuesAnotherSessionAndAnUnusedOneExpires(t *testing.T) {
	e := newDPEnv(t)
	first, retry := e.issue(t, 2*time.Minute), e.issue(t, 2*time.Minute)
	if first.GetSessionId() == retry.GetSessionId() || first.GetToken() == retry.GetToken() {
		t.Fatalf("a retried Issue answered the same session %s", first.GetSessionId())
	}
	e.works(t, "the retry's token", retry.GetToken())
	e.works(t, "the first token, which nobody revoked", first.GetToken())
	e.advance(2 * time.Minute)
	e.expired(t, "the unused session after its ttl", first.GetToken())
}

// "ttl is how long the token is valid: 1 minute to 24 hours. Absent
// selects 15 minutes." (Issue and Rotate); "a ttl out of range
// invalid_argument", naming ttl, at VALIDATING (the FailureStage table:
// "any call, before anything is admitted").
func TestTtlIsOneMinuteToADay(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Hour)
	for _, ttl := range []time.Duration{time.Minute - time.Nanosecond, 24*time.Hour + time.Nanosecond, -time.Minute} {
		_, err := e.sessions(e.key).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: "ws-1", Ttl: durationpb.New(ttl)}))
		wantField(t, "Issue with ttl "+ttl.String(), err, "ttl")
		_, err = e.rotate(e.key, s.GetSessionId(), durationpb.New(ttl))
		wantField(t, "Rotate with ttl "+ttl.String(), err, "ttl")
	}
	for _, ttl := range []*durationpb.Duration{durationpb.New(time.Minute), durationpb.New(24 * time.Hour), nil} {
		want := ttl.AsDuration()
		if ttl == nil {
			want = 15 * time.Minute
		}
		res, err := e.sessions(e.key).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: "ws-1", Ttl: ttl}))
		if err != nil {
			t.Fatalf("Issue with ttl %v: %v", ttl, err)
		}
		got := res.Msg.GetSession()
		wantTime(t, "ttl "+want.String()+": expires_at", got.GetExpiresAt().AsTime(), got.GetIssuedAt().AsTime().Add(want))
		rot, err := e.rotate(e.key, s.GetSessionId(), ttl)
		if err != nil {
			t.Fatalf("Rotate with ttl %v: %v", ttl, err)
		}
		wantTime(t, "rotated with ttl "+want.String()+": expires_at", rot.GetSession().GetExpiresAt().AsTime(), rot.GetSession().GetIssuedAt().AsTime().Add(want))
	}
}

func wantField(t *testing.T, what string, err error, field string) {
	t.Helper()
	wantDetail(t, what, err, connect.CodeInvalidArgument, ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST, ctrlv1.FailureStage_FAILURE_STAGE_VALIDATING)
	if got := apierr.FieldOf(err); got != field {
		t.Errorf("%s: field %q, want %q", what, got, field)
	}
}

// "issued_at is when the current token was issued ... expires_at is when
// the current token stops working, on ctrl's clock."
func TestATokenWorksUntilItsExpiresAt(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Minute)
	wantTime(t, "issued_at", s.GetIssuedAt().AsTime(), e.clock())
	wantTime(t, "expires_at", s.GetExpiresAt().AsTime(), e.clock().Add(time.Minute))
	e.advance(time.Minute - time.Nanosecond)
	e.works(t, "the token a nanosecond before expires_at", s.GetToken())
	e.advance(time.Nanosecond)
	e.expired(t, "the token at expires_at", s.GetToken())
}

// RotateDataPlaneSession "gives the session a new token valid for ttl.
// The previous token keeps working for a grace of at most one minute";
// previous_token_expires_at "is when the token this call replaced stops
// working".
func TestARotatedOutTokenWorksForAMinute(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Hour)
	e.advance(10 * time.Minute)
	at := e.clock()
	rot, err := e.rotate(e.key, s.GetSessionId(), durationpb.New(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wantTime(t, "the new token's issued_at", rot.GetSession().GetIssuedAt().AsTime(), at)
	wantTime(t, "the new token's expires_at", rot.GetSession().GetExpiresAt().AsTime(), at.Add(2*time.Minute))
	wantTime(t, "previous_token_expires_at", rot.GetPreviousTokenExpiresAt().AsTime(), at.Add(time.Minute))
	e.advance(time.Minute - time.Nanosecond)
	e.works(t, "the old token at the end of its grace", s.GetToken())
	e.advance(time.Nanosecond)
	e.expired(t, "the old token at previous_token_expires_at", s.GetToken())
	e.works(t, "the new token", rot.GetSession().GetToken())
	e.advance(time.Minute)
	e.expired(t, "the new token after its ttl", rot.GetSession().GetToken())
}

// The grace is "never past its own expiry": a token with 30 s left keeps
// 30 s, not a minute.
func TestARotatedOutTokenNeverOutlivesItsOwnExpiry(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Minute)
	e.advance(30 * time.Second)
	rot, err := e.rotate(s.GetToken(), s.GetSessionId(), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantTime(t, "previous_token_expires_at", rot.GetPreviousTokenExpiresAt().AsTime(), s.GetExpiresAt().AsTime())
	e.advance(30*time.Second - time.Nanosecond)
	e.works(t, "the old token just before its own expiry", s.GetToken())
	e.advance(time.Nanosecond)
	e.expired(t, "the old token at its own expiry", s.GetToken())
}

// "older tokens stop at once" and "A retry rotates again, which is
// harmless": a second rotation (a retry) answers another token; the
// token of the first rotation is then the previous one, in its grace, and
// the session's first token, two rotations old, stops at once. ctrl no
// longer knows it, so it is an unknown credential: UNAUTHENTICATED.
func TestARetriedRotationRotatesAgainAndOlderTokensStop(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Hour)
	first, err := e.rotate(e.key, s.GetSessionId(), nil)
	if err != nil {
		t.Fatal(err)
	}
	retry, err := e.rotate(e.key, s.GetSessionId(), nil)
	if err != nil {
		t.Fatalf("a retried rotation: %v", err)
	}
	if retry.GetSession().GetToken() == first.GetSession().GetToken() || retry.GetSession().GetSessionId() != s.GetSessionId() {
		t.Errorf("the retry answered token %q of session %s; the first rotation %q", retry.GetSession().GetToken(), retry.GetSession().GetSessionId(), first.GetSession().GetToken())
	}
	e.works(t, "the retry's token", retry.GetSession().GetToken())
	e.works(t, "the first rotation's token, now in its grace", first.GetSession().GetToken())
	wantDetail(t, "the token two rotations old", e.stat(s.GetToken(), "ws-1"), connect.CodeUnauthenticated,
		ctrlv1.FailureReason_FAILURE_REASON_UNAUTHENTICATED, ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE)
}

// RotateDataPlaneSession: "An expired, revoked or ended session is
// failed_precondition" (asked with an API key: the session's own token is
// refused as a credential first), at ROTATING_DATA_PLANE with the reason
// it no longer works.
func TestRotatingAnEndedSessionIsFailedPrecondition(t *testing.T) {
	e := newDPEnv(t)
	expired, revoked, ended := e.issue(t, time.Minute), e.issue(t, time.Hour), e.issue(t, time.Hour)
	e.advance(time.Minute)
	if err := e.revoke(e.key, "ws-1", revoked.GetSessionId()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		s      *ctrlv1.DataPlaneSession
		reason ctrlv1.FailureReason
	}{
		{"an expired session", expired, ctrlv1.FailureReason_FAILURE_REASON_SESSION_EXPIRED},
		{"a revoked session", revoked, ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED},
		{"a session of an ended execution", ended, ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED},
	} {
		if c.s == ended { // a new execution of ws-1 ends every session of the first
			e.put(t, &ctrlv1.Workspace{WorkspaceId: "ws-1", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, Generation: 2})
		}
		_, err := e.rotate(e.key, c.s.GetSessionId(), nil)
		wantDetail(t, "Rotate of "+c.name, err, connect.CodeFailedPrecondition, c.reason, ctrlv1.FailureStage_FAILURE_STAGE_ROTATING_DATA_PLANE)
	}
}

// Rotate and Revoke: "a missing one not_found", a session named under
// another Workspace too (it is not that Workspace's), and nothing happens
// to it.
func TestRotateOrRevokeUnderAnotherWorkspaceIsNotFound(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Hour)
	_, err := e.sessions(e.key).RotateDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.RotateDataPlaneSessionRequest{WorkspaceId: "ws-2", SessionId: s.GetSessionId()}))
	wantDetail(t, "Rotate under ws-2", err, connect.CodeNotFound, ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, ctrlv1.FailureStage_FAILURE_STAGE_ROTATING_DATA_PLANE)
	wantDetail(t, "Revoke under ws-2", e.revoke(e.key, "ws-2", s.GetSessionId()), connect.CodeNotFound,
		ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, ctrlv1.FailureStage_FAILURE_STAGE_ROTATING_DATA_PLANE)
	e.works(t, "the session after both", s.GetToken())
}

// RevokeDataPlaneSession "ends the session at once: every token of it
// stops working"; "It is accepted with an API key or the session's own
// token", here its token rotated out, in its grace.
func TestRevokeWithItsOwnTokenEndsEveryToken(t *testing.T) {
	e := newDPEnv(t)
	s := e.issue(t, time.Hour)
	rot, err := e.rotate(s.GetToken(), s.GetSessionId(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.revoke(s.GetToken(), "ws-1", s.GetSessionId()); err != nil {
		t.Fatalf("Revoke with the session's rotated-out token: %v", err)
	}
	for name, token := range map[string]string{"rotated-out": s.GetToken(), "current": rot.GetSession().GetToken()} {
		wantDetail(t, "the "+name+" token after Revoke", e.stat(token, "ws-1"), connect.CodeUnauthenticated,
			ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED, ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE)
	}
}

// DataPlaneSession: "Its token is returned only by the call that issued
// or rotated it." No other answer of the API holds a DataPlaneSession, and
// the stored record holds no token (only its hash, which is not it).
func TestATokenIsReturnedOnlyByIssueAndRotate(t *testing.T) {
	session := (&ctrlv1.DataPlaneSession{}).ProtoReflect().Descriptor().FullName()
	var holders []string
	for _, md := range ctrlMethods(t) {
		if holds(md.Output(), session, map[protoreflect.FullName]bool{}) {
			holders = append(holders, string(md.Name()))
		}
	}
	if len(holders) != 2 || holders[0] != "IssueDataPlaneSession" || holders[1] != "RotateDataPlaneSession" {
		t.Errorf("the answers holding a DataPlaneSession are those of %v", holders)
	}
	e := newDPEnv(t)
	s := e.issue(t, time.Hour)
	if err := e.st.Tx(context.Background(), func(tx *store.Tx) error {
		stored, err := tx.GetDataPlaneSession(s.GetSessionId(), false)
		if err == nil && (stored.Session.GetToken() != "" || stored.TokenHash == s.GetToken()) {
			t.Errorf("the stored session holds its token: %v", stored.Session)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// holds says whether message m has a field of message type want, at any
// depth.
func holds(m protoreflect.MessageDescriptor, want protoreflect.FullName, seen map[protoreflect.FullName]bool) bool {
	if m.FullName() == want {
		return true
	}
	if seen[m.FullName()] {
		return false
	}
	seen[m.FullName()] = true
	for i := range m.Fields().Len() {
		if f := m.Fields().Get(i); f.Message() != nil && holds(f.Message(), want, seen) {
			return true
		}
	}
	return false
}

// "Session calls are not commands and carry no CommandMetadata": no
// request of SessionService has a command field.
func TestSessionCallsCarryNoCommandMetadata(t *testing.T) {
	command := (&ctrlv1.CommandMetadata{}).ProtoReflect().Descriptor().FullName()
	for _, md := range ctrlMethods(t) {
		if md.Parent().FullName() == ctrlv1connect.SessionServiceName && holds(md.Input(), command, map[protoreflect.FullName]bool{}) {
			t.Errorf("%s's request carries CommandMetadata", md.FullName())
		}
	}
}
