package egress_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot/egress"
	"github.com/kibotos/kibotos/internal/node/netslot/egress/egresstest"
)

const (
	socks5      = ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5
	httpConnect = ctrlv1.EgressProtocol_EGRESS_PROTOCOL_HTTP_CONNECT
	serverName  = "egress.test"
)

// endpoint is a running test Egress and the spec that reaches it.
type endpoint struct {
	name string
	spec *ctrlv1.EgressSpec
	ca   *egresstest.CA
}

// endpoints are the four kinds under test: SOCKS5 and HTTP CONNECT, each
// plain and behind TLS, all with the right credentials.
func endpoints(t *testing.T) []endpoint {
	ca := egresstest.NewCA(t)
	cert := ca.Server(t, serverName)
	var out []endpoint
	for _, proto := range []ctrlv1.EgressProtocol{socks5, httpConnect} {
		for _, withTLS := range []bool{false, true} {
			var c *tls.Certificate
			if withTLS {
				c = &cert
			}
			addr := start(t, proto, c)
			out = append(out, endpoint{
				name: fmt.Sprintf("%v tls=%v", proto, withTLS),
				spec: &ctrlv1.EgressSpec{Protocol: proto, Endpoint: addr.String(), Tls: withTLS, ServerName: serverName,
					Username: egresstest.User, Password: egresstest.Password},
				ca: ca,
			})
		}
	}
	return out
}

func start(t *testing.T, proto ctrlv1.EgressProtocol, cert *tls.Certificate) netip.AddrPort {
	if proto == socks5 {
		return egresstest.SOCKS5(t, cert, egresstest.Loopback)
	}
	return egresstest.HTTPConnect(t, cert, egresstest.Loopback)
}

// uplink is the dial the node gives the dialer: it records every address
// it was asked to connect to.
type uplink struct {
	mu     sync.Mutex
	dialed []netip.AddrPort
}

func (u *uplink) dial(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	u.mu.Lock()
	u.dialed = append(u.dialed, dst)
	u.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, "tcp", dst.String())
}

func (u *uplink) addrs() []netip.AddrPort {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.dialed)
}

func allowAll(netip.Addr) error { return nil }

func newDialer(t *testing.T, spec *ctrlv1.EgressSpec, ca *egresstest.CA, up *uplink, check func(netip.Addr) error) *egress.Dialer {
	t.Helper()
	cfg := egress.Config{Spec: spec, Lookup: noLookup, Check: check, Dial: up.dial}
	if ca != nil {
		cfg.RootCAs = ca.Pool
	}
	d, err := egress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func noLookup(context.Context, string, string) ([]netip.Addr, error) {
	return nil, errors.New("no name lookups in this test")
}

func dial(d *egress.Dialer, dst netip.AddrPort) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.DialContext(ctx, dst)
}

