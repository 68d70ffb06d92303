// Package session is SessionService: data-plane sessions, short-lived
// credentials for one Workspace's data plane (processes, files, desktop,
// services, metrics), and the check every data-plane call goes through.
//
// A session is bound to one execution, the Workspace's generation when it
// was issued: it works while that execution runs (the Workspace is
// AVAILABLE at that generation) and never again after a stop, a delete or
// a new start. ctrl keeps only SHA-256 hashes of tokens.
//
// Open streams end when their session is revoked through this ctrl,
// failing unauthenticated with SESSION_REVOKED as a new call would. With
// several ctrl replicas on one database, a revocation made on another
// replica stops new calls at once but leaves streams already open on this
// one running until they end (noted in docs/).
package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/store"
)

// Bounds of a token's life.
const (
	MinTTL     = time.Minute
	MaxTTL     = 24 * time.Hour
	DefaultTTL = 15 * time.Minute
	// RotationGrace is how long a rotated-out token keeps working, never
	// past its own expiry.
	RotationGrace = time.Minute
)

// Service serves SessionService and checks data-plane credentials.
type Service struct {
	store *store.Store
	now   func() time.Time

	endpoint string // the Native Workspace endpoint's URL

	mu   sync.Mutex
	open map[string]map[*openCall]struct{} // session id → streams in progress
}

type openCall struct{ cancel context.CancelCauseFunc }

// errRevoked is the cause a revocation cancels its session's streams with.
var errRevoked = errors.New("the data-plane session was revoked")

// New makes the service; endpoint is the Native Workspace endpoint's URL,
// where its sessions are used.
func New(s *store.Store, endpoint string) *Service {
	return &Service{store: s, now: time.Now, endpoint: endpoint, open: map[string]map[*openCall]struct{}{}}
}

func (s *Service) endpointURL() string { return s.endpoint }

// SetClock replaces the clock, for tests of expiry.
func (s *Service) SetClock(now func() time.Time) { s.now = now }

var allScopes = []ctrlv1.DataPlaneScope{
	ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_PROCESS,
	ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_FILE,
	ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_DESKTOP,
	ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_SERVICE,
	ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_METRICS,
}

func issuing(code connect.Code, reason ctrlv1.FailureReason, format string, args ...any) error {
	return apierr.New(code, &ctrlv1.ErrorDetail{Stage: ctrlv1.FailureStage_FAILURE_STAGE_ISSUING_SESSION, Reason: reason}, format, args...)
}

func rotating(code connect.Code, reason ctrlv1.FailureReason, format string, args ...any) error {
	return apierr.New(code, &ctrlv1.ErrorDetail{Stage: ctrlv1.FailureStage_FAILURE_STAGE_ROTATING_DATA_PLANE, Reason: reason}, format, args...)
}

func ttlOf(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return DefaultTTL, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, apierr.Invalid("ttl", "%v", err)
	}
	ttl := d.AsDuration()
	if ttl < MinTTL || ttl > MaxTTL {
		return 0, apierr.Invalid("ttl", "must be between %s and %s, not %s", MinTTL, MaxTTL, ttl)
	}
	return ttl, nil
}

func scopesOf(in []ctrlv1.DataPlaneScope) ([]ctrlv1.DataPlaneScope, error) {
	if len(in) == 0 {
		return slices.Clone(allScopes), nil
	}
	for i, sc := range in {
		if !slices.Contains(allScopes, sc) {
			return nil, apierr.Invalid("scopes", "scopes[%d] is %v, not a data-plane scope", i, sc)
		}
		if slices.Contains(in[:i], sc) {
			return nil, apierr.Invalid("scopes", "scopes[%d] repeats %v", i, sc)
		}
	}
	return slices.Clone(in), nil
}

func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "kbs_" + hex.EncodeToString(b), nil
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "dps-" + hex.EncodeToString(b)
}

