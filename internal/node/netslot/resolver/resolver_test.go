package resolver_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot/egress"
	"github.com/kibotos/kibotos/internal/node/netslot/egress/egresstest"
	"github.com/kibotos/kibotos/internal/node/netslot/policy"
	"github.com/kibotos/kibotos/internal/node/netslot/resolver"
	"github.com/kibotos/kibotos/internal/node/netslot/resolver/resolvertest"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
	"github.com/kibotos/kibotos/internal/testenv/testnet"
)

const (
	udp   = ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP
	tcp   = ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP
	dot   = ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TLS
	https = ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS
)

var (
	upstreamIP = netip.MustParseAddr("203.0.113.53")
	privateIP  = netip.MustParseAddr("10.1.2.53") // in the test internet, behind the hard deny
	proxyIP    = netip.MustParseAddr("198.51.100.1")
)

// world is a test internet with a public and a private upstream and the
// node's uplink in it.
type world struct {
	inet    *testnet.Internet
	up      *userstack.HostUplink
	public  *resolvertest.Server
	private *resolvertest.Server
}

func newWorld(t *testing.T) *world {
	inet := testnet.New(t, upstreamIP, privateIP, proxyIP)
	return &world{inet: inet, up: inet.Uplink(),
		public: resolvertest.Start(t, inet, upstreamIP), private: resolvertest.Start(t, inet, privateIP)}
}

// specs are the four protocols' specs for s: tls and https verified
// against server_name, or against the host (a name, looked up) when it is
// empty.
func specs(s *resolvertest.Server) map[string]*ctrlv1.ResolverSpec {
	return map[string]*ctrlv1.ResolverSpec{
		"udp":              {Protocol: udp, Address: s.UDP.String()},
		"tcp":              {Protocol: tcp, Address: s.TCP.String()},
		"tls":              {Protocol: dot, Address: s.TLS.String(), ServerName: resolvertest.ServerName},
		"tls by host name": {Protocol: dot, Address: net.JoinHostPort(resolvertest.ServerName, itoa(s.TLS.Port()))},
		"https":            {Protocol: https, Url: s.URL, ServerName: resolvertest.ServerName},
		"https by host":    {Protocol: https, Url: s.NamedURL},
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

// counting is a Path that records what it was asked to dial and which of
// the connections it made are still open.
type counting struct {
	resolver.Path
	mu   sync.Mutex
	tcp  []netip.AddrPort
	udp  []netip.AddrPort
	open int
}

func (c *counting) DialTCP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	c.mu.Lock()
	c.tcp = append(c.tcp, dst)
	c.mu.Unlock()
	return c.track(c.Path.DialTCP(ctx, dst))
}

func (c *counting) DialUDP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	c.mu.Lock()
	c.udp = append(c.udp, dst)
	c.mu.Unlock()
	return c.track(c.Path.DialUDP(ctx, dst))
}

func (c *counting) track(conn net.Conn, err error) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.open++
	c.mu.Unlock()
	return &trackedConn{Conn: conn, c: c}, nil
}

func (c *counting) stillOpen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

type trackedConn struct {
	net.Conn
	c    *counting
	once sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.c.mu.Lock()
		t.c.open--
		t.c.mu.Unlock()
	})
	return t.Conn.Close()
}

func (c *counting) dials() (tcp, udp int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tcp), len(c.udp)
}

func allowAll(netip.Addr) error { return nil }