// TestForwardCarriesBytes: through every kind of endpoint a connection
// reaches the destination and carries bytes both ways, half-close included.
func TestForwardCarriesBytes(t *testing.T) {
	dst := egresstest.Echo(t)
	for _, e := range endpoints(t) {
		t.Run(e.name, func(t *testing.T) {
			up := &uplink{}
			c, err := dial(newDialer(t, e.spec, e.ca, up, allowAll), dst)
			if err != nil {
				t.Fatalf("dial %s through %s: %v", dst, e.name, err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "hello through the egress"); err != nil {
				t.Fatal(err)
			}
			c.(interface{ CloseWrite() error }).CloseWrite()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(c)
			if err != nil || string(got) != "HELLO THROUGH THE EGRESS" {
				t.Fatalf("read %q, %v; want the echo", got, err)
			}
			if want := []netip.AddrPort{netip.MustParseAddrPort(e.spec.Endpoint)}; !slices.Equal(up.addrs(), want) {
				t.Fatalf("uplink dialled %v; want only the endpoint %v", up.addrs(), want)
			}
		})
	}
}

// TestFaults: each failure is the kind the reference names, and a
// destination the Egress cannot reach is not an Egress fault.
func TestFaults(t *testing.T) {
	dst := egresstest.Echo(t)
	other := egresstest.NewCA(t) // a CA the endpoints' certificates are not from
	for _, e := range endpoints(t) {
		t.Run(e.name, func(t *testing.T) {
			wrongPassword := cloneSpec(e.spec, func(s *ctrlv1.EgressSpec) { s.Password = "wrong" })
			expectKind(t, dialWith(t, wrongPassword, e.ca, dst), egress.AuthenticationFailed)
			// Without credentials a SOCKS5 server that requires them has no
			// method to accept (a handshake failure); an HTTP proxy answers
			// 407.
			noPassword := cloneSpec(e.spec, func(s *ctrlv1.EgressSpec) { s.Username, s.Password = "", "" })
			if e.spec.Protocol == socks5 {
				expectKind(t, dialWith(t, noPassword, e.ca, dst), egress.HandshakeFailed)
			} else {
				expectKind(t, dialWith(t, noPassword, e.ca, dst), egress.AuthenticationFailed)
			}
			_, err := dial(newDialer(t, e.spec, e.ca, &uplink{}, allowAll), egresstest.Closed(t))
			expectDestination(t, err)
			down := cloneSpec(e.spec, func(s *ctrlv1.EgressSpec) { s.Endpoint = egresstest.Closed(t).String() })
			expectKind(t, dialWith(t, down, e.ca, dst), egress.EndpointUnreachable)
			if !e.spec.Tls {
				withTLS := cloneSpec(e.spec, func(s *ctrlv1.EgressSpec) { s.Tls = true })
				expectKind(t, dialWith(t, withTLS, e.ca, dst), egress.HandshakeFailed)
				return
			}
			expectKind(t, dialWith(t, e.spec, other, dst), egress.TLSVerificationFailed)
			wrongName := cloneSpec(e.spec, func(s *ctrlv1.EgressSpec) { s.ServerName = "other.test" })
			expectKind(t, dialWith(t, wrongName, e.ca, dst), egress.TLSVerificationFailed)
		})
	}
}

// TestWrongProtocol: an endpoint speaking the other protocol is a
// handshake failure, not a destination result: at once when it answers
// garbage (SOCKS5 to an HTTP CONNECT dialer), at the dial's deadline when
// it waits for more (an HTTP server reading a SOCKS5 greeting).
func TestWrongProtocol(t *testing.T) {
	dst := egresstest.Echo(t)
	socksAddr := egresstest.SOCKS5(t, nil, egresstest.Loopback)
	httpAddr := egresstest.HTTPConnect(t, nil, egresstest.Loopback)
	for _, s := range []*ctrlv1.EgressSpec{
		{Protocol: httpConnect, Endpoint: socksAddr.String(), Username: egresstest.User, Password: egresstest.Password},
		{Protocol: socks5, Endpoint: httpAddr.String(), Username: egresstest.User, Password: egresstest.Password},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := newDialer(t, s, nil, &uplink{}, allowAll).DialContext(ctx, dst)
		cancel()
		if err == nil {
			_ = c.Close()
		}
		expectKind(t, err, egress.HandshakeFailed)
	}
}

// TestDialCheck: the endpoint's host name is resolved by the node, every
// address goes through the dial check, and one it refuses is never dialled;
// when it refuses them all the Egress is unreachable.
func TestDialCheck(t *testing.T) {
	dst := egresstest.Echo(t)
	proxy := egresstest.SOCKS5(t, nil, egresstest.Loopback)
	refused := netip.MustParseAddr("127.0.0.2")
	var looked []string
	lookup := func(_ context.Context, network, host string) ([]netip.Addr, error) {
		looked = append(looked, network+" "+host)
		return []netip.Addr{refused, proxy.Addr()}, nil
	}
	spec := &ctrlv1.EgressSpec{Protocol: socks5, Endpoint: net.JoinHostPort("egress.test", fmt.Sprint(proxy.Port())),
		Username: egresstest.User, Password: egresstest.Password}
	var checked []netip.Addr
	check := func(a netip.Addr) error {
		checked = append(checked, a)
		if a == refused {
			return errors.New("hard deny")
		}
		return nil
	}
	up := &uplink{}
	d, err := egress.New(egress.Config{Spec: spec, Lookup: lookup, Check: check, Dial: up.dial})
	if err != nil {
		t.Fatal(err)
	}
	c, err := dial(d, dst)
	if err != nil {
		t.Fatalf("dial through the checked address: %v", err)
	}
	_ = c.Close()
	if !slices.Equal(looked, []string{"ip egress.test"}) || !slices.Equal(checked, []netip.Addr{refused, proxy.Addr()}) {
		t.Fatalf("looked up %v, checked %v", looked, checked)
	}
	if !slices.Equal(up.addrs(), []netip.AddrPort{proxy}) {
		t.Fatalf("dialled %v; want only %v (%s was refused by the check)", up.addrs(), proxy, refused)
	}
	up2 := &uplink{}
	d, err = egress.New(egress.Config{Spec: spec, Lookup: lookup, Check: func(netip.Addr) error { return errors.New("hard deny") }, Dial: up2.dial})
	if err != nil {
		t.Fatal(err)
	}
	_, err = dial(d, dst)
	expectKind(t, err, egress.EndpointUnreachable)
	if len(up2.addrs()) != 0 {
		t.Fatalf("dialled %v though the check refused every address", up2.addrs())
	}
}

// TestNewRefuses: a spec the dialer cannot use fails at New.
func TestNewRefuses(t *testing.T) {
	up := &uplink{}
	for _, s := range []*ctrlv1.EgressSpec{
		{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_UNSPECIFIED, Endpoint: "127.0.0.1:1080"},
		{Protocol: socks5, Endpoint: "127.0.0.1"},
		{Protocol: socks5, Endpoint: "127.0.0.1:0"},
		{Protocol: httpConnect, Endpoint: ":3128"},
	} {
		if _, err := egress.New(egress.Config{Spec: s, Lookup: noLookup, Check: allowAll, Dial: up.dial}); err == nil {
			t.Errorf("New(%v) took it", s)
		}
	}
}

func dialWith(t *testing.T, spec *ctrlv1.EgressSpec, ca *egresstest.CA, dst netip.AddrPort) error {
	t.Helper()
	c, err := dial(newDialer(t, spec, ca, &uplink{}, allowAll), dst)
	if err == nil {
		_ = c.Close()
	}
	return err
}

func cloneSpec(s *ctrlv1.EgressSpec, edit func(*ctrlv1.EgressSpec)) *ctrlv1.EgressSpec {
	c := &ctrlv1.EgressSpec{Protocol: s.Protocol, Endpoint: s.Endpoint, Tls: s.Tls, ServerName: s.ServerName,
		Username: s.Username, Password: s.Password}
	edit(c)
	return c
}

func expectKind(t *testing.T, err error, want egress.Kind) {
	t.Helper()
	if got, ok := egress.KindOf(err); !ok || got != want {
		t.Errorf("error %v: kind %v (%v); want %v", err, got, ok, want)
	}
}

func expectDestination(t *testing.T, err error) {
	t.Helper()
	if _, fault := egress.KindOf(err); fault || !errors.Is(err, egress.ErrDestination) {
		t.Errorf("error %v: want ErrDestination and no Egress fault", err)
	}
}

// TestServerSpeaksFirst: a destination that writes before it reads (SSH,
// SMTP) reaches the guest whole, however its first bytes arrived with the
// Egress's reply.
func TestServerSpeaksFirst(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "SSH-2.0-banner\r\n")
			_ = c.Close()
		}
	}()
	dst := netip.MustParseAddrPort(l.Addr().String())
	for _, e := range endpoints(t) {
		c, err := dial(newDialer(t, e.spec, e.ca, &uplink{}, allowAll), dst)
		if err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		_ = c.Close()
		if string(got) != "SSH-2.0-banner\r\n" {
			t.Errorf("%s: read %q, %v", e.name, got, err)
		}
	}
}
