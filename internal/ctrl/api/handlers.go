package api

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/catalog"
	"github.com/kibotos/kibotos/internal/ctrl/dataplane"
	"github.com/kibotos/kibotos/internal/ctrl/egress"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/pool"
	"github.com/kibotos/kibotos/internal/ctrl/session"
	"github.com/kibotos/kibotos/internal/ctrl/transfer"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
)

// Backend is the domain the handlers call.
type Backend struct {
	Workspaces *workspace.Service
	Volumes    *volume.Service
	Fleet      *fleet.Fleet
	Processes  *dataplane.Processes
	Sessions   *session.Service
	Catalog    *catalog.Catalog
	Pools      *pool.Service
	// Egresses serves EgressService and ResolverService.
	Egresses *egress.Service
	// Transfers serves TransferService.
	Transfers *transfer.Service
	// MaxMessageBytes is the largest request message any endpoint reads
	// (a unary request, each message of a stream); zero is
	// DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Metrics, when not nil, serves GET /metrics on the Operator
	// endpoint (behind the endpoint's authentication, as its services).
	Metrics http.Handler
}

// respond wraps a domain answer in a Connect response.
func respond[T any](msg *T, err error) (*connect.Response[T], error) {
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(msg), nil
}

// volumeHandler serves VolumeService; the Transfer domain exports.
type volumeHandler struct {
	ctrlv1connect.UnimplementedVolumeServiceHandler
	v *volume.Service
	t *transfer.Service
}

func (h volumeHandler) ExportVolume(ctx context.Context, req *connect.Request[ctrlv1.ExportVolumeRequest]) (*connect.Response[ctrlv1.ExportVolumeResponse], error) {
	return respond(h.t.ExportVolume(ctx, req.Msg))
}

func (h volumeHandler) CreateVolume(ctx context.Context, req *connect.Request[ctrlv1.CreateVolumeRequest]) (*connect.Response[ctrlv1.CreateVolumeResponse], error) {
	return respond(h.v.Create(ctx, req.Msg))
}

func (h volumeHandler) GetVolume(ctx context.Context, req *connect.Request[ctrlv1.GetVolumeRequest]) (*connect.Response[ctrlv1.GetVolumeResponse], error) {
	return respond(h.v.Get(ctx, req.Msg))
}

func (h volumeHandler) ListVolumes(ctx context.Context, req *connect.Request[ctrlv1.ListVolumesRequest]) (*connect.Response[ctrlv1.ListVolumesResponse], error) {
	return respond(h.v.List(ctx, req.Msg))
}

func (h volumeHandler) ResizeVolume(ctx context.Context, req *connect.Request[ctrlv1.ResizeVolumeRequest]) (*connect.Response[ctrlv1.ResizeVolumeResponse], error) {
	return respond(h.v.Resize(ctx, req.Msg))
}

func (h volumeHandler) DeleteVolume(ctx context.Context, req *connect.Request[ctrlv1.DeleteVolumeRequest]) (*connect.Response[ctrlv1.DeleteVolumeResponse], error) {
	return respond(h.v.Delete(ctx, req.Msg))
}

func (h volumeHandler) UpdateVolumeLabels(ctx context.Context, req *connect.Request[ctrlv1.UpdateVolumeLabelsRequest]) (*connect.Response[ctrlv1.UpdateVolumeLabelsResponse], error) {
	return respond(h.v.UpdateLabels(ctx, req.Msg))
}

func (h volumeHandler) UpdateVolumeAnnotations(ctx context.Context, req *connect.Request[ctrlv1.UpdateVolumeAnnotationsRequest]) (*connect.Response[ctrlv1.UpdateVolumeAnnotationsResponse], error) {
	return respond(h.v.UpdateAnnotations(ctx, req.Msg))
}

// nodeRegistrationHandler serves the NodeRegistrationService RPCs built so
// far: reading registrations, the node lifecycle (drain, isolate, retire),
// storage pools, overcommit and placements (placement.go). The others
// answer unimplemented, naming themselves.
type nodeRegistrationHandler struct {
	operatorv1connect.UnimplementedNodeRegistrationServiceHandler
	f *fleet.Fleet
	p *pool.Service
	w *workspace.Service
}

func (h nodeRegistrationHandler) ListStoragePools(ctx context.Context, req *connect.Request[operatorv1.ListStoragePoolsRequest]) (*connect.Response[operatorv1.ListStoragePoolsResponse], error) {
	return respond(h.p.ListStoragePools(ctx, req.Msg))
}