func newUpstream(t *testing.T, spec *ctrlv1.ResolverSpec, path resolver.Path, s *resolvertest.Server, timeout time.Duration) *resolver.Upstream {
	t.Helper()
	u, err := resolver.New(resolver.Config{Spec: spec, Path: path, RootCAs: s.CA.Pool,
		Lookup: resolvertest.Lookup(s.UDP.Addr()), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	return u
}

func ask(u *resolver.Upstream, name string, qtype uint16) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	return u.Exchange(context.Background(), q)
}

// expectA: the answer is the server's A record.
func expectA(t *testing.T, reply *dns.Msg, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if len(reply.Answer) != 1 {
		t.Fatalf("answer %v; want one A", reply)
	}
	a, ok := reply.Answer[0].(*dns.A)
	if !ok || netip.MustParseAddr(a.A.String()) != resolvertest.A {
		t.Fatalf("answer %v; want %v", reply.Answer[0], resolvertest.A)
	}
}

// TestProtocolsDirect: every protocol answers on the direct path, NXDOMAIN
// is a result, later queries reuse the first's connection or socket, and
// Close closes it.
func TestProtocolsDirect(t *testing.T) {
	w := newWorld(t)
	for name, spec := range specs(w.public) {
		t.Run(name, func(t *testing.T) {
			path := &counting{Path: resolver.Direct(w.up, allowAll)}
			u := newUpstream(t, spec, path, w.public, 5*time.Second)
			reply, err := ask(u, resolvertest.Name, dns.TypeA)
			expectA(t, reply, err)
			reply, err = ask(u, resolvertest.Name, dns.TypeTXT)
			if err != nil || len(reply.Answer) != 1 || reply.Answer[0].(*dns.TXT).Txt[0] != resolvertest.TXT {
				t.Fatalf("TXT: %v, %v", reply, err)
			}
			reply, err = ask(u, "nope.upstream.test.", dns.TypeA)
			if err != nil || reply.Rcode != dns.RcodeNameError {
				t.Fatalf("NXDOMAIN: %v, %v; want the answer, no error", reply, err)
			}
			if tcpDials, udpDials := path.dials(); tcpDials+udpDials != 1 {
				t.Errorf("three queries dialled tcp %d, udp %d times; want one connection or socket reused", tcpDials, udpDials)
			}
			_ = u.Close()
			for deadline := time.Now().Add(5 * time.Second); path.stillOpen() != 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d connections still open after Close", path.stillOpen())
				}
			}
		})
	}
}

// TestServFailIsAResult: an upstream answering SERVFAIL is answered, for
// every protocol.
func TestServFailIsAResult(t *testing.T) {
	w := newWorld(t)
	w.public.SetMode(resolvertest.ServFail)
	for name, spec := range specs(w.public) {
		reply, err := ask(newUpstream(t, spec, resolver.Direct(w.up, allowAll), w.public, 5*time.Second), resolvertest.Name, dns.TypeA)
		if err != nil || reply.Rcode != dns.RcodeServerFailure {
			t.Errorf("%s: %v, %v; want SERVFAIL and no error", name, reply, err)
		}
	}
}

// TestUDPTruncatedFallsBackToTCP: an answer too long for a datagram comes
// whole over tcp from the same address.
func TestUDPTruncatedFallsBackToTCP(t *testing.T) {
	w := newWorld(t)
	path := &counting{Path: resolver.Direct(w.up, allowAll)}
	u := newUpstream(t, &ctrlv1.ResolverSpec{Protocol: udp, Address: w.public.UDP.String()}, path, w.public, 5*time.Second)
	q := new(dns.Msg)
	q.SetQuestion(resolvertest.BigName, dns.TypeTXT)
	reply, err := u.Exchange(context.Background(), q)
	if err != nil || reply.Truncated || len(reply.Answer) != 8 {
		t.Fatalf("big answer: %v, %v; want 8 TXT records, not truncated", reply, err)
	}
	path.mu.Lock()
	defer path.mu.Unlock()
	want := []netip.AddrPort{netip.AddrPortFrom(upstreamIP, w.public.UDP.Port())}
	if !slices.Equal(path.udp, want) || !slices.Equal(path.tcp, want) {
		t.Fatalf("dialled udp %v, tcp %v; want %v for both", path.udp, path.tcp, want)
	}
}

func expectKind(t *testing.T, what string, err error, want resolver.Kind) {
	t.Helper()
	if got, ok := resolver.KindOf(err); !ok || got != want {
		t.Errorf("%s: error %v: kind %v (%v); want %v", what, err, got, ok, want)
	}
}

