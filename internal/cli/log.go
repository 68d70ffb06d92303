package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/kibotos/kibotos/internal/telemetry"
)

// logFlags are the log flags of every long-running process (ctrl, node,
// dev, sim).
type logFlags struct{ format string }

func (f *logFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.format, "log-format", telemetry.LogText, "log lines as text (key=value) or json (one object a line); both carry request_id and command_id where the work has them")
}

// logger logs to w in the chosen format; an unknown format is an error
// naming the flag.
func (f *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	log, err := telemetry.NewLogger(w, f.format)
	if err != nil {
		return nil, fmt.Errorf("--log-format: %w", err)
	}
	return log, nil
}

// newLogger is the text logger of the commands without --log-format.
func newLogger(w io.Writer) *slog.Logger {
	log, _ := telemetry.NewLogger(w, telemetry.LogText)
	return log
}

// obsFlags are logFlags and the trace export of the processes that serve
// (ctrl, node, dev).
type obsFlags struct {
	logFlags
	otlpEndpoint string
}

func (f *obsFlags) register(c *cobra.Command) {
	f.logFlags.register(c)
	c.Flags().StringVar(&f.otlpEndpoint, "otlp-endpoint", "", "export traces over OTLP/HTTP to this collector URL (http://HOST:4318; /v1/traces is added when no path is given); default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, and with neither no traces")
}

// tracing starts the trace export of service, nil when none is configured.
func (f *obsFlags) tracing(ctx context.Context, service string) (*telemetry.Tracing, error) {
	tr, err := telemetry.StartTracing(ctx, service, f.otlpEndpoint)
	if err != nil {
		return nil, fmt.Errorf("--otlp-endpoint: %w", err)
	}
	return tr, nil
}

// flushTracing exports the spans still buffered as the process ends.
func flushTracing(tr *telemetry.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		log.Warn("traces not exported at exit", "err", err)
	}
}