func (h nodeRegistrationHandler) GetStoragePool(ctx context.Context, req *connect.Request[operatorv1.GetStoragePoolRequest]) (*connect.Response[operatorv1.GetStoragePoolResponse], error) {
	return respond(h.p.GetStoragePool(ctx, req.Msg))
}

func (h nodeRegistrationHandler) SetStoragePoolCapacity(ctx context.Context, req *connect.Request[operatorv1.SetStoragePoolCapacityRequest]) (*connect.Response[operatorv1.SetStoragePoolCapacityResponse], error) {
	return respond(h.p.SetStoragePoolCapacity(ctx, req.Msg))
}

func (h nodeRegistrationHandler) DeclareStoragePoolLost(ctx context.Context, req *connect.Request[operatorv1.DeclareStoragePoolLostRequest]) (*connect.Response[operatorv1.DeclareStoragePoolLostResponse], error) {
	return respond(h.p.DeclareStoragePoolLost(ctx, req.Msg))
}

func (h nodeRegistrationHandler) ListStoragePoolObjects(ctx context.Context, req *connect.Request[operatorv1.ListStoragePoolObjectsRequest]) (*connect.Response[operatorv1.ListStoragePoolObjectsResponse], error) {
	return respond(h.p.ListStoragePoolObjects(ctx, req.Msg))
}

func (h nodeRegistrationHandler) GetStoragePoolObject(ctx context.Context, req *connect.Request[operatorv1.GetStoragePoolObjectRequest]) (*connect.Response[operatorv1.GetStoragePoolObjectResponse], error) {
	return respond(h.p.GetStoragePoolObject(ctx, req.Msg))
}

func (h nodeRegistrationHandler) MoveVolume(ctx context.Context, req *connect.Request[operatorv1.MoveVolumeRequest]) (*connect.Response[operatorv1.MoveVolumeResponse], error) {
	return respond(h.p.MoveVolume(ctx, req.Msg))
}

func (h nodeRegistrationHandler) MoveWritableLayer(ctx context.Context, req *connect.Request[operatorv1.MoveWritableLayerRequest]) (*connect.Response[operatorv1.MoveWritableLayerResponse], error) {
	return respond(h.p.MoveWritableLayer(ctx, req.Msg))
}

func (h nodeRegistrationHandler) ListNodeRegistrations(ctx context.Context, req *connect.Request[operatorv1.ListNodeRegistrationsRequest]) (*connect.Response[operatorv1.ListNodeRegistrationsResponse], error) {
	return respond(h.f.ListNodeRegistrations(ctx, req.Msg))
}

func (h nodeRegistrationHandler) GetNodeRegistration(ctx context.Context, req *connect.Request[operatorv1.GetNodeRegistrationRequest]) (*connect.Response[operatorv1.GetNodeRegistrationResponse], error) {
	return respond(h.f.GetNodeRegistration(ctx, req.Msg))
}

func (h nodeRegistrationHandler) DrainNode(ctx context.Context, req *connect.Request[operatorv1.DrainNodeRequest]) (*connect.Response[operatorv1.DrainNodeResponse], error) {
	return respond(h.f.DrainNode(ctx, req.Msg))
}

func (h nodeRegistrationHandler) CancelNodeDrain(ctx context.Context, req *connect.Request[operatorv1.CancelNodeDrainRequest]) (*connect.Response[operatorv1.CancelNodeDrainResponse], error) {
	return respond(h.f.CancelNodeDrain(ctx, req.Msg))
}

func (h nodeRegistrationHandler) IsolateNode(ctx context.Context, req *connect.Request[operatorv1.IsolateNodeRequest]) (*connect.Response[operatorv1.IsolateNodeResponse], error) {
	return respond(h.f.IsolateNode(ctx, req.Msg))
}

func (h nodeRegistrationHandler) RetireNode(ctx context.Context, req *connect.Request[operatorv1.RetireNodeRequest]) (*connect.Response[operatorv1.RetireNodeResponse], error) {
	return respond(h.f.RetireNode(ctx, req.Msg))
}

type enrollmentHandler struct {
	operatorv1connect.UnimplementedEnrollmentServiceHandler
	f *fleet.Fleet
}

func (h enrollmentHandler) CreateEnrollmentGrant(ctx context.Context, req *connect.Request[operatorv1.CreateEnrollmentGrantRequest]) (*connect.Response[operatorv1.CreateEnrollmentGrantResponse], error) {
	return respond(h.f.CreateEnrollmentGrant(ctx, req.Msg))
}

