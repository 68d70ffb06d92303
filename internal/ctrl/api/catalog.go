package api

import (
	"context"
	"io"

	"connectrpc.com/connect"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/catalog"
)

// uploadPart is one message of an upload stream: a header first, chunks
// after.
type uploadPart[H any] interface {
	GetHeader() H
	GetChunk() []byte
}

// uploadStream splits an upload stream into its header and its chunks. A
// header anywhere but first is invalid_argument.
func uploadStream[T any, M interface {
	*T
	uploadPart[H]
}, H comparable](stream *connect.ClientStream[T]) (H, catalog.Chunks, error) {
	var zero H
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return zero, nil, err
		}
		return zero, nil, apierr.Invalid("header", "is required in the first message of the stream")
	}
	header := M(stream.Msg()).GetHeader()
	chunks := func() ([]byte, error) {
		if !stream.Receive() {
			if err := stream.Err(); err != nil {
				return nil, err
			}
			return nil, io.EOF
		}
		if M(stream.Msg()).GetHeader() != zero {
			return nil, apierr.Invalid("header", "is allowed in the first message of the stream only")
		}
		return M(stream.Msg()).GetChunk(), nil
	}
	return header, chunks, nil
}

// platformCatalogHandler serves PlatformCatalogService.
type platformCatalogHandler struct {
	operatorv1connect.UnimplementedPlatformCatalogServiceHandler
	c *catalog.Catalog
}

func (h platformCatalogHandler) CreatePlatformKey(ctx context.Context, req *connect.Request[operatorv1.CreatePlatformKeyRequest]) (*connect.Response[operatorv1.CreatePlatformKeyResponse], error) {
	return respond(h.c.CreatePlatformKey(ctx, req.Msg))
}

func (h platformCatalogHandler) GetPlatformKey(ctx context.Context, req *connect.Request[operatorv1.GetPlatformKeyRequest]) (*connect.Response[operatorv1.GetPlatformKeyResponse], error) {
	return respond(h.c.GetPlatformKey(ctx, req.Msg))
}

func (h platformCatalogHandler) ListPlatformKeys(ctx context.Context, req *connect.Request[operatorv1.ListPlatformKeysRequest]) (*connect.Response[operatorv1.ListPlatformKeysResponse], error) {
	return respond(h.c.ListPlatformKeys(ctx, req.Msg))
}

func (h platformCatalogHandler) SetDeploymentDefaultPlatformKey(ctx context.Context, req *connect.Request[operatorv1.SetDeploymentDefaultPlatformKeyRequest]) (*connect.Response[operatorv1.SetDeploymentDefaultPlatformKeyResponse], error) {
	return respond(h.c.SetDeploymentDefaultPlatformKey(ctx, req.Msg))
}

func (h platformCatalogHandler) UploadPlatformArtifact(ctx context.Context, stream *connect.ClientStream[operatorv1.UploadPlatformArtifactRequest]) (*connect.Response[operatorv1.UploadPlatformArtifactResponse], error) {
	header, chunks, err := uploadStream[operatorv1.UploadPlatformArtifactRequest, *operatorv1.UploadPlatformArtifactRequest, *operatorv1.PlatformArtifactUploadHeader](stream)
	if err != nil {
		return nil, err
	}
	return respond(h.c.UploadPlatformArtifact(ctx, header, chunks))
}

func (h platformCatalogHandler) CreateLaunch(ctx context.Context, req *connect.Request[operatorv1.CreateLaunchRequest]) (*connect.Response[operatorv1.CreateLaunchResponse], error) {
	return respond(h.c.CreateLaunch(ctx, req.Msg))
}

func (h platformCatalogHandler) GetLaunch(ctx context.Context, req *connect.Request[operatorv1.GetLaunchRequest]) (*connect.Response[operatorv1.GetLaunchResponse], error) {
	return respond(h.c.GetLaunch(ctx, req.Msg))
}

func (h platformCatalogHandler) ListLaunches(ctx context.Context, req *connect.Request[operatorv1.ListLaunchesRequest]) (*connect.Response[operatorv1.ListLaunchesResponse], error) {
	return respond(h.c.ListLaunches(ctx, req.Msg))
}

func (h platformCatalogHandler) SetDefaultLaunch(ctx context.Context, req *connect.Request[operatorv1.SetDefaultLaunchRequest]) (*connect.Response[operatorv1.SetDefaultLaunchResponse], error) {
	return respond(h.c.SetDefaultLaunch(ctx, req.Msg))
}

