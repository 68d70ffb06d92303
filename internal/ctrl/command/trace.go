package command

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/telemetry"
)

// startStep is ctx for one step of c: its log lines carry the command_id
// and the request_id of the request that admitted it, and its span (when tracing is on) is a child of the request that
// admitted c, so the trace of a create goes on after the create answered.
func startStep(ctx context.Context, c *store.CommandRow) (context.Context, trace.Span) {
	ctx = telemetry.WithRequestID(telemetry.WithCommandID(ctx, c.GetCommandId()), c.GetRequestId())
	parent := telemetry.WithTraceparent(ctx, c.GetTraceparent())
	return telemetry.Tracer(ctx, "github.com/kibotos/kibotos/internal/ctrl/command").Start(parent, "command "+c.GetKind(),
		trace.WithAttributes(
			attribute.String("kibotos.command_id", c.GetCommandId()),
			attribute.String("kibotos.command.kind", c.GetKind()),
			attribute.String("kibotos.target_id", c.GetTargetId()),
			attribute.Int64("kibotos.command.attempt", c.Attempts),
		))
}

// begin runs an Effect.Begin for c, the first step of c begun in its
// admission, under a span of its own named as c's steps are, a child of
// the admitting request. The node operations it records carry that span
// (OperationTraceparent), so the node's span of an operation sits under a
// step of the command whichever way its session sends it: handed over by
// the step that goes on from the admission, or read from the database
// before that step ran.
func (o *claimOffer) begin(ctx context.Context, c *storev1.Command, begin func(*storev1.Command) (any, error)) (any, error) {
	ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("github.com/kibotos/kibotos/internal/ctrl/command").Start(ctx, "command "+c.GetKind(),
		trace.WithAttributes(
			attribute.String("kibotos.command_id", c.GetCommandId()),
			attribute.String("kibotos.command.kind", c.GetKind()),
			attribute.String("kibotos.target_id", c.GetTargetId()),
			attribute.Bool("kibotos.command.begun_at_admission", true),
		))
	defer span.End()
	o.traceparent = telemetry.Traceparent(ctx)
	defer func() { o.traceparent = "" }()
	begun, err := begin(c)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return begun, err
}

// OperationTraceparent is the W3C traceparent a node operation recorded
// in tx carries: the span of the Effect.Begin that records it in an
// admission, else tx's own (a runner step's).
func OperationTraceparent(tx *store.Tx) string {
	if adm, ok := tx.Context().Value(admissionsKey{}).(*admissions); ok && adm.offer != nil && adm.offer.traceparent != "" {
		return adm.offer.traceparent
	}
	return telemetry.Traceparent(tx.Context())
}

// endStep records how the step ended on its span: the command's state
// after it, or the error that makes the runner retry it.
func endStep(span trace.Span, w *Work, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("kibotos.command.state", w.c.GetState().String()))
	switch {
	case err != nil:
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	case w.c.GetState() == storev1.CommandState_COMMAND_STATE_FAILED:
		span.SetStatus(codes.Error, w.c.GetFailure().GetMessage())
	}
}