func (h enrollmentHandler) GetEnrollmentGrant(ctx context.Context, req *connect.Request[operatorv1.GetEnrollmentGrantRequest]) (*connect.Response[operatorv1.GetEnrollmentGrantResponse], error) {
	return respond(h.f.GetEnrollmentGrant(ctx, req.Msg))
}

func (h enrollmentHandler) ListEnrollmentGrants(ctx context.Context, req *connect.Request[operatorv1.ListEnrollmentGrantsRequest]) (*connect.Response[operatorv1.ListEnrollmentGrantsResponse], error) {
	return respond(h.f.ListEnrollmentGrants(ctx, req.Msg))
}

func (h enrollmentHandler) RevokeEnrollmentGrant(ctx context.Context, req *connect.Request[operatorv1.RevokeEnrollmentGrantRequest]) (*connect.Response[operatorv1.RevokeEnrollmentGrantResponse], error) {
	return respond(h.f.RevokeEnrollmentGrant(ctx, req.Msg))
}

type nodeSessionHandler struct {
	nodev1connect.UnimplementedNodeSessionServiceHandler
	f *fleet.Fleet
	t *transfer.Service
}

func (h nodeSessionHandler) FetchTransferPart(ctx context.Context, req *connect.Request[nodev1.FetchTransferPartRequest], stream *connect.ServerStream[nodev1.FetchTransferPartResponse]) error {
	nodeID, err := h.f.AuthenticateNode(ctx, req.Header())
	if err != nil {
		return err
	}
	return h.t.ServePart(ctx, nodeID, req.Msg, stream.Send)
}

func (h nodeSessionHandler) UploadTransferPart(ctx context.Context, stream *connect.ClientStream[nodev1.UploadTransferPartRequest]) (*connect.Response[nodev1.UploadTransferPartResponse], error) {
	nodeID, err := h.f.AuthenticateNode(ctx, stream.RequestHeader())
	if err != nil {
		return nil, err
	}
	return respond(h.t.ReceivePart(ctx, nodeID, func() (*nodev1.UploadTransferPartRequest, error) { return received(stream) }))
}

func (h nodeSessionHandler) Enroll(ctx context.Context, req *connect.Request[nodev1.EnrollRequest]) (*connect.Response[nodev1.EnrollResponse], error) {
	return respond(h.f.Enroll(ctx, req.Msg))
}

func (h nodeSessionHandler) FetchArtifact(ctx context.Context, req *connect.Request[nodev1.FetchArtifactRequest], stream *connect.ServerStream[nodev1.FetchArtifactResponse]) error {
	return h.f.FetchArtifact(ctx, req.Header(), req.Msg, stream.Send)
}

func (h nodeSessionHandler) Session(ctx context.Context, stream *connect.BidiStream[nodev1.SessionRequest, nodev1.SessionResponse]) error {
	interrupt, err := interruptOf(ctx)
	if err != nil {
		return err
	}
	return h.f.Session(ctx, stream, interrupt)
}

// workspaceHandler serves WorkspaceService; the Transfer domain exports.
type workspaceHandler struct {
	ctrlv1connect.UnimplementedWorkspaceServiceHandler
	w *workspace.Service
	t *transfer.Service
}

// RestoreWorkspace first has the Transfer domain register the template
// image the archive carries, if this deployment lacks it.
func (h workspaceHandler) RestoreWorkspace(ctx context.Context, req *connect.Request[ctrlv1.RestoreWorkspaceRequest]) (*connect.Response[ctrlv1.RestoreWorkspaceResponse], error) {
	if err := h.t.PrepareRestore(ctx, req.Msg); err != nil {
		return nil, err
	}
	return respond(h.w.Restore(ctx, req.Msg))
}

func (h workspaceHandler) ExportWorkspace(ctx context.Context, req *connect.Request[ctrlv1.ExportWorkspaceRequest]) (*connect.Response[ctrlv1.ExportWorkspaceResponse], error) {
	return respond(h.t.ExportWorkspace(ctx, req.Msg))
}

func (h workspaceHandler) CreateWorkspace(ctx context.Context, req *connect.Request[ctrlv1.CreateWorkspaceRequest]) (*connect.Response[ctrlv1.CreateWorkspaceResponse], error) {
	return respond(h.w.Create(ctx, req.Msg))
}

