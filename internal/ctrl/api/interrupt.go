package api

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// interruptKey carries a node session's interrupt in its context.
type interruptKey struct{}

// interruptible lets the node session's handler end a Receive it waits in
// (interruptOf): Connect's streams have no way to, and ctrl ends sessions
// on its own (RetireNode, a revocation, a node gone silent) without
// keeping a goroutine a session waiting for the node's next message.
// A read deadline in the past does it (http.ResponseController): on
// HTTP/2 the server fails the stream's body at once, on HTTP/1 the
// connection's read, so that the Read waiting in the body, and every
// later one, fails; the response, with the handler's error, is still
// written. An interrupt that comes once the handler returned does
// nothing: the writer may not be used then.
func interruptible(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var mu sync.Mutex
		done := false
		rc := http.NewResponseController(w)
		interrupt := func() {
			mu.Lock()
			defer mu.Unlock()
			if !done {
				_ = rc.SetReadDeadline(time.Now()) // net/http's writers all support it
			}
		}
		defer func() {
			mu.Lock()
			done = true
			mu.Unlock()
		}()
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
