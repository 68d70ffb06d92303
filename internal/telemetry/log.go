package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"

	"go.opentelemetry.io/otel/trace"
)

// Log formats (--log-format).
const (
	LogText = "text"
	LogJSON = "json"
)

// NewLogger logs at info and above to w, as logfmt-like text or one JSON
// object a line, and adds to every line the ids its context carries (the
// *Context methods: InfoContext, ...): ContextHandler.
func NewLogger(w io.Writer, format string) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	var h slog.Handler
	switch format {
	case LogText, "":
		h = slog.NewTextHandler(w, opts)
	case LogJSON:
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("log format %q: must be %s or %s", format, LogText, LogJSON)
	}
	return slog.New(ContextHandler(h)), nil
}

// ContextHandler is h adding to each record what its context says of the
// work it describes: request_id (WithRequestID), command_id
// (WithCommandID), the attributes of WithLogAttrs (an operation_id, say),
// and trace_id and span_id when the context holds a span (tracing on).
// The ids are put in the context once, where the work starts, rather than
// passed to every log call: a call logged with the context cannot forget
// them.
func ContextHandler(h slog.Handler) slog.Handler { return contextHandler{h} }

type contextHandler struct{ slog.Handler }

func (h contextHandler) Handle(ctx context.Context, r slog.Record) error {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		r.AddAttrs(slog.String("request_id", id))
	}
	if id, ok := ctx.Value(commandIDKey{}).(string); ok {
		r.AddAttrs(slog.String("command_id", id))
	}
	if attrs, ok := ctx.Value(logAttrsKey{}).([]slog.Attr); ok {
		r.AddAttrs(attrs...)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h contextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return contextHandler{h.Handler.WithAttrs(attrs)}
}

func (h contextHandler) WithGroup(name string) slog.Handler {
	return contextHandler{h.Handler.WithGroup(name)}
}

type (
	requestIDKey struct{}
	commandIDKey struct{}
	logAttrsKey  struct{}
	loggerKey    struct{}
)

// WithRequestID is ctx whose log lines carry request_id id.
func WithRequestID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is ctx's request id, "" when it has none.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// WithCommandID is ctx whose log lines carry command_id id.
func WithCommandID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, commandIDKey{}, id)
}

// WithLogAttrs is ctx whose log lines carry attrs too, after those ctx
// already adds: the ids of a unit of work below a command (a node
// operation's operation_id and instance_id), for the calls it makes.
func WithLogAttrs(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(logAttrsKey{}).([]slog.Attr)
	return context.WithValue(ctx, logAttrsKey{}, append(slices.Clip(prev), attrs...))
}

// WithLogger is ctx carrying log, for code that sees no component of its
// own to hold a logger: command admission, a function of a transaction
// called from every domain, logs what it admitted with the logger of the
// ctrl whose request (or background work) it runs in.
func WithLogger(ctx context.Context, log *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, log)
}

// Logger is the logger ctx carries (WithLogger), slog's default when none.
func Logger(ctx context.Context) *slog.Logger {
	if log, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return log
	}
	return slog.Default()
}

// HeaderRequestID answers each request's id, for a caller to quote.
const HeaderRequestID = "Kibotos-Request-Id"

// requestIDs gives each request an id in its context and its response
// header: the trace id when the request is traced (so a log line leads
// to its trace), else a random one.
func requestIDs(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := trace.SpanContextFromContext(r.Context()).TraceID()
		var s string
		if id.IsValid() {
			s = id.String()
		} else {
			var b [16]byte
			_, _ = rand.Read(b[:])
			s = hex.EncodeToString(b[:])
		}
		w.Header().Set(HeaderRequestID, s)
		h.ServeHTTP(w, r.WithContext(WithRequestID(r.Context(), s)))
	})
}
