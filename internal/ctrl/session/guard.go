package session

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/store"
)

// scopeOf is the data-plane scope a procedure needs, for the procedures a
// session token may call. ok is false for every other procedure: those
// need an API key.
func scopeOf(procedure string) (scope ctrlv1.DataPlaneScope, ok bool) {
	switch {
	case strings.HasPrefix(procedure, "/"+ctrlv1connect.ProcessServiceName+"/"):
		return ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_PROCESS, true
	case strings.HasPrefix(procedure, "/"+ctrlv1connect.FileServiceName+"/"):
		return ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_FILE, true
	case strings.HasPrefix(procedure, "/"+ctrlv1connect.DesktopServiceName+"/"):
		return ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_DESKTOP, true
	case strings.HasPrefix(procedure, "/"+ctrlv1connect.MetricsServiceName+"/"):
		return ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_METRICS, true
	case procedure == ctrlv1connect.ExposureServiceConnectServiceProcedure:
		return ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_SERVICE, true
	case procedure == ctrlv1connect.SessionServiceRotateDataPlaneSessionProcedure,
		procedure == ctrlv1connect.SessionServiceRevokeDataPlaneSessionProcedure,
		procedure == ctrlv1connect.SessionServiceIssueDataPlaneSessionProcedure:
		// A session's own token may keep it alive or end it; Issue answers
		// a session permission_denied itself.
		return ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_UNSPECIFIED, true
	}
	return 0, false
}

// stageOf is the stage a refused credential carries on procedure: a
// SessionService call's own (the FailureStage table gives it
// ISSUING_SESSION and ROTATING_DATA_PLANE, and AUTHORIZING_DATA_PLANE to
// the data-plane services only), AUTHORIZING_DATA_PLANE on the data plane.
func stageOf(procedure string) ctrlv1.FailureStage {
	switch procedure {
	case ctrlv1connect.SessionServiceIssueDataPlaneSessionProcedure:
		return ctrlv1.FailureStage_FAILURE_STAGE_ISSUING_SESSION
	case ctrlv1connect.SessionServiceRotateDataPlaneSessionProcedure, ctrlv1connect.SessionServiceRevokeDataPlaneSessionProcedure:
		return ctrlv1.FailureStage_FAILURE_STAGE_ROTATING_DATA_PLANE
	}
	return ctrlv1.FailureStage_FAILURE_STAGE_AUTHORIZING_DATA_PLANE
}

type callerKey struct{}

// caller is the session a call was authorised with, and whether with its
// current token (not one rotated out, in its grace).
type caller struct {
	session string
	current bool
}

// withCaller is ctx of a call authorised with sess's token hash.
func withCaller(ctx context.Context, sess *store.DataPlaneSession, hash string) context.Context {
	return context.WithValue(ctx, callerKey{}, caller{session: sess.Session.GetSessionId(), current: hash == sess.TokenHash})
}

// CallerSession is the session id a call was authorised with, or false
// for a call made with an API key.
func CallerSession(ctx context.Context) (string, bool) {
	c, ok := ctx.Value(callerKey{}).(caller)
	return c.session, ok
}

// callerCurrent says whether a call authorised with a session's token
// used its current one (true too for an API key).
func callerCurrent(ctx context.Context) bool {
	c, ok := ctx.Value(callerKey{}).(caller)
	return !ok || c.current
}

// Interceptor guards the Native Workspace endpoint: every call needs an
// API key of scope workspace, except data-plane calls (and Rotate/Revoke
// of a session), which also accept a data-plane session's token. A
// session's call is checked when it starts, against the Workspace its
// first request message names; a stream that started runs on after the
// token expires and ends when the session is revoked.
func (s *Service) Interceptor(keys *auth.Keyring) connect.Interceptor {
	return &guard{s: s, keys: keys, apiKey: auth.NewInterceptor(keys, auth.ScopeWorkspace)}
}

