package ctrl_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/telemetry"
	"github.com/kibotos/kibotos/internal/testenv"
)

// A CreateWorkspace on a real microVM, with ctrl and the node each
// exporting to an OTLP collector: one trace holds ctrl's server span of
// the call, the command runner's steps under it (after the call answered),
// and the node's StartExecution span under a step, exported by the node.
func TestCreateWorkspaceTraceSpansCtrlAndNode(t *testing.T) {
	col := newCollector(t)
	ctx := context.Background()
	ctrlTracing := startTracing(t, "kibotos-ctrl", col.url)
	nodeTracing := startTracing(t, "kibotos-node", col.url)

	c := testenv.New(t, testenv.FastFleet(), func(cfg *ctrl.Config) { cfg.TracerProvider = ctrlTracing.Provider })
	c.BootableCatalog(t)
	n := c.StartNodeWith(t, "node-a", "", func(cfg *node.Config) { cfg.TracerProvider = nodeTracing.Provider },
		node.Pool{Name: "default", Dir: t.TempDir(), Default: true})
	t.Cleanup(n.PowerOff)
	c.EnsureCapacity(t, "default", testenv.DefaultPoolCapacity)

	created := c.CreateSmall(t, "traced-create")
	requestID := created.Header().Get(telemetry.HeaderRequestID)
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	waitAvailable(t, c, id)
	if out, code := c.Exec(t, id, "echo", "traced"); code != 0 || out != "traced\n" {
		t.Fatalf("exec: %q, exit %d", out, code)
	}
	for _, tr := range []*telemetry.Tracing{ctrlTracing, nodeTracing} {
		if err := tr.Provider.ForceFlush(ctx); err != nil {
			t.Fatal(err)
		}
	}

	create := col.find("kibotos-ctrl", "/kibotos.ctrl.v1.WorkspaceService/CreateWorkspace", "")
	if create == nil {
		t.Fatalf("no server span of CreateWorkspace; spans: %v", col.names())
	}
	if create.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("CreateWorkspace span kind %v, want SERVER", create.GetKind())
	}
	traceID := hex.EncodeToString(create.GetTraceId())
	if requestID != traceID {
		t.Errorf("%s %q is not the call's trace id %s", telemetry.HeaderRequestID, requestID, traceID)
	}
	step := col.find("kibotos-ctrl", "command CreateWorkspace", traceID)
	if step == nil {
		t.Fatalf("no command step span in the create's trace; spans: %v", col.names())
	}
	if string(step.GetParentSpanId()) != string(create.GetSpanId()) {
		t.Errorf("the step's parent is %x, not the CreateWorkspace span %x", step.GetParentSpanId(), create.GetSpanId())
	}
	start := col.find("kibotos-node", "node StartExecution", traceID)
	if start == nil {
		t.Fatalf("no node StartExecution span in the create's trace; spans: %v", col.names())
	}
	parent := col.byID(start.GetParentSpanId())
	if parent == nil || parent.GetName() != "command CreateWorkspace" {
		t.Errorf("the node span's parent is %v, want a command CreateWorkspace step", parent.GetName())
	} else if string(parent.GetParentSpanId()) != string(create.GetSpanId()) {
		t.Errorf("the node span's step has parent %x, not the CreateWorkspace span %x", parent.GetParentSpanId(), create.GetSpanId())
	}
	if start.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("StartExecution span failed: %v", start.GetStatus())
	}

	// A data-plane call: ctrl's relay carries its trace to the node's
	// data endpoint.
	exec := col.find("kibotos-ctrl", "/kibotos.ctrl.v1.ProcessService/ExecProcess", "")
	if exec == nil {
		t.Fatalf("no server span of ExecProcess; spans: %v", col.names())
	}
	if col.findKind("kibotos-node", tracepb.Span_SPAN_KIND_SERVER, hex.EncodeToString(exec.GetTraceId())) == nil {
		t.Errorf("no node data endpoint span in the exec's trace; spans: %v", col.names())
	}
}

func startTracing(t *testing.T, service, url string) *telemetry.Tracing {
	t.Helper()
	tr, err := telemetry.StartTracing(context.Background(), service, url)
	if err != nil || tr == nil {
		t.Fatalf("tracing to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr
}

func waitAvailable(t *testing.T, c *testenv.Cluster, id string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		res, err := c.Workspaces.WaitWorkspace(context.Background(), connect.NewRequest(&ctrlv1.WaitWorkspaceRequest{
			WorkspaceId: id, States: []ctrlv1.WorkspaceState{ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED},
			Timeout: durationpb.New(30 * time.Second),
		}))
		if err != nil {
			t.Fatal(err)
		}
		if res.Msg.GetReached() {
			if s := res.Msg.GetWorkspace().GetState(); s != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
				t.Fatalf("workspace %s is %v: %v", id, s, res.Msg.GetWorkspace().GetFailure())
			}
			return
		}
	}
	t.Fatalf("workspace %s not AVAILABLE in 3 minutes", id)
}

// collector is an OTLP/HTTP trace receiver on loopback keeping every span
// with the service.name of its resource.
type collector struct {
	url   string
	mu    sync.Mutex
	spans []collected
}

type collected struct {
	service string
	span    *tracepb.Span
}

func newCollector(t *testing.T) *collector {
	col := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(col.export))
	t.Cleanup(srv.Close)
	col.url = srv.URL + "/v1/traces"
	return col
}

func (col *collector) export(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	req := &collectortracepb.ExportTraceServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(body, req)
	}
	if r.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	col.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				col.spans = append(col.spans, collected{service, s})
			}
		}
	}
	col.mu.Unlock()
	out, _ := proto.Marshal(&collectortracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// find is the first span of service named name, in trace traceID when
// not empty.
func (col *collector) find(service, name, traceID string) *tracepb.Span {
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, s := range col.spans {
		if s.service == service && s.span.GetName() == name && (traceID == "" || hex.EncodeToString(s.span.GetTraceId()) == traceID) {
			return s.span
		}
	}
	return nil
}

// findKind is the first span of service of kind in trace traceID.
func (col *collector) findKind(service string, kind tracepb.Span_SpanKind, traceID string) *tracepb.Span {
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, s := range col.spans {
		if s.service == service && s.span.GetKind() == kind && hex.EncodeToString(s.span.GetTraceId()) == traceID {
			return s.span
		}
	}
	return nil
}

func (col *collector) byID(spanID []byte) *tracepb.Span {
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, s := range col.spans {
		if string(s.span.GetSpanId()) == string(spanID) {
			return s.span
		}
	}
	return nil
}

func (col *collector) names() []string {
	col.mu.Lock()
	defer col.mu.Unlock()
	var out []string
	for _, s := range col.spans {
		out = append(out, s.service+":"+s.span.GetName())
	}
	return out
}
