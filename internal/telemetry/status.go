package telemetry

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ErrorStatus marks the server span of an RPC that failed (Handler's span)
// with an error status and its code, as otelconnect would. otelhttp alone
// cannot: a gRPC error travels in trailers of a 200 response, and a
// Connect error in a 4xx, which HTTP's conventions do not count as a
// server's error. With tracing off the span does not record, and this
// costs one context lookup per failed call.
func ErrorStatus() connect.Interceptor { return errorStatus{} }

// codeKey is the attribute OpenTelemetry's RPC conventions give a Connect
// error's code.
const codeKey = attribute.Key("rpc.connect_rpc.error_code")

type errorStatus struct{}

func mark(ctx context.Context, err error) {
	if err == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	code := connect.CodeOf(err)
	var ce *connect.Error
	msg := err.Error()
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	span.SetAttributes(codeKey.String(code.String()))
	span.SetStatus(codes.Error, code.String()+": "+msg)
}

func (errorStatus) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if !req.Spec().IsClient {
			mark(ctx, err)
		}
		return res, err
	}
}

func (errorStatus) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (errorStatus) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		err := next(ctx, conn)
		mark(ctx, err)
		return err
	}
}
