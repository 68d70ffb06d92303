package auth

import (
	"context"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// Check decides from a call's procedure and headers alone whether it may
// go on; a non-nil error is the Connect error the caller gets.
type Check func(ctx context.Context, procedure string, header http.Header) error

// open are the services every endpoint serves without authentication, for
// load balancers and grpcurl.
var open = []string{"/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"}

// Gate refuses a call check refuses before anything reads its body.
// Connect reads a unary request's message before its interceptors run, so
// checking credentials only there let a caller without any make ctrl read
// a body of any size. The interceptors still check every call in full;
// Gate answers in the request's protocol (Connect, gRPC, gRPC-Web).
//
// A path next does not serve (next is a router, such as an
// *http.ServeMux, with no pattern for it) is next's to answer: its 404
// reads no body either, and says the service is not mounted here
// whatever the credential.
func Gate(next http.Handler, check Check) http.Handler {
	errs := connect.NewErrorWriter()
	mux, _ := next.(router)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isOpen(r.URL.Path) && (mux == nil || routed(mux, r)) {
			if err := check(r.Context(), r.URL.Path, r.Header); err != nil {
				_ = errs.Write(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// router is what an *http.ServeMux says of a request: the pattern
// serving it, "" for none.
type router interface {
	Handler(r *http.Request) (h http.Handler, pattern string)
}

func routed(mux router, r *http.Request) bool {
	_, pattern := mux.Handler(r)
	return pattern != ""
}

func isOpen(path string) bool {
	for _, prefix := range open {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}

// HeaderCheck is NewInterceptor's check of an API key of scope, for Gate.
func HeaderCheck(keys *Keyring, scope Scope) Check {
	i := &interceptor{keys: keys, scope: scope}
	return func(_ context.Context, _ string, header http.Header) error { return i.check(header) }
}
