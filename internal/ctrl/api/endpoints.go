// Package api mounts the Connect services of each ctrl endpoint.
//
// ctrl has three listeners and each gets its own handler, so a service can
// only be reached where it is mounted: operator services are never on the
// Native Workspace endpoint. Every endpoint also serves the standard gRPC
// health service and server reflection (v1 and v1alpha), without
// authentication, for load balancers, grpcurl and buf curl.
//
// Services and RPCs not built yet are mounted with the generated
// Unimplemented handler, so each answers unimplemented naming itself.
package api

import (
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
)

// endpoint collects the services of one listener.
type endpoint struct {
	mux      *http.ServeMux
	services []string
}

func newEndpoint() *endpoint { return &endpoint{mux: http.NewServeMux()} }

// mount takes the (path, handler) pair generated constructors return.
func (e *endpoint) mount(path string, h http.Handler) {
	e.mux.Handle(path, h)
	e.services = append(e.services, strings.Trim(path, "/"))
}

// compressMinBytes: a message smaller than this is sent uncompressed even
// to a caller that accepts gzip. Connect's default compresses every
// message; most of ctrl's are a few hundred bytes, where gzip saves
// nothing on the wire and cost a tenth of ctrl's CPU in the placement
// benchmark (issue 15). Large ones (lists, file chunks) still are.
const compressMinBytes = 1024

// DefaultMaxMessageBytes bounds each request message ctrl reads: Connect
// reads none by default, so a 300 MiB GetVolume was read (and kept) before
// its 401. Uploads stream chunks of at most catalog.MaxChunk (4 MiB) and
// file writes of 1 MiB, which fit with room for their framing.
const DefaultMaxMessageBytes = 8 << 20

// handlerOptions are every endpoint's: its interceptors, the compression
// threshold and the message limit (a larger message is resource_exhausted,
// naming the limit; Connect discards the rest of it without keeping it).
func handlerOptions(b *Backend, interceptors []connect.Interceptor) connect.HandlerOption {
	limit := b.MaxMessageBytes
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	return connect.WithHandlerOptions(connect.WithInterceptors(interceptors...), connect.WithCompressMinBytes(compressMinBytes),
		connect.WithReadMaxBytes(limit))
}

// handler adds health, and reflection of the mounted services only.
func (e *endpoint) handler() http.Handler {
	e.mux.Handle(grpchealth.NewHandler(grpchealth.NewStaticChecker(e.services...)))
	reflector := newReflector(e.services)
	e.mux.Handle(grpcreflect.NewHandlerV1(reflector))
	e.mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	return e.mux
}

// NewWorkspaceHandler serves kibotos.ctrl.v1: the Native Workspace endpoint.
func NewWorkspaceHandler(b *Backend, interceptors ...connect.Interceptor) http.Handler {
	opts := handlerOptions(b, interceptors)
	e := newEndpoint()
	e.mount(ctrlv1connect.NewWorkspaceServiceHandler(workspaceHandler{w: b.Workspaces, t: b.Transfers}, opts))
	e.mount(ctrlv1connect.NewVolumeServiceHandler(volumeHandler{v: b.Volumes, t: b.Transfers}, opts))
	e.mount(ctrlv1connect.NewTransferServiceHandler(transferHandler{t: b.Transfers}, opts))
	e.mount(ctrlv1connect.NewEgressServiceHandler(egressHandler{e: b.Egresses}, opts))
	e.mount(ctrlv1connect.NewResolverServiceHandler(resolverHandler{e: b.Egresses}, opts))
	e.mount(ctrlv1connect.NewSessionServiceHandler(sessionHandler{s: b.Sessions}, opts))
	e.mount(ctrlv1connect.NewProcessServiceHandler(b.Processes, opts))
	e.mount(ctrlv1connect.NewFileServiceHandler(b.Processes.Files(), opts))
	e.mount(ctrlv1connect.NewExposureServiceHandler(ctrlv1connect.UnimplementedExposureServiceHandler{}, opts))
	e.mount(ctrlv1connect.NewDesktopServiceHandler(ctrlv1connect.UnimplementedDesktopServiceHandler{}, opts))
	e.mount(ctrlv1connect.NewMetricsServiceHandler(b.Processes.Metrics(), opts))
	return e.handler()
}

// MetricsPath is where the Operator endpoint serves Prometheus's text
// exposition of ctrl's metrics (docs/METRICS.md).
const MetricsPath = "/metrics"

// NewOperatorHandler serves kibotos.operator.v1, and /metrics when
// b.Metrics is set: the Operator endpoint.
func NewOperatorHandler(b *Backend, interceptors ...connect.Interceptor) http.Handler {
	opts := handlerOptions(b, interceptors)
	e := newEndpoint()
	e.mount(operatorv1connect.NewNodeRegistrationServiceHandler(nodeRegistrationHandler{f: b.Fleet, p: b.Pools, w: b.Workspaces}, opts))
	e.mount(operatorv1connect.NewTemplateCatalogServiceHandler(templateCatalogHandler{c: b.Catalog}, opts))
	e.mount(operatorv1connect.NewPlatformCatalogServiceHandler(platformCatalogHandler{c: b.Catalog}, opts))
	e.mount(operatorv1connect.NewEnrollmentServiceHandler(enrollmentHandler{f: b.Fleet}, opts))
	if b.Metrics != nil {
		// Not a service: no health or reflection entry. The endpoint's
		// Gate checks the operator key before it, as for the services.
		e.mux.Handle("GET "+MetricsPath, b.Metrics)
	}
	return e.handler()
}

// NewNodeHandler serves kibotos.node.v1: the endpoint nodes hold their
// control sessions on. Nodes authenticate with an enrollment grant (Enroll),
// then with their own credential (Session).
func NewNodeHandler(b *Backend, interceptors ...connect.Interceptor) http.Handler {
	opts := handlerOptions(b, interceptors)
	e := newEndpoint()
	path, h := nodev1connect.NewNodeSessionServiceHandler(nodeSessionHandler{f: b.Fleet, t: b.Transfers}, opts)
	e.mount(path, interruptible(h))
	return e.handler()
}