// templateCatalogHandler serves TemplateCatalogService.
type templateCatalogHandler struct {
	operatorv1connect.UnimplementedTemplateCatalogServiceHandler
	c *catalog.Catalog
}

func (h templateCatalogHandler) CreateTemplate(ctx context.Context, req *connect.Request[operatorv1.CreateTemplateRequest]) (*connect.Response[operatorv1.CreateTemplateResponse], error) {
	return respond(h.c.CreateTemplate(ctx, req.Msg))
}

func (h templateCatalogHandler) SetDeploymentDefaultTemplate(ctx context.Context, req *connect.Request[operatorv1.SetDeploymentDefaultTemplateRequest]) (*connect.Response[operatorv1.SetDeploymentDefaultTemplateResponse], error) {
	return respond(h.c.SetDeploymentDefaultTemplate(ctx, req.Msg))
}

func (h templateCatalogHandler) GetTemplate(ctx context.Context, req *connect.Request[operatorv1.GetTemplateRequest]) (*connect.Response[operatorv1.GetTemplateResponse], error) {
	return respond(h.c.GetTemplate(ctx, req.Msg))
}

func (h templateCatalogHandler) ListTemplates(ctx context.Context, req *connect.Request[operatorv1.ListTemplatesRequest]) (*connect.Response[operatorv1.ListTemplatesResponse], error) {
	return respond(h.c.ListTemplates(ctx, req.Msg))
}

func (h templateCatalogHandler) UploadTemplateSource(ctx context.Context, stream *connect.ClientStream[operatorv1.UploadTemplateSourceRequest]) (*connect.Response[operatorv1.UploadTemplateSourceResponse], error) {
	header, chunks, err := uploadStream[operatorv1.UploadTemplateSourceRequest, *operatorv1.UploadTemplateSourceRequest, *operatorv1.TemplateSourceUploadHeader](stream)
	if err != nil {
		return nil, err
	}
	return respond(h.c.UploadTemplateSource(ctx, header, chunks))
}

func (h templateCatalogHandler) CreateTemplateRevision(ctx context.Context, req *connect.Request[operatorv1.CreateTemplateRevisionRequest]) (*connect.Response[operatorv1.CreateTemplateRevisionResponse], error) {
	return respond(h.c.CreateTemplateRevision(ctx, req.Msg))
}

func (h templateCatalogHandler) GetTemplateRevision(ctx context.Context, req *connect.Request[operatorv1.GetTemplateRevisionRequest]) (*connect.Response[operatorv1.GetTemplateRevisionResponse], error) {
	return respond(h.c.GetTemplateRevision(ctx, req.Msg))
}

func (h templateCatalogHandler) ListTemplateRevisions(ctx context.Context, req *connect.Request[operatorv1.ListTemplateRevisionsRequest]) (*connect.Response[operatorv1.ListTemplateRevisionsResponse], error) {
	return respond(h.c.ListTemplateRevisions(ctx, req.Msg))
}

func (h templateCatalogHandler) SetDefaultTemplateRevision(ctx context.Context, req *connect.Request[operatorv1.SetDefaultTemplateRevisionRequest]) (*connect.Response[operatorv1.SetDefaultTemplateRevisionResponse], error) {
	return respond(h.c.SetDefaultTemplateRevision(ctx, req.Msg))
}

func (h templateCatalogHandler) DeleteTemplateRevision(ctx context.Context, req *connect.Request[operatorv1.DeleteTemplateRevisionRequest]) (*connect.Response[operatorv1.DeleteTemplateRevisionResponse], error) {
	return respond(h.c.DeleteTemplateRevision(ctx, req.Msg))
}

func (h templateCatalogHandler) DeleteTemplate(ctx context.Context, req *connect.Request[operatorv1.DeleteTemplateRequest]) (*connect.Response[operatorv1.DeleteTemplateResponse], error) {
	return respond(h.c.DeleteTemplate(ctx, req.Msg))
}

func (h templateCatalogHandler) GetTemplateDelivery(ctx context.Context, req *connect.Request[operatorv1.GetTemplateDeliveryRequest]) (*connect.Response[operatorv1.GetTemplateDeliveryResponse], error) {
	return respond(h.c.GetTemplateDelivery(ctx, req.Msg))
}
