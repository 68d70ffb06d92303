package api

import (
	"context"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/egress"
)

// egressHandler serves EgressService.
type egressHandler struct{ e *egress.Service }

func (h egressHandler) CreateEgress(ctx context.Context, req *connect.Request[ctrlv1.CreateEgressRequest]) (*connect.Response[ctrlv1.CreateEgressResponse], error) {
	return respond(h.e.CreateEgress(ctx, req.Msg))
}

func (h egressHandler) GetEgress(ctx context.Context, req *connect.Request[ctrlv1.GetEgressRequest]) (*connect.Response[ctrlv1.GetEgressResponse], error) {
	return respond(h.e.GetEgress(ctx, req.Msg))
}

func (h egressHandler) ListEgresses(ctx context.Context, req *connect.Request[ctrlv1.ListEgressesRequest]) (*connect.Response[ctrlv1.ListEgressesResponse], error) {
	return respond(h.e.ListEgresses(ctx, req.Msg))
}

func (h egressHandler) UpdateEgress(ctx context.Context, req *connect.Request[ctrlv1.UpdateEgressRequest]) (*connect.Response[ctrlv1.UpdateEgressResponse], error) {
	return respond(h.e.UpdateEgress(ctx, req.Msg))
}

func (h egressHandler) DeleteEgress(ctx context.Context, req *connect.Request[ctrlv1.DeleteEgressRequest]) (*connect.Response[ctrlv1.DeleteEgressResponse], error) {
	return respond(h.e.DeleteEgress(ctx, req.Msg))
}

// resolverHandler serves ResolverService.
type resolverHandler struct{ e *egress.Service }

func (h resolverHandler) CreateResolver(ctx context.Context, req *connect.Request[ctrlv1.CreateResolverRequest]) (*connect.Response[ctrlv1.CreateResolverResponse], error) {
	return respond(h.e.CreateResolver(ctx, req.Msg))
}

func (h resolverHandler) GetResolver(ctx context.Context, req *connect.Request[ctrlv1.GetResolverRequest]) (*connect.Response[ctrlv1.GetResolverResponse], error) {
	return respond(h.e.GetResolver(ctx, req.Msg))
}

func (h resolverHandler) ListResolvers(ctx context.Context, req *connect.Request[ctrlv1.ListResolversRequest]) (*connect.Response[ctrlv1.ListResolversResponse], error) {
	return respond(h.e.ListResolvers(ctx, req.Msg))
}

func (h resolverHandler) UpdateResolver(ctx context.Context, req *connect.Request[ctrlv1.UpdateResolverRequest]) (*connect.Response[ctrlv1.UpdateResolverResponse], error) {
	return respond(h.e.UpdateResolver(ctx, req.Msg))
}

func (h resolverHandler) DeleteResolver(ctx context.Context, req *connect.Request[ctrlv1.DeleteResolverRequest]) (*connect.Response[ctrlv1.DeleteResolverResponse], error) {
	return respond(h.e.DeleteResolver(ctx, req.Msg))
}
