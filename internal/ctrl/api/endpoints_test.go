package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// Registers every generated file, so the test sees all services.
	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	_ "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	_ "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/api"
	"github.com/kibotos/kibotos/internal/ctrl/catalog"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/dataplane"
	"github.com/kibotos/kibotos/internal/ctrl/egress"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/pool"
	"github.com/kibotos/kibotos/internal/ctrl/session"
	"github.com/kibotos/kibotos/internal/ctrl/transfer"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// newBackend is the real domain on a SQLite file.
func newBackend(t *testing.T) *api.Backend {
	t.Helper()
	st := storetest.Open(t, storetest.SQLiteDSN(t))
	runner := command.NewRunner(st, "test", slog.Default())
	var pools *pool.Service
	f := fleet.New(st, runner, slog.Default(), fleet.DefaultConfig, fleet.Deps{Moves: func(f *fleet.Fleet) fleet.Moves {
		pools = pool.New(st, runner, f, slog.Default(), 0)
		return pools
	}})
	vols := volume.New(st, f, runner, volume.DefaultProfile)
	ws := workspace.New(st, f, vols, runner)
	cat, err := catalog.New(st, t.TempDir(), runner, fleet.DefaultConfig, slog.Default()) // as ctrl's server wires it
	if err != nil {
		t.Fatal(err)
	}
	transfers, err := transfer.New(st, transfer.Config{Dir: t.TempDir()}, transfer.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return &api.Backend{Fleet: f, Volumes: vols, Workspaces: ws, Processes: dataplane.NewProcesses(st, ws, f, nil), Sessions: session.New(st, ""), Catalog: cat,
		Pools: pools, Egresses: egress.New(st, runner), Transfers: transfers}
}

// methodsOf lists "/pkg.Service/Method" for every method of every service
// of pkg, or of the one service pkg names in full.
func methodsOf(t *testing.T, pkg string) []string {
	t.Helper()
	var paths []string
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if string(fd.Package()) != pkg && !strings.HasPrefix(pkg, string(fd.Package())+".") {
			return true
		}
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			if pkg != string(fd.Package()) && string(sd.FullName()) != pkg {
				continue
			}
			for j := 0; j < sd.Methods().Len(); j++ {
				paths = append(paths, "/"+string(sd.FullName())+"/"+string(sd.Methods().Get(j).Name()))
			}
		}
		return true
	})
	if len(paths) == 0 {
		t.Fatalf("no services registered for %s", pkg)
	}
	return paths
}

// newServer serves h over HTTP/2 with TLS, as gRPC clients and bidi
// streams need.
func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// post sends an empty Connect JSON request (a unary call; for streaming
// methods the server answers 415, which is not 404 either).
func post(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// unmounted is the answer of a path no service is mounted at: the mux's own
// 404, not a Connect not_found (which is a 404 too).
func unmounted(code int, body string) bool {
	return code == http.StatusNotFound && strings.TrimSpace(body) == "404 page not found"
}

func TestOperatorServicesAreNeverOnTheWorkspaceEndpoint(t *testing.T) {
	ws := newServer(t, api.NewWorkspaceHandler(newBackend(t)))
	for _, pkg := range []string{"kibotos.operator.v1", "kibotos.node.v1"} {
		for _, path := range methodsOf(t, pkg) {
			if code, body := post(t, ws, path); !unmounted(code, body) {
				t.Errorf("workspace endpoint answered %s with %d %s, want a plain 404", path, code, body)
			}
		}
	}
}

func TestWorkspaceServicesAreNeverOnTheOperatorEndpoint(t *testing.T) {
	op := newServer(t, api.NewOperatorHandler(newBackend(t)))
	for _, path := range methodsOf(t, "kibotos.ctrl.v1") {
		if code, body := post(t, op, path); !unmounted(code, body) {
			t.Errorf("operator endpoint answered %s with %d %s, want a plain 404", path, code, body)
		}
	}
}

// Every RPC of an endpoint's packages is mounted there: an empty request
// gets a Connect error, not a 404, and one not built yet answers
// unimplemented with a message naming it.
func TestEveryMethodIsMountedAndUnbuiltOnesSaySo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.Handler
		pkg     string
	}{
		{"workspace", api.NewWorkspaceHandler(newBackend(t)), "kibotos.ctrl.v1"},
		{"operator", api.NewOperatorHandler(newBackend(t)), "kibotos.operator.v1"},
		// NodeDataService is the nodes' own, which ctrl calls.
		{"node", api.NewNodeHandler(newBackend(t)), "kibotos.node.v1.NodeSessionService"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.handler)
			for _, path := range methodsOf(t, tc.pkg) {
				code, body := post(t, srv, path)
				switch {
				case code == http.StatusNotImplemented:
					name := strings.ReplaceAll(strings.TrimPrefix(path, "/"), "/", ".")
					if !strings.Contains(body, name+" is not implemented") {
						t.Errorf("%s: body %q does not name the method", path, body)
					}
				case code == http.StatusUnsupportedMediaType:
					// A streaming method refuses a unary Connect request: it is mounted.
				case code == http.StatusOK:
					// Built, and an empty request is a valid one (a list).
				case !strings.Contains(body, `"code":`):
					t.Errorf("%s: status %d (%s), want a Connect answer", path, code, body)
				}
			}
		})
	}
}

