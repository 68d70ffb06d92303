package node

import (
	"errors"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// nodeMetrics is the node agent's own Prometheus registry (not the client
// library's global one: tests run several nodes in one process), served
// on Config.MetricsListener when one is given. docs/METRICS.md lists the
// families.
type nodeMetrics struct {
	reg        *prometheus.Registry
	boot       prometheus.Histogram
	operations *prometheus.CounterVec
	opDuration *prometheus.HistogramVec
}

// bootBuckets span a VM's boot to its guest agent's first answer: well
// under a second with KVM, tens of seconds under TCG emulation.
var bootBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120}

// operationBuckets span a node operation: a block file made in
// milliseconds, a copy or an import of gigabytes in minutes.
var operationBuckets = []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// newNodeMetrics makes the registry; executions reports, at each scrape,
// how many executions run and how many of their guests fail the node's
// probe.
func newNodeMetrics(executions func() (running, failing int)) *nodeMetrics {
	m := &nodeMetrics{
		reg: prometheus.NewRegistry(),
		boot: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kibotos_node_vm_boot_seconds",
			Help:    "Time from a VM's start to its guest agent's first answer, for the starts that booted.",
			Buckets: bootBuckets,
		}),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kibotos_node_operations_total",
			Help: "Operations ctrl sent that this node applied (not those answered from its record of earlier ones), by operation (EnsureBlockFile, RemoveBlockFile, CopyBlockFile, ExportBlockFile, ImportBlockFile, StartExecution, StopExecution, ApplyNetworkPolicy) and Connect code (ok when none).",
		}, []string{"operation", "code"}),
		opDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kibotos_node_operation_duration_seconds",
			Help:    "Time this node took to apply an operation, by operation.",
			Buckets: operationBuckets,
		}, []string{"operation"}),
	}
	running := prometheus.NewDesc("kibotos_node_executions_running", "Executions whose VM runs on this node.", nil, nil)
	failing := prometheus.NewDesc("kibotos_node_guest_probes_failing", "Running executions whose guest did not answer the node's latest probe (not counting one coming back from a reset).", nil, nil)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.boot, m.operations, m.opDuration,
		executionCollector{running: running, failing: failing, read: executions},
	)
	return m
}

// booted observes one VM boot that took took. A nil *nodeMetrics (an
// agent a unit test wired by hand) counts nothing, as applied.
func (m *nodeMetrics) booted(took time.Duration) {
	if m != nil {
		m.boot.Observe(took.Seconds())
	}
}

// applied counts one operation applied, with its result's code.
func (m *nodeMetrics) applied(operation string, code uint32, took time.Duration) {
	if m == nil {
		return
	}
	label := "ok"
	if code != 0 {
		label = connect.Code(code).String()
	}
	m.operations.WithLabelValues(operation, label).Inc()
	m.opDuration.WithLabelValues(operation).Observe(took.Seconds())
}

type executionCollector struct {
	running, failing *prometheus.Desc
	read             func() (running, failing int)
}

func (c executionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.running; ch <- c.failing }

func (c executionCollector) Collect(ch chan<- prometheus.Metric) {
	running, failing := c.read()
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(running))
	ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, float64(failing))
}

// serveMetrics serves GET /metrics on ln until close is called. The
// listener has no authentication: the CLI opens it only on a loopback
// address (ListenMetrics).
func (m *nodeMetrics) serve(ln net.Listener, log interface{ Error(string, ...any) }) (close func()) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	return func() { _ = srv.Close() }
}

// ListenMetrics opens the node's metrics listener on addr, which must be
// a loopback address (127.0.0.1:9672, [::1]:0, localhost:9672): the
// listener has no authentication, so it serves only this host; put a
// proxy with TLS and authentication in front to scrape it from elsewhere.
func ListenMetrics(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if host != "localhost" {
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return nil, errors.New("the metrics listener has no authentication: give it a loopback address (127.0.0.1:PORT, [::1]:PORT, localhost:PORT)")
		}
	}
	return net.Listen("tcp", addr)
}