// Issue makes a session for a running Workspace. Only an API key may
// issue one.
func (s *Service) Issue(ctx context.Context, req *ctrlv1.IssueDataPlaneSessionRequest) (*ctrlv1.IssueDataPlaneSessionResponse, error) {
	if _, ok := CallerSession(ctx); ok {
		return nil, issuing(connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED, "a data-plane session cannot issue sessions: use an API key")
	}
	if req.GetWorkspaceId() == "" {
		return nil, apierr.Invalid("workspace_id", "must name a Workspace")
	}
	ttl, err := ttlOf(req.GetTtl())
	if err != nil {
		return nil, err
	}
	scopes, err := scopesOf(req.GetScopes())
	if err != nil {
		return nil, err
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	var out *ctrlv1.DataPlaneSession
	err = s.store.Tx(ctx, func(tx *store.Tx) error {
		w, err := tx.GetWorkspace(req.GetWorkspaceId(), false)
		if errors.Is(err, store.ErrNotFound) || w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED {
			return apierr.AtStage(apierr.NotFound("workspace", req.GetWorkspaceId()), ctrlv1.FailureStage_FAILURE_STAGE_ISSUING_SESSION)
		}
		if err != nil {
			return err
		}
		if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
			// As a data-plane call answers for the same Workspace: the
			// reason, and the Workspace as stored.
			return apierr.New(connect.CodeFailedPrecondition, &ctrlv1.ErrorDetail{
				Stage: ctrlv1.FailureStage_FAILURE_STAGE_ISSUING_SESSION, Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, ObservedWorkspace: w,
			}, "Workspace %s is %v: sessions are issued for a running Workspace (start it first)", w.GetWorkspaceId(), w.GetState())
		}
		out = &ctrlv1.DataPlaneSession{
			SessionId: newID(), WorkspaceId: w.GetWorkspaceId(), Generation: w.GetGeneration(), Scopes: scopes,
			IssuedAt: timestamppb.New(now), ExpiresAt: timestamppb.New(now.Add(ttl)), Endpoint: s.endpointURL(),
		}
		return tx.PutDataPlaneSession(&store.DataPlaneSession{Session: out, TokenHash: auth.HashToken(token)})
	})
	if err != nil {
		return nil, err
	}
	out.Token = token
	return &ctrlv1.IssueDataPlaneSessionResponse{Session: out}, nil
}

// Rotate gives a session a new token; the old one works for a grace.
func (s *Service) Rotate(ctx context.Context, req *ctrlv1.RotateDataPlaneSessionRequest) (*ctrlv1.RotateDataPlaneSessionResponse, error) {
	ttl, err := ttlOf(req.GetTtl())
	if err != nil {
		return nil, err
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	var out *ctrlv1.DataPlaneSession
	var prevExpiry time.Time
	err = s.store.Tx(ctx, func(tx *store.Tx) error {
		sess, err := s.ownSession(ctx, tx, req.GetWorkspaceId(), req.GetSessionId(), rotating)
		if err != nil {
			return err
		}
		if !callerCurrent(ctx) {
			// "accepted with an API key or with the session's own current
			// token": one rotated out, in its grace, would otherwise get a
			// fresh token and cut the current one to a grace.
			return rotating(connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED,
				"this token of session %s was rotated out: only its current token rotates it", sess.Session.GetSessionId())
		}
		if reason, msg := s.ended(tx, sess, now); reason != ctrlv1.FailureReason_FAILURE_REASON_UNSPECIFIED {
			return rotating(connect.CodeFailedPrecondition, reason, "session %s cannot be rotated: %s", sess.Session.GetSessionId(), msg)
		}
		prevExpiry = now.Add(RotationGrace)
		if exp := sess.Session.GetExpiresAt().AsTime(); exp.Before(prevExpiry) {
			prevExpiry = exp
		}
		sess.PreviousTokenHash, sess.PreviousExpiresAt, sess.TokenHash = sess.TokenHash, prevExpiry, auth.HashToken(token)
		sess.Session.IssuedAt, sess.Session.ExpiresAt = timestamppb.New(now), timestamppb.New(now.Add(ttl))
		out = sess.Session
		return tx.PutDataPlaneSession(sess)
	})
	if err != nil {
		return nil, err
	}
	out.Token = token
	return &ctrlv1.RotateDataPlaneSessionResponse{Session: out, PreviousTokenExpiresAt: timestamppb.New(prevExpiry)}, nil
}

// Revoke ends a session and its open streams; an ended one succeeds.
func (s *Service) Revoke(ctx context.Context, req *ctrlv1.RevokeDataPlaneSessionRequest) (*ctrlv1.RevokeDataPlaneSessionResponse, error) {
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		sess, err := s.ownSession(ctx, tx, req.GetWorkspaceId(), req.GetSessionId(), rotating)
		if err != nil || sess.Revoked {
			return err
		}
		sess.Revoked = true
		return tx.PutDataPlaneSession(sess)
	})
	if err != nil {
		return nil, err
	}
	s.endStreams(req.GetSessionId())
	return &ctrlv1.RevokeDataPlaneSessionResponse{}, nil
}

