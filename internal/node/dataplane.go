package node

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
)

// DefaultDataListen is where the data endpoint listens unless
// Config.DataListen says otherwise.
const DefaultDataListen = "127.0.0.1:0"

// dataServer serves NodeDataService for ctrl on the data endpoint: h2c
// (and HTTP/1.1), every call authorised by the data token of the latest
// session welcome.
type dataServer struct {
	a   *agent
	srv *http.Server
	ln  net.Listener
	url string
}

func startDataServer(a *agent) (*dataServer, error) {
	listen := a.cfg.DataListen
	if listen == "" {
		listen = DefaultDataListen
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("data endpoint: %w", err)
	}
	d := &dataServer{a: a, ln: ln, url: a.cfg.DataEndpoint}
	if d.url == "" {
		d.url = advertisedURL(ln.Addr().(*net.TCPAddr))
	}
	mux := http.NewServeMux()
	mux.Handle(nodev1connect.NewNodeDataServiceHandler(d, connect.WithInterceptors(tokenAuth{a})))
	d.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	d.srv.Protocols = new(http.Protocols)
	d.srv.Protocols.SetHTTP1(true)
	d.srv.Protocols.SetUnencryptedHTTP2(true)
	go func() {
		if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("data endpoint stopped", "err", err)
		}
	}()
	a.log.Info("data endpoint listening", "url", d.url)
	return d, nil
}

// advertisedURL is the data endpoint's URL as ctrl should reach it: the
// listener's address, or the host name for a wildcard address.
func advertisedURL(addr *net.TCPAddr) string {
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		}
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, fmt.Sprint(addr.Port))}).String()
}

// close ends the server and every call in progress.
func (d *dataServer) close() {
	_ = d.srv.Close()
}

// tokenAuth admits calls bearing the current data token.
type tokenAuth struct{ a *agent }

func (t tokenAuth) check(h http.Header) error {
	want := t.a.dataToken.Load()
	got, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if want == nil || *want == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(*want)) != 1 {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("this call needs the data token of the node's current session"))
	}
	return nil
}

func (t tokenAuth) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := t.check(req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (t tokenAuth) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (t tokenAuth) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := t.check(conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// Exec proxies the guest agent's Exec stream of a running execution.
func (d *dataServer) Exec(ctx context.Context, req *connect.Request[nodev1.ExecRequest], out *connect.ServerStream[nodev1.ExecResponse]) error {
	if req.Msg.GetExec() == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("no exec request"))
	}
	vm, err := d.a.execs.runningVM(req.Msg.GetInstanceId())
	if err != nil {
		return err
	}
	in, err := vm.Agent().Exec(ctx, connect.NewRequest(req.Msg.GetExec()))
	if err != nil {
		return guestError(err)
	}
	defer in.Close()
	for in.Receive() {
		if err := out.Send(&nodev1.ExecResponse{Event: in.Msg()}); err != nil {
			return err
		}
	}
	if err := in.Err(); err != nil {
		return guestError(err)
	}
	return nil
}

// guestError passes the guest agent's own errors on, and names a channel
// failure for what it is.
func guestError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Code() != connect.CodeUnknown && ce.Code() != connect.CodeUnavailable {
		return err
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the guest agent: %w", err))
}
