// Package metrics is ctrl's Prometheus instrumentation: one registry per
// ctrl Server (tests start several in one process, so nothing goes to the
// client library's global registry), the RPC interceptor every endpoint
// runs, the command counters, and the collectors that read their values at
// scrape time. docs/METRICS.md lists the families.
//
// Every method of a nil *Metrics does nothing, so code built without
// metrics (unit tests that wire a domain by hand) needs no stand-in.
package metrics

import (
	"context"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is one ctrl's registry and the instruments it updates as it runs.
type Metrics struct {
	reg *prometheus.Registry

	rpcRequests *prometheus.CounterVec
	rpcDuration *prometheus.HistogramVec

	commandsAdmitted *prometheus.CounterVec
	commandsFinished *prometheus.CounterVec
	commandDuration  *prometheus.HistogramVec

	placements        *prometheus.CounterVec
	placementRefusals *prometheus.CounterVec
	batchWrites       prometheus.Histogram
	batchCommit       prometheus.Histogram
}

// batchBuckets span a group commit of node observations: one write at
// low load, up to maxWriteBatch (256) when many nodes report at once.
var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

// commitBuckets span one batch's transaction, from a fast local SQLite
// commit to a database that stalls.
var commitBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// commandBuckets span a command's life from admission to its final state:
// a Volume made on a node in a tenth of a second, an export or a first
// boot that fetches a template in minutes.
var commandBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// New makes a registry holding the Go runtime's and the process's
// collectors and ctrl's own instruments.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		rpcRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kibotos_rpc_requests_total",
			Help: "RPCs served, by service, method and Connect code (ok when none), on every endpoint. A stream counts once, when it ends.",
		}, []string{"service", "method", "code"}),
		rpcDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kibotos_rpc_duration_seconds",
			Help:    "Time to serve an RPC, from its handler's start to its end; a stream's whole life.",
			Buckets: prometheus.DefBuckets,
		}, []string{"service", "method"}),
		commandsAdmitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kibotos_commands_admitted_total",
			Help: "Commands admitted by this ctrl (a replay is not), by kind; counted once the admitting transaction committed.",
		}, []string{"kind"}),
		commandsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kibotos_commands_finished_total",
			Help: "Commands that reached a final state on this ctrl, by kind and outcome (succeeded, failed).",
		}, []string{"kind", "outcome"}),
		commandDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kibotos_command_duration_seconds",
			Help:    "Time from a command's admission to its final state, by kind (zero for one final at admission).",
			Buckets: commandBuckets,
		}, []string{"kind"}),
		placements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kibotos_placements_total",
			Help: "Placements of an execution (a Workspace's create or start) decided by this ctrl, by outcome (placed, refused); counted once the placing transaction committed.",
		}, []string{"outcome"}),
		placementRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kibotos_placement_refusals_total",
			Help: "Placements refused, by who refused (nodes: no node took it; layer_pool: the writable layer's pool had no room) and the failure reason (resource_exhausted, unavailable).",
		}, []string{"by", "reason"}),
		batchWrites: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kibotos_observation_batch_writes",
			Help:    "Node registration writes (observations, clock measurements) committed together in one transaction (group commit).",
			Buckets: batchBuckets,
		}),
		batchCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kibotos_observation_batch_commit_seconds",
			Help:    "Time one batch of node registration writes took, from its transaction's start to its commit (retries included).",
			Buckets: commitBuckets,
		}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.rpcRequests, m.rpcDuration, m.commandsAdmitted, m.commandsFinished, m.commandDuration,
		m.placements, m.placementRefusals, m.batchWrites, m.batchCommit,
	)
	return m
}

// Register adds collectors that read their values at scrape time (the
// node sessions a Fleet holds, the Workspaces by state).
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Handler serves the registry in Prometheus's text exposition format. A
// collector that fails (the database did not answer) is left out of that
// scrape and counted in promhttp_metric_handler_errors_total; the rest are
// served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError})
}