// Gate is the Native Workspace endpoint's check before a body is read
// (auth.Gate): an API key of scope workspace, or, for a procedure that
// admits sessions, the token of a data-plane session that exists. Whether
// that session still works, and for which Workspace, the interceptor
// checks once the first message is read.
func (s *Service) Gate(keys *auth.Keyring) auth.Check {
	g := &guard{s: s, keys: keys}
	apiKey := auth.HeaderCheck(keys, auth.ScopeWorkspace)
	return func(ctx context.Context, procedure string, header http.Header) error {
		token := bearer(header)
		if _, ok := g.sessionCall(procedure, token); !ok {
			err := apiKey(ctx, procedure, header)
			if _, dataPlane := scopeOf(procedure); dataPlane {
				// "A failed check carries FAILURE_STAGE_AUTHORIZING_DATA_PLANE"
				// (a session call its own stage), with no credential or an
				// API key as with a token.
				err = apierr.AtStage(err, stageOf(procedure))
			}
			return err
		}
		err := s.store.Tx(ctx, func(tx *store.Tx) error {
			_, err := tx.DataPlaneSessionByToken(auth.HashToken(token))
			return err
		})
		if errors.Is(err, store.ErrNotFound) {
			return denied(stageOf(procedure), connect.CodeUnauthenticated, ctrlv1.FailureReason_FAILURE_REASON_UNAUTHENTICATED, "unknown API key or data-plane session token")
		} else if err != nil {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("checking the session token: %w", err))
		}
		return nil
	}
}

type guard struct {
	s      *Service
	keys   *auth.Keyring
	apiKey connect.Interceptor
}

func bearer(h interface{ Get(string) string }) string {
	token, _ := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	return token
}

// sessionCall says whether a call goes the session way: a procedure that
// admits sessions and a token that is not an API key of any scope.
func (g *guard) sessionCall(procedure, token string) (ctrlv1.DataPlaneScope, bool) {
	scope, ok := scopeOf(procedure)
	if !ok || token == "" || g.keys.Has(auth.ScopeWorkspace, token) || g.keys.Has(auth.ScopeOperator, token) {
		return 0, false
	}
	return scope, true
}

func (g *guard) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	withKey := g.apiKey.WrapUnary(next)
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		token := bearer(req.Header())
		scope, ok := g.sessionCall(req.Spec().Procedure, token)
		if !ok {
			return withKey(ctx, req)
		}
		msg, _ := req.Any().(proto.Message)
		authorize := g.s.authorize
		if req.Spec().Procedure == ctrlv1connect.SessionServiceRevokeDataPlaneSessionProcedure {
			authorize = g.s.authorizeRevoke
		}
		sess, err := authorize(ctx, token, msg, scope, stageOf(req.Spec().Procedure))
		if err != nil {
			return nil, err
		}
		return next(withCaller(ctx, sess, auth.HashToken(token)), req)
	}
}

func (g *guard) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (g *guard) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	withKey := g.apiKey.WrapStreamingHandler(next)
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		token := bearer(conn.RequestHeader())
		scope, ok := g.sessionCall(conn.Spec().Procedure, token)
		if !ok {
			return withKey(ctx, conn)
		}
		// Which session, and whether it works at all, is known now; which
		// Workspace the call is for only from its first message.
		stage := stageOf(conn.Spec().Procedure)
		sess, err := g.s.authorize(ctx, token, nil, scope, stage)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancelCause(withCaller(ctx, sess, auth.HashToken(token)))
		defer cancel(nil)
		defer g.s.track(sess.Session.GetSessionId(), cancel)()
		err = next(ctx, &firstChecked{StreamingHandlerConn: conn, check: func(msg any) error {
			m, _ := msg.(proto.Message)
			_, err := g.s.authorize(ctx, token, m, scope, stage)
			return err
		}})
		if err != nil && errors.Is(context.Cause(ctx), errRevoked) {
			// The handler saw only a cancelled call: say why, as a new call
			// with the token is refused.
			return denied(stage, connect.CodeUnauthenticated, ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED,
				"data-plane session %s was revoked while this call ran", sess.Session.GetSessionId())
		}
		return err
	}
}

