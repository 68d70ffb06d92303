package node

import (
	"context"
	"log/slog"
	"path"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/telemetry"
)

// startOperation starts the span of one operation ctrl sent, a child of
// the ctrl command step that recorded it (the traceparent it carries), so
// that a command's trace shows what the node did for it. Its context's log
// lines carry the request_id and command_id of the command, and the
// operation_id.
func (a *agent) startOperation(ctx context.Context, cmd *nodev1.NodeCommand) (context.Context, trace.Span) {
	ctx = operationLog(ctx, cmd)
	if a.cfg.TracerProvider == nil {
		return ctx, tracenoop.Span{}
	}
	// The operation's kind: kibotos.node.v1.StartExecution names the span
	// "node StartExecution".
	kind := path.Ext(string(cmd.GetBody().MessageName()))
	if kind != "" {
		kind = kind[1:]
	}
	return a.cfg.TracerProvider.Tracer("github.com/kibotos/kibotos/internal/node").Start(
		telemetry.WithTraceparent(ctx, cmd.GetTraceparent()), "node "+kind,
		trace.WithAttributes(
			attribute.String("kibotos.operation_id", cmd.GetOperationId()),
			attribute.String("kibotos.command_id", cmd.GetCommandId()),
			attribute.String("kibotos.node_id", a.cfg.NodeID),
		))
}

// operationLog is ctx whose log lines carry cmd's request_id, command_id
// and operation_id.
func operationLog(ctx context.Context, cmd *nodev1.NodeCommand) context.Context {
	ctx = telemetry.WithRequestID(telemetry.WithCommandID(ctx, cmd.GetCommandId()), cmd.GetRequestId())
	return telemetry.WithLogAttrs(ctx, slog.String("operation_id", cmd.GetOperationId()))
}

// endOperation ends the span with the node's answer (nil: the agent
// stopped before it had one).
func endOperation(span trace.Span, res *nodev1.CommandResult) {
	defer span.End()
	if !span.IsRecording() || res == nil {
		return
	}
	code := connect.Code(res.GetCode())
	span.SetAttributes(attribute.Int("kibotos.operation.code", int(code)))
	if code != 0 {
		span.SetStatus(codes.Error, code.String()+": "+res.GetMessage())
	}
}
