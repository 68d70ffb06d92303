package api

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
)

// interruptKey carries a node session's interrupt in its context.
type interruptKey struct{}

// interruptible lets the node session's handler end a Receive it waits in
// (interruptOf): Connect's streams have no way to, and ctrl ends sessions
// on its own (RetireNode, a revocation, a node gone silent) without
// keeping a goroutine a session waiting for the node's next message.
// Closing the request's body does it: net/http's HTTP/2 server breaks the
// body's pipe, so that a Read waiting in it, and every later one, fails
// at once; the response, with the handler's error, is still written.
func interruptible(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := r.Body
		interrupt := func() { _ = body.Close() }
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), interruptKey{}, interrupt)))
	})
}

// interruptOf is the interrupt interruptible put in ctx.
func interruptOf(ctx context.Context) (func(), error) {
	interrupt, ok := ctx.Value(interruptKey{}).(func())
	if !ok {
		return nil, connect.NewError(connect.CodeInternal, errors.New("the node session service is mounted without interruptible"))
	}
	return interrupt, nil
}
