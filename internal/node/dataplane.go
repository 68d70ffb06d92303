package node

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	"github.com/kibotos/kibotos/internal/guestchan"
	"github.com/kibotos/kibotos/internal/telemetry"
)

// DefaultDataListen is where the data endpoint listens unless
// Config.DataListen says otherwise.
const DefaultDataListen = "127.0.0.1:0"

// dataServer is the data endpoint, for ctrl only: h2c (and HTTP/1.1),
// every call authorised by the data token of the latest session welcome.
// It serves the node's own kibotos.node.v1.NodeDataService (what needs the
// host as well as the guest: a metrics sample) and relays the rest.
//
// It relays guest agent calls (kibotos.guest.v1.GuestAgentService) to the
// execution that the Kibotos-Instance header names, as an HTTP reverse
// proxy onto that VM's guest channel, instead of serving a node RPC per
// guest RPC: the guest agent's API grows (files, processes) without node
// code, and ctrl speaks the guest's API directly. The relay keeps the node
// in charge of what only it knows: the data token, which executions run,
// and Shutdown, which only StopExecution may call.
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
	// ctrl is the only caller, and a trusted one: its trace context is
	// the parent of the relay's spans.
	ownPath, own := nodev1connect.NewNodeDataServiceHandler(nodeData{a: a}, connect.WithInterceptors(telemetry.ErrorStatus()))
	relay := telemetry.Handler(&guestRelay{a: a, errors: connect.NewErrorWriter(), ownPath: ownPath, own: own}, a.cfg.TracerProvider, false)
	d.srv = &http.Server{Handler: relay, ReadHeaderTimeout: 10 * time.Second}
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

// guestRelay relays authorised guest agent calls to a running execution,
// and passes those of the node's own service (under ownPath) to own.
type guestRelay struct {
	a       *agent
	errors  *connect.ErrorWriter
	ownPath string
	own     http.Handler
}

// relayedPrefix is the URL path of the calls the relay passes on.
var relayedPrefix = "/" + guestv1connect.GuestAgentServiceName + "/"

func (g *guestRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := g.authorised(r); err != nil {
		g.errors.Write(w, r, err)
		return
	}
	if strings.HasPrefix(r.URL.Path, g.ownPath) {
		g.own.ServeHTTP(w, r)
		return
	}
	if err := g.relayed(r); err != nil {
		g.errors.Write(w, r, err)
		return
	}
	vm, err := g.a.vms.runningVM(r.Header.Get(guestchan.InstanceHeader))
	if err != nil {
		g.errors.Write(w, r, err)
		return
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			target, _ := url.Parse(guestchan.BaseURL)
			pr.SetURL(target)
			// The guest needs neither ctrl's token nor the routing header.
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del(guestchan.InstanceHeader)
		},
		Transport: vm.Channel(),
		// Streams: every message goes on as it arrives.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			g.errors.Write(w, r, connect.NewError(connect.CodeUnavailable, fmt.Errorf("the guest agent: %w", err)))
		},
	}
	proxy.ServeHTTP(w, r)
}

// authorised checks the data token.
func (g *guestRelay) authorised(r *http.Request) error {
	want := g.a.dataToken.Load()
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if want == nil || *want == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(*want)) != 1 {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("this call needs the data token of the node's current session"))
	}
	return nil
}

// relayed checks that the call is one the relay passes.
func (g *guestRelay) relayed(r *http.Request) error {
	if !strings.HasPrefix(r.URL.Path, relayedPrefix) {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("the data endpoint serves only %s and relays %s calls",
			nodev1connect.NodeDataServiceName, guestv1connect.GuestAgentServiceName))
	}
	if r.URL.Path == guestv1connect.GuestAgentServiceShutdownProcedure {
		return connect.NewError(connect.CodePermissionDenied, errors.New("only StopExecution shuts a guest down"))
	}
	return nil
}
