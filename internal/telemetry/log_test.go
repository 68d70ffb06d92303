package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/kibotos/kibotos/internal/telemetry"
)

// A JSON log line is one object carrying the request and command ids of
// its context, and the request id is the one the response header answers.
func TestJSONLogCarriesRequestAndCommandIDs(t *testing.T) {
	var buf bytes.Buffer
	log, err := telemetry.NewLogger(&buf, telemetry.LogJSON)
	if err != nil {
		t.Fatal(err)
	}
	h := telemetry.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		log.With("component", "test").InfoContext(telemetry.WithCommandID(r.Context(), "cmd-1"), "handled", "n", 1)
	}), nil, true)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/kibotos.ctrl.v1.WorkspaceService/GetWorkspace", nil))

	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not one JSON object: %q: %v", buf.String(), err)
	}
	id := rec.Header().Get(telemetry.HeaderRequestID)
	if len(id) != 32 {
		t.Errorf("request id %q: want 32 hex digits", id)
	}
	for k, want := range map[string]any{"msg": "handled", "request_id": id, "command_id": "cmd-1", "component": "test", "n": 1.0, "level": "INFO"} {
		if line[k] != want {
			t.Errorf("%s = %v, want %v (line %s)", k, line[k], want, buf.String())
		}
	}
}

// A line logged in a traced context carries its trace and span ids, and
// the attributes the context was given for its unit of work.
func TestLogCarriesTraceIDsAndContextAttrs(t *testing.T) {
	var buf bytes.Buffer
	log, err := telemetry.NewLogger(&buf, telemetry.LogJSON)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()
	ctx = telemetry.WithLogAttrs(telemetry.WithLogAttrs(ctx, slog.String("operation_id", "op-1")), slog.String("instance_id", "i-1"))
	log.InfoContext(ctx, "applied")
	log.Info("no context")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var line map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil {
		t.Fatal(err)
	}
	sc := span.SpanContext()
	for k, want := range map[string]any{"trace_id": sc.TraceID().String(), "span_id": sc.SpanID().String(), "operation_id": "op-1", "instance_id": "i-1"} {
		if line[k] != want {
			t.Errorf("%s = %v, want %v (line %s)", k, line[k], want, lines[0])
		}
	}
	if strings.Contains(lines[1], "trace_id") || strings.Contains(lines[1], "operation_id") {
		t.Errorf("a line without a context carries its ids: %s", lines[1])
	}
}

func TestTextLogAndUnknownFormat(t *testing.T) {
	var buf bytes.Buffer
	log, err := telemetry.NewLogger(&buf, telemetry.LogText)
	if err != nil {
		t.Fatal(err)
	}
	log.InfoContext(telemetry.WithRequestID(context.Background(), "r1"), "hello")
	if !strings.Contains(buf.String(), "msg=hello") || !strings.Contains(buf.String(), "request_id=r1") {
		t.Errorf("text line %q", buf.String())
	}
	if _, err := telemetry.NewLogger(&buf, "xml"); err == nil || !strings.Contains(err.Error(), "xml") {
		t.Errorf("unknown format: %v", err)
	}
}

// No endpoint, flag or variable: tracing is off and nothing is made.
func TestTracingOffWithoutEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, err := telemetry.StartTracing(context.Background(), "test", "")
	if err != nil || tr != nil || tr.TracerProvider() != nil {
		t.Errorf("StartTracing without an endpoint: %v, %v", tr, err)
	}
}