func TestHealthAndReflectionOnEveryEndpoint(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.Handler
		pkg     string
	}{
		{"workspace", api.NewWorkspaceHandler(newBackend(t)), "kibotos.ctrl.v1."},
		{"operator", api.NewOperatorHandler(newBackend(t)), "kibotos.operator.v1."},
		{"node", api.NewNodeHandler(newBackend(t)), "kibotos.node.v1."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.handler)
			code, body := post(t, srv, "/grpc.health.v1.Health/Check")
			if code != http.StatusOK || !strings.Contains(body, "SERVING") {
				t.Errorf("health: %d %s", code, body)
			}
			// Reflection is a bidi stream: ask with the real reflection client.
			stream := grpcreflect.NewClient(srv.Client(), srv.URL).NewStream(context.Background())
			defer stream.Close()
			names, err := stream.ListServices()
			if err != nil {
				t.Fatalf("reflection: %v", err)
			}
			if len(names) == 0 {
				t.Error("reflection lists no service")
			}
			for _, n := range names {
				if !strings.HasPrefix(string(n), tc.pkg) {
					t.Errorf("reflection on the %s endpoint lists %s", tc.name, n)
				}
				if _, err := stream.FileContainingSymbol(n); err != nil {
					t.Errorf("reflection cannot describe %s: %v", n, err)
				}
			}
		})
	}
}

// A small answer is not gzipped even to a caller that accepts gzip; a
// large one is (the threshold is 1 KiB).
func TestOnlyLargeMessagesAreCompressed(t *testing.T) {
	srv := newServer(t, api.NewWorkspaceHandler(newBackend(t)))
	list := func() (encoding string, size int) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/kibotos.ctrl.v1.EgressService/ListEgresses", strings.NewReader(""))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/proto")
		req.Header.Set("Accept-Encoding", "gzip") // set by hand: the client then leaves the body as sent
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("ListEgresses: %d %s", res.StatusCode, body)
		}
		return res.Header.Get("Content-Encoding"), len(body)
	}
	if enc, n := list(); enc != "" {
		t.Errorf("an empty list (%d bytes) was sent with Content-Encoding %q", n, enc)
	}
	client := ctrlv1connect.NewEgressServiceClient(srv.Client(), srv.URL)
	for i := range 40 {
		if _, err := client.CreateEgress(context.Background(), connect.NewRequest(&ctrlv1.CreateEgressRequest{
			Command: &ctrlv1.CommandMetadata{CommandId: fmt.Sprintf("egress-%d", i)},
			Spec:    &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: fmt.Sprintf("proxy-%d.example.test:1080", i)},
		})); err != nil {
			t.Fatal(err)
		}
	}
	if enc, n := list(); enc != "gzip" {
		t.Errorf("a list of 40 Egresses (%d bytes as sent) was sent with Content-Encoding %q, want gzip", n, enc)
	}
}