// ownSession reads the session a Rotate or Revoke names: not_found when it
// does not exist in that Workspace, permission_denied when the caller holds
// another session's token.
func (s *Service) ownSession(ctx context.Context, tx *store.Tx, workspaceID, sessionID string, fail func(connect.Code, ctrlv1.FailureReason, string, ...any) error) (*store.DataPlaneSession, error) {
	if workspaceID == "" {
		return nil, apierr.Invalid("workspace_id", "must name a Workspace")
	}
	if sessionID == "" {
		return nil, apierr.Invalid("session_id", "must name a session")
	}
	sess, err := tx.GetDataPlaneSession(sessionID, true)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sess.Session.GetWorkspaceId() != workspaceID) {
		return nil, apierr.AtStage(apierr.NotFound("data-plane session", sessionID), ctrlv1.FailureStage_FAILURE_STAGE_ROTATING_DATA_PLANE)
	}
	if err != nil {
		return nil, err
	}
	if caller, ok := CallerSession(ctx); ok && caller != sessionID {
		return nil, fail(connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED, "a session's token may rotate or revoke only that session")
	}
	return sess, nil
}

// ended says why a session no longer works at now (UNSPECIFIED: it works).
func (s *Service) ended(tx *store.Tx, sess *store.DataPlaneSession, now time.Time) (ctrlv1.FailureReason, string) {
	if sess.Revoked {
		return ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED, "it was revoked"
	}
	w, err := tx.GetWorkspace(sess.Session.GetWorkspaceId(), false)
	if err != nil || w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || w.GetGeneration() != sess.Session.GetGeneration() {
		return ctrlv1.FailureReason_FAILURE_REASON_SESSION_REVOKED, "the execution it was bound to has ended"
	}
	if !now.Before(sess.Session.GetExpiresAt().AsTime()) {
		return ctrlv1.FailureReason_FAILURE_REASON_SESSION_EXPIRED, "it expired"
	}
	return ctrlv1.FailureReason_FAILURE_REASON_UNSPECIFIED, ""
}

// track registers an open stream of a session; the returned func forgets
// it.
func (s *Service) track(sessionID string, cancel context.CancelCauseFunc) func() {
	c := &openCall{cancel: cancel}
	s.mu.Lock()
	if s.open[sessionID] == nil {
		s.open[sessionID] = map[*openCall]struct{}{}
	}
	s.open[sessionID][c] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.open[sessionID], c)
		if len(s.open[sessionID]) == 0 {
			delete(s.open, sessionID)
		}
		s.mu.Unlock()
	}
}

func (s *Service) endStreams(sessionID string) {
	s.mu.Lock()
	calls := s.open[sessionID]
	delete(s.open, sessionID)
	s.mu.Unlock()
	for c := range calls {
		c.cancel(errRevoked)
	}
}
