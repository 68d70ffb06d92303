// Package telemetry is what Kibotos's processes report about themselves
// besides metrics: OpenTelemetry traces, exported over OTLP when an
// endpoint is configured, and structured logs that carry the request and
// command ids of the work they describe (docs/OBSERVABILITY.md).
package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Tracing is the tracer provider of a process that exports spans, and how
// to flush them when it ends.
type Tracing struct {
	Provider *sdktrace.TracerProvider
}

// Shutdown exports the spans still buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.Provider.Shutdown(ctx)
}

// TracerProvider is the provider to give the process's parts: nil when
// tracing is off, which they read as "add no instrumentation".
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.Provider
}

// tracesEnv are the standard variables that name an OTLP endpoint; the
// exporter reads them itself.
var tracesEnv = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

// StartTracing exports the spans of service over OTLP/HTTP (protobuf) to
// endpoint (a URL such as http://collector:4318; the path /v1/traces is
// added when it has none), or, when endpoint is empty, to the endpoint
// the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT names. With neither, tracing is off: it
// returns nil and nothing is instrumented, so tracing costs nothing.
func StartTracing(ctx context.Context, service, endpoint string) (*Tracing, error) {
	var opts []otlptracehttp.Option
	switch {
	case endpoint != "":
		if !strings.Contains(strings.TrimPrefix(strings.TrimPrefix(endpoint, "http://"), "https://"), "/") {
			endpoint = strings.TrimSuffix(endpoint, "/") + "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
	case !envSet():
		return nil, nil
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(serviceName(service)))
	if err != nil {
		return nil, err
	}
	return &Tracing{Provider: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}, nil
}

func envSet() bool {
	for _, k := range tracesEnv {
		if os.Getenv(k) != "" {
			return true
		}
	}
	return false
}

// serviceName is service unless OTEL_SERVICE_NAME names another.
func serviceName(service string) attribute.KeyValue {
	if s := os.Getenv("OTEL_SERVICE_NAME"); s != "" {
		service = s
	}
	return attribute.String("service.name", service)
}

// propagator is W3C trace context, the one format Kibotos carries: in
// HTTP headers and in the traceparent fields of its records.
var propagator = propagation.TraceContext{}

// Traceparent is the W3C traceparent of ctx's span, "" when ctx holds no
// sampled span (tracing off): what a command or node operation records so
// that work done later, elsewhere, joins the trace.
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	propagator.Inject(ctx, carrier)
	return carrier["traceparent"]
}

// WithTraceparent is ctx with the remote parent traceparent names; ctx
// itself when it names none (or is malformed).
func WithTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

type providerKey struct{}

// NewContext is ctx carrying tp, for background work (a command runner)
// that starts spans of its own; nil tp leaves ctx as it is.
func NewContext(ctx context.Context, tp trace.TracerProvider) context.Context {
	if tp == nil {
		return ctx
	}
	return context.WithValue(ctx, providerKey{}, tp)
}

// Tracer is the tracer of ctx's provider (NewContext), a no-op one when
// it carries none.
func Tracer(ctx context.Context, name string) trace.Tracer {
	tp, ok := ctx.Value(providerKey{}).(trace.TracerProvider)
	if !ok {
		return noopTracer
	}
	return tp.Tracer(name)
}

var noopTracer = tracenoop.NewTracerProvider().Tracer("")

// Handler serves h with a server span per request (an RPC is one HTTP
// request, its span named /package.Service/Method) and a request id in its
// context. With tp nil only the request id is added. public marks an
// endpoint whose callers are not trusted to choose the trace: their trace
// context becomes a link of a new trace instead of its parent (the
// Workspace and Operator endpoints); ctrl's node endpoint and a node's data
// endpoint trust their callers, enrolled nodes and ctrl.
func Handler(h http.Handler, tp trace.TracerProvider, public bool) http.Handler {
	h = requestIDs(h)
	if tp == nil {
		return h
	}
	return otelhttp.NewHandler(h, "", otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(propagator),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), otelhttp.WithSpanNameFormatter(spanName),
		otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return public }))
}

// Transport is base with a client span per request that carries its trace
// context to the server; base itself when tp is nil.
func Transport(base http.RoundTripper, tp trace.TracerProvider) http.RoundTripper {
	if tp == nil {
		return base
	}
	return otelhttp.NewTransport(base, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(propagator),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), otelhttp.WithSpanNameFormatter(spanName))
}

// spanName is the RPC's procedure, /package.Service/Method: the path of
// every Connect, gRPC and gRPC-Web request.
func spanName(_ string, r *http.Request) string { return r.URL.Path }