// Gatherer is the registry, for tests that read it directly.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Outcomes of kibotos_commands_finished_total.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
)

// CommandAdmitted counts a command of kind admitted (its transaction
// committed).
func (m *Metrics) CommandAdmitted(kind string) {
	if m == nil {
		return
	}
	m.commandsAdmitted.WithLabelValues(kind).Inc()
}

// CommandFinished counts a command of kind that reached its final state,
// took since its admission.
func (m *Metrics) CommandFinished(kind string, failed bool, took time.Duration) {
	if m == nil {
		return
	}
	outcome := OutcomeSucceeded
	if failed {
		outcome = OutcomeFailed
	}
	m.commandsFinished.WithLabelValues(kind, outcome).Inc()
	m.commandDuration.WithLabelValues(kind).Observe(max(took, 0).Seconds())
}

// Who refused a placement, in kibotos_placement_refusals_total's by label.
const (
	RefusedByNodes     = "nodes"
	RefusedByLayerPool = "layer_pool"
)

// Placement counts one placement decision: placed when by is empty,
// refused by by for reason (a FailureReason's name) otherwise.
func (m *Metrics) Placement(by, reason string) {
	if m == nil {
		return
	}
	if by == "" {
		m.placements.WithLabelValues("placed").Inc()
		return
	}
	m.placements.WithLabelValues("refused").Inc()
	m.placementRefusals.WithLabelValues(by, strings.ToLower(strings.TrimPrefix(reason, "FAILURE_REASON_"))).Inc()
}

// ObservationBatch counts one batch of node registration writes,
// committed or failed, that took took.
func (m *Metrics) ObservationBatch(writes int, took time.Duration) {
	if m == nil {
		return
	}
	m.batchWrites.Observe(float64(writes))
	m.batchCommit.Observe(took.Seconds())
}

type contextKey struct{}

// NewContext carries m in ctx, for code that sees no Server: command
// admission, a function of a transaction called from every domain, finds
// ctrl's metrics in the transaction's context. The RPC interceptor puts
// them in every call's context, and ctrl in its background work's.
func NewContext(ctx context.Context, m *Metrics) context.Context {
	return context.WithValue(ctx, contextKey{}, m)
}

// FromContext is the metrics ctx carries, or nil (whose methods do
// nothing).
func FromContext(ctx context.Context) *Metrics {
	m, _ := ctx.Value(contextKey{}).(*Metrics)
	return m
}

// Interceptor counts and times every RPC, unary and streaming, and carries
// m in the call's context. Put it first among an endpoint's interceptors,
// so that calls the others refuse (authentication) are counted too. A
// call refused before any interceptor runs (auth.Gate, reading the
// headers only) is not.
func (m *Metrics) Interceptor() connect.Interceptor { return interceptor{m} }

type interceptor struct{ m *Metrics }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		start := time.Now()
		res, err := next(NewContext(ctx, i.m), req)
		i.m.observe(req.Spec().Procedure, err, time.Since(start))
		return res, err
	}
}

func (i interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(NewContext(ctx, i.m), conn)
		i.m.observe(conn.Spec().Procedure, err, time.Since(start))
		return err
	}
}

func (m *Metrics) observe(procedure string, err error, took time.Duration) {
	service, method := splitProcedure(procedure)
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	m.rpcRequests.WithLabelValues(service, method, code).Inc()
	m.rpcDuration.WithLabelValues(service, method).Observe(took.Seconds())
}

// splitProcedure splits "/kibotos.ctrl.v1.VolumeService/CreateVolume" into
// its service and method.
func splitProcedure(procedure string) (service, method string) {
	procedure = strings.TrimPrefix(procedure, "/")
	if i := strings.LastIndexByte(procedure, '/'); i >= 0 {
		return procedure[:i], procedure[i+1:]
	}
	return procedure, ""
}