// TestFaults: each way an upstream fails is the kind the reference names.
func TestFaults(t *testing.T) {
	w := newWorld(t)
	direct := resolver.Direct(w.up, allowAll)
	fail := func(mode resolvertest.Mode, timeout time.Duration, want func(name string) (resolver.Kind, bool)) {
		t.Helper()
		w.public.SetMode(mode)
		for name, spec := range specs(w.public) {
			kind, ok := want(name)
			if !ok {
				continue
			}
			_, err := ask(newUpstream(t, spec, direct, w.public, timeout), resolvertest.Name, dns.TypeA)
			expectKind(t, name, err, kind)
		}
	}
	isTLS := func(name string) bool { return name != "udp" && name != "tcp" }
	fail(resolvertest.Silent, 300*time.Millisecond, func(string) (resolver.Kind, bool) { return resolver.UpstreamTimeout, true })
	fail(resolvertest.WrongCert, 5*time.Second, func(n string) (resolver.Kind, bool) { return resolver.TLSVerificationFailed, isTLS(n) })
	fail(resolvertest.HTTPError, 5*time.Second, func(n string) (resolver.Kind, bool) {
		return resolver.HTTPErrorStatus, n == "https" || n == "https by host"
	})
	w.public.SetMode(resolvertest.Answer)
	// A CA the server's certificate is not from.
	for name, spec := range specs(w.public) {
		if !isTLS(name) {
			continue
		}
		u, err := resolver.New(resolver.Config{Spec: spec, Path: direct, RootCAs: egresstest.NewCA(t).Pool,
			Lookup: resolvertest.Lookup(upstreamIP)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ask(u, resolvertest.Name, dns.TypeA)
		expectKind(t, name+" untrusted", err, resolver.TLSVerificationFailed)
	}
	w.public.Stop()
	fail(resolvertest.Answer, 5*time.Second, func(n string) (resolver.Kind, bool) { return resolver.UpstreamUnreachable, n != "udp" })
	// UDP learns of the closed port only from the kernel's ICMP port
	// unreachable, which the host's global ICMP rate limit (shared by every
	// namespace, so by parallel tests) may drop: a query that times out is
	// asked again, and one of a few must say unreachable.
	udpSpec := specs(w.public)["udp"]
	var err error
	for range 5 {
		if _, err = ask(newUpstream(t, udpSpec, direct, w.public, time.Second), resolvertest.Name, dns.TypeA); !isTimeout(err) {
			break
		}
	}
	expectKind(t, "udp", err, resolver.UpstreamUnreachable)
}

func isTimeout(err error) bool {
	kind, ok := resolver.KindOf(err)
	return ok && kind == resolver.UpstreamTimeout
}

// TestDirectDialCheck: on the direct path the dial check (the node's hard
// deny) refuses a private upstream before anything is dialled; a host name
// whose every address it refuses is unreachable too.
func TestDirectDialCheck(t *testing.T) {
	w := newWorld(t)
	hardDeny := policy.DialCheck(nil)
	for name, spec := range specs(w.private) {
		path := &counting{Path: w.up}
		u, err := resolver.New(resolver.Config{Spec: spec, Path: resolver.Direct(path, hardDeny), RootCAs: w.private.CA.Pool,
			Lookup: resolvertest.Lookup(privateIP)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ask(u, resolvertest.Name, dns.TypeA)
		expectKind(t, name, err, resolver.UpstreamUnreachable)
		if tcpDials, udpDials := path.dials(); tcpDials+udpDials != 0 {
			t.Errorf("%s: the uplink dialled tcp %d, udp %d times past the dial check", name, tcpDials, udpDials)
		}
	}
}

// egressWorld adds a SOCKS5 Egress with UDP ASSOCIATE to w.
func (w *world) egress(t *testing.T, spec func(*ctrlv1.EgressSpec), opt egresstest.UDPOptions) *egress.Dialer {
	t.Helper()
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, err
		}
		return w.up.DialTCP(ctx, ap)
	}
	srv := egresstest.SOCKS5UDP(t, w.inet, netip.AddrPortFrom(proxyIP, 0), nil, dial, opt)
	s := &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: srv.Addr.String(),
		Username: egresstest.User, Password: egresstest.Password, UdpEnabled: true}
	if spec != nil {
		spec(s)
	}
	d, err := egress.New(egress.Config{Spec: s, Check: allowAll, Dial: w.up.DialTCP, DialUDP: w.up.DialUDP,
		Lookup: func(context.Context, string, string) ([]netip.Addr, error) { return nil, errors.New("no lookups") }})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestThroughEgress: through a SOCKS5 Egress every protocol reaches the
// private upstream the direct path refuses (udp by UDP ASSOCIATE), with no
// dial check on the upstream; udp needs udp_enabled.
func TestThroughEgress(t *testing.T) {
	w := newWorld(t)
	path := resolver.Through(w.egress(t, nil, egresstest.UDPOptions{}))
	for name, spec := range specs(w.private) {
		reply, err := ask(newUpstream(t, spec, path, w.private, 5*time.Second), resolvertest.Name, dns.TypeA)
		t.Run(name, func(t *testing.T) { expectA(t, reply, err) })
	}
	noUDP := resolver.Through(w.egress(t, func(s *ctrlv1.EgressSpec) { s.UdpEnabled = false }, egresstest.UDPOptions{}))
	_, err := ask(newUpstream(t, specs(w.private)["udp"], noUDP, w.private, 5*time.Second), resolvertest.Name, dns.TypeA)
	if !errors.Is(err, egress.ErrUDPNotEnabled) {
		t.Errorf("udp through an Egress without udp_enabled: %v; want ErrUDPNotEnabled", err)
	}
	reply, err := ask(newUpstream(t, specs(w.private)["tcp"], noUDP, w.private, 5*time.Second), resolvertest.Name, dns.TypeA)
	expectA(t, reply, err)
}

// TestEgressFaultsStayEgress: a fault of the Egress on the way is the
// Egress's (*egress.Error), never an upstream fault.
func TestEgressFaultsStayEgress(t *testing.T) {
	w := newWorld(t)
	for _, tc := range []struct {
		name  string
		proto string
		d     *egress.Dialer
		want  egress.Kind
	}{
		{"wrong password", "tcp", w.egress(t, func(s *ctrlv1.EgressSpec) { s.Password = "wrong" }, egresstest.UDPOptions{}), egress.AuthenticationFailed},
		{"wrong password udp", "udp", w.egress(t, func(s *ctrlv1.EgressSpec) { s.Password = "wrong" }, egresstest.UDPOptions{}), egress.AuthenticationFailed},
		{"endpoint down", "https", w.egress(t, func(s *ctrlv1.EgressSpec) { s.Endpoint = netip.AddrPortFrom(proxyIP, 9).String() }, egresstest.UDPOptions{}), egress.EndpointUnreachable},
		{"association refused", "udp", w.egress(t, nil, egresstest.UDPOptions{Refuse: true}), egress.UDPAssociationFailed},
		{"relay unreachable", "udp", w.egress(t, nil, egresstest.UDPOptions{Relay: netip.AddrPortFrom(proxyIP, 9)}), egress.UDPAssociationFailed},
	} {
		_, err := ask(newUpstream(t, specs(w.private)[tc.proto], resolver.Through(tc.d), w.private, 5*time.Second), resolvertest.Name, dns.TypeA)
		if got, ok := egress.KindOf(err); !ok || got != tc.want {
			t.Errorf("%s: %v: egress kind %v (%v); want %v", tc.name, err, got, ok, tc.want)
		}
		if k, ok := resolver.KindOf(err); ok {
			t.Errorf("%s: %v is also an upstream fault %v", tc.name, err, k)
		}
	}
}

// TestNewRefuses: a spec the upstream cannot use fails at New.
func TestNewRefuses(t *testing.T) {
	for _, s := range []*ctrlv1.ResolverSpec{
		{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UNSPECIFIED, Address: "192.0.2.1:53"},
		{Protocol: udp, Address: "192.0.2.1"},
		{Protocol: tcp, Address: "192.0.2.1:0"},
		{Protocol: dot, Address: "dns.test:853"}, // a name, and no lookup
		{Protocol: https, Url: "http://192.0.2.1/dns-query"},
		{Protocol: https, Url: "https:///dns-query"},
	} {
		if _, err := resolver.New(resolver.Config{Spec: s, Path: resolver.Direct(&userstack.HostUplink{}, allowAll)}); err == nil {
			t.Errorf("New(%v) took it", s)
		}
	}
}

// Queries asked at once, as a guest's resolver asks A and AAAA together,
// each get their own answer, on a fresh upstream of every protocol (the
// first queries race to make its connections).
func TestConcurrentQueriesGetTheirOwnAnswers(t *testing.T) {
	w := newWorld(t)
	for name, spec := range specs(w.public) {
		t.Run(name, func(t *testing.T) {
			for range 20 {
				u := newUpstream(t, spec, resolver.Direct(w.up, allowAll), w.public, 5*time.Second)
				var wg sync.WaitGroup
				for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						reply, err := ask(u, resolvertest.Name, qt)
						if err != nil || len(reply.Answer) != 1 || reply.Answer[0].Header().Rrtype != qt {
							t.Errorf("%s: %v, %v; want one answer of that type", dns.TypeToString[qt], reply, err)
						}
					}()
				}
				wg.Wait()
				_ = u.Close()
			}
		})
	}
}
