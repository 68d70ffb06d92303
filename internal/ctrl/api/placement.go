package api

import (
	"context"

	"connectrpc.com/connect"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
)

func (h nodeRegistrationHandler) GetOvercommitDefaults(ctx context.Context, req *connect.Request[operatorv1.GetOvercommitDefaultsRequest]) (*connect.Response[operatorv1.GetOvercommitDefaultsResponse], error) {
	return respond(h.f.GetOvercommitDefaults(ctx, req.Msg))
}

func (h nodeRegistrationHandler) SetOvercommitDefaults(ctx context.Context, req *connect.Request[operatorv1.SetOvercommitDefaultsRequest]) (*connect.Response[operatorv1.SetOvercommitDefaultsResponse], error) {
	return respond(h.f.SetOvercommitDefaults(ctx, req.Msg))
}

func (h nodeRegistrationHandler) SetNodeOvercommit(ctx context.Context, req *connect.Request[operatorv1.SetNodeOvercommitRequest]) (*connect.Response[operatorv1.SetNodeOvercommitResponse], error) {
	return respond(h.f.SetNodeOvercommit(ctx, req.Msg))
}

func (h nodeRegistrationHandler) ListWorkspacePlacements(ctx context.Context, req *connect.Request[operatorv1.ListWorkspacePlacementsRequest]) (*connect.Response[operatorv1.ListWorkspacePlacementsResponse], error) {
	return respond(h.f.ListWorkspacePlacements(ctx, req.Msg))
}

func (h nodeRegistrationHandler) CreateWorkspaceOnNode(ctx context.Context, req *connect.Request[operatorv1.CreateWorkspaceOnNodeRequest]) (*connect.Response[operatorv1.CreateWorkspaceOnNodeResponse], error) {
	return respond(h.w.CreateOnNode(ctx, req.Msg))
}

func (h nodeRegistrationHandler) StartWorkspaceOnNode(ctx context.Context, req *connect.Request[operatorv1.StartWorkspaceOnNodeRequest]) (*connect.Response[operatorv1.StartWorkspaceOnNodeResponse], error) {
	return respond(h.w.StartOnNode(ctx, req.Msg))
}