func (h workspaceHandler) GetWorkspace(ctx context.Context, req *connect.Request[ctrlv1.GetWorkspaceRequest]) (*connect.Response[ctrlv1.GetWorkspaceResponse], error) {
	return respond(h.w.Get(ctx, req.Msg))
}

func (h workspaceHandler) ListWorkspaces(ctx context.Context, req *connect.Request[ctrlv1.ListWorkspacesRequest]) (*connect.Response[ctrlv1.ListWorkspacesResponse], error) {
	return respond(h.w.List(ctx, req.Msg))
}

func (h workspaceHandler) StartWorkspace(ctx context.Context, req *connect.Request[ctrlv1.StartWorkspaceRequest]) (*connect.Response[ctrlv1.StartWorkspaceResponse], error) {
	return respond(h.w.Start(ctx, req.Msg))
}

func (h workspaceHandler) StopWorkspace(ctx context.Context, req *connect.Request[ctrlv1.StopWorkspaceRequest]) (*connect.Response[ctrlv1.StopWorkspaceResponse], error) {
	return respond(h.w.Stop(ctx, req.Msg))
}

func (h workspaceHandler) DeleteWorkspace(ctx context.Context, req *connect.Request[ctrlv1.DeleteWorkspaceRequest]) (*connect.Response[ctrlv1.DeleteWorkspaceResponse], error) {
	return respond(h.w.Delete(ctx, req.Msg))
}

func (h workspaceHandler) GetWorkspaceCommand(ctx context.Context, req *connect.Request[ctrlv1.GetWorkspaceCommandRequest]) (*connect.Response[ctrlv1.GetWorkspaceCommandResponse], error) {
	return respond(h.w.GetCommand(ctx, req.Msg))
}

func (h workspaceHandler) WaitWorkspace(ctx context.Context, req *connect.Request[ctrlv1.WaitWorkspaceRequest]) (*connect.Response[ctrlv1.WaitWorkspaceResponse], error) {
	return respond(h.w.Wait(ctx, req.Msg))
}

func (h workspaceHandler) UpdateWorkspaceVolumeBinding(ctx context.Context, req *connect.Request[ctrlv1.UpdateWorkspaceVolumeBindingRequest]) (*connect.Response[ctrlv1.UpdateWorkspaceVolumeBindingResponse], error) {
	return respond(h.w.UpdateVolumeBinding(ctx, req.Msg))
}

func (h workspaceHandler) UpdateWorkspaceMemory(ctx context.Context, req *connect.Request[ctrlv1.UpdateWorkspaceMemoryRequest]) (*connect.Response[ctrlv1.UpdateWorkspaceMemoryResponse], error) {
	return respond(h.w.UpdateMemory(ctx, req.Msg))
}

func (h workspaceHandler) ResizeWorkspaceWritableLayer(ctx context.Context, req *connect.Request[ctrlv1.ResizeWorkspaceWritableLayerRequest]) (*connect.Response[ctrlv1.ResizeWorkspaceWritableLayerResponse], error) {
	return respond(h.w.ResizeWritableLayer(ctx, req.Msg))
}

func (h workspaceHandler) UpdateWorkspaceNetworkPolicy(ctx context.Context, req *connect.Request[ctrlv1.UpdateWorkspaceNetworkPolicyRequest]) (*connect.Response[ctrlv1.UpdateWorkspaceNetworkPolicyResponse], error) {
	return respond(h.w.UpdateNetworkPolicy(ctx, req.Msg))
}

func (h workspaceHandler) UpdateWorkspaceLabels(ctx context.Context, req *connect.Request[ctrlv1.UpdateWorkspaceLabelsRequest]) (*connect.Response[ctrlv1.UpdateWorkspaceLabelsResponse], error) {
	return respond(h.w.UpdateLabels(ctx, req.Msg))
}

func (h workspaceHandler) UpdateWorkspaceAnnotations(ctx context.Context, req *connect.Request[ctrlv1.UpdateWorkspaceAnnotationsRequest]) (*connect.Response[ctrlv1.UpdateWorkspaceAnnotationsResponse], error) {
	return respond(h.w.UpdateAnnotations(ctx, req.Msg))
}

func (h workspaceHandler) UpdateWorkspaceExpiration(ctx context.Context, req *connect.Request[ctrlv1.UpdateWorkspaceExpirationRequest]) (*connect.Response[ctrlv1.UpdateWorkspaceExpirationResponse], error) {
	return respond(h.w.UpdateExpiration(ctx, req.Msg))
}