// firstChecked checks the first message a stream receives before the
// handler sees it.
type firstChecked struct {
	connect.StreamingHandlerConn
	check   func(any) error
	checked bool
}

func (c *firstChecked) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil || c.checked {
		return err
	}
	c.checked = true
	return c.check(msg)
}

func denied(stage ctrlv1.FailureStage, code connect.Code, reason ctrlv1.FailureReason, format string, args ...any) error {
	return apierr.New(code, &ctrlv1.ErrorDetail{Stage: stage, Reason: reason}, format, args...)
}

// authorize checks a session token for a call needing scope on the
// Workspace msg names (nil: not known yet); a refusal is at stage.
func (s *Service) authorize(ctx context.Context, token string, msg proto.Message, scope ctrlv1.DataPlaneScope, stage ctrlv1.FailureStage) (*store.DataPlaneSession, error) {
	var sess *store.DataPlaneSession
	var failure error
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		hash := auth.HashToken(token)
		var err error
		sess, err = tx.DataPlaneSessionByToken(hash)
		if errors.Is(err, store.ErrNotFound) {
			failure = denied(stage, connect.CodeUnauthenticated, ctrlv1.FailureReason_FAILURE_REASON_UNAUTHENTICATED, "unknown API key or data-plane session token")
			return nil
		}
		if err != nil {
			return err
		}
		now := s.now()
		if hash == sess.PreviousTokenHash && !now.Before(sess.PreviousExpiresAt) {
			failure = denied(stage, connect.CodeUnauthenticated, ctrlv1.FailureReason_FAILURE_REASON_SESSION_EXPIRED, "this token of session %s was rotated out and its grace has ended", sess.Session.GetSessionId())
			return nil
		}
		if reason, why := s.ended(tx, sess, now); reason != ctrlv1.FailureReason_FAILURE_REASON_UNSPECIFIED {
			failure = denied(stage, connect.CodeUnauthenticated, reason, "data-plane session %s no longer works: %s", sess.Session.GetSessionId(), why)
			return nil
		}
		failure = permitted(sess, msg, scope, stage)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sess, failure
}

// authorizeRevoke is authorize for RevokeDataPlaneSession: "Revoking an
// ended session succeeds. It is accepted with an API key or the session's
// own token", so a token of the session (its current one, or one rotated
// out) is accepted whether the session still works or not; the handler
// checks it names its own session.
func (s *Service) authorizeRevoke(ctx context.Context, token string, _ proto.Message, _ ctrlv1.DataPlaneScope, stage ctrlv1.FailureStage) (*store.DataPlaneSession, error) {
	var sess *store.DataPlaneSession
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		sess, err = tx.DataPlaneSessionByToken(auth.HashToken(token))
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, denied(stage, connect.CodeUnauthenticated, ctrlv1.FailureReason_FAILURE_REASON_UNAUTHENTICATED, "unknown API key or data-plane session token")
	}
	return sess, err
}

// permitted checks the Workspace and scope of a call against a working
// session.
func permitted(sess *store.DataPlaneSession, msg proto.Message, scope ctrlv1.DataPlaneScope, stage ctrlv1.FailureStage) error {
	if msg != nil {
		if ws := workspaceIDOf(msg); ws != sess.Session.GetWorkspaceId() {
			return denied(stage, connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED,
				"data-plane session %s is for Workspace %s, not %q", sess.Session.GetSessionId(), sess.Session.GetWorkspaceId(), ws)
		}
	}
	if scope != ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_UNSPECIFIED && !slices.Contains(sess.Session.GetScopes(), scope) {
		return denied(stage, connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED,
			"data-plane session %s does not have scope %v", sess.Session.GetSessionId(), scope)
	}
	return nil
}

// workspaceIDOf reads the workspace_id field every data-plane request
// has at its top level.
func workspaceIDOf(msg proto.Message) string {
	m := msg.ProtoReflect()
	f := m.Descriptor().Fields().ByName(protoreflect.Name("workspace_id"))
	if f == nil || f.Kind() != protoreflect.StringKind {
		return ""
	}
	return m.Get(f).String()
}
