package api

import (
	"context"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/session"
)

// sessionHandler serves SessionService.
type sessionHandler struct {
	s *session.Service
}

var _ ctrlv1connect.SessionServiceHandler = sessionHandler{}

func (h sessionHandler) IssueDataPlaneSession(ctx context.Context, req *connect.Request[ctrlv1.IssueDataPlaneSessionRequest]) (*connect.Response[ctrlv1.IssueDataPlaneSessionResponse], error) {
	return respond(h.s.Issue(ctx, req.Msg))
}

func (h sessionHandler) RotateDataPlaneSession(ctx context.Context, req *connect.Request[ctrlv1.RotateDataPlaneSessionRequest]) (*connect.Response[ctrlv1.RotateDataPlaneSessionResponse], error) {
	return respond(h.s.Rotate(ctx, req.Msg))
}

func (h sessionHandler) RevokeDataPlaneSession(ctx context.Context, req *connect.Request[ctrlv1.RevokeDataPlaneSessionRequest]) (*connect.Response[ctrlv1.RevokeDataPlaneSessionResponse], error) {
	return respond(h.s.Revoke(ctx, req.Msg))
}
