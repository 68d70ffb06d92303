package telemetry_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/telemetry"
)

// A failed RPC's server span carries an error status and the Connect
// code, over the Connect protocol (a 4xx) and over gRPC (a 200 with the
// code in trailers).
func TestErrorStatusMarksTheServerSpan(t *testing.T) {
	for _, protocol := range []struct {
		name string
		opt  connect.ClientOption
	}{{"connect", connect.WithProtoJSON()}, {"grpc", connect.WithGRPC()}} {
		t.Run(protocol.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			_, h := ctrlv1connect.NewWorkspaceServiceHandler(ctrlv1connect.UnimplementedWorkspaceServiceHandler{},
				connect.WithInterceptors(telemetry.ErrorStatus()))
			srv := httptest.NewUnstartedServer(telemetry.Handler(h, tp, false))
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			client := ctrlv1connect.NewWorkspaceServiceClient(srv.Client(), srv.URL, protocol.opt)
			_, err := client.GetWorkspace(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: "ws-1"}))
			if connect.CodeOf(err) != connect.CodeUnimplemented {
				t.Fatalf("GetWorkspace: %v, want unimplemented", err)
			}
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans ended, want the server's one", len(spans))
			}
			s := spans[0]
			if s.Status().Code != codes.Error {
				t.Errorf("span %s status %v, want Error", s.Name(), s.Status())
			}
			found := false
			for _, a := range s.Attributes() {
				if a.Key == "rpc.connect_rpc.error_code" {
					found = a.Value.AsString() == connect.CodeUnimplemented.String()
				}
			}
			if !found {
				t.Errorf("span attributes %v lack rpc.connect_rpc.error_code=unimplemented", s.Attributes())
			}
		})
	}
}
