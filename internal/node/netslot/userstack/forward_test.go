package userstack_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot/egress"
	"github.com/kibotos/kibotos/internal/node/netslot/egress/egresstest"
	"github.com/kibotos/kibotos/internal/node/netslot/policy"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
)

// The Egress's endpoint as the node sees it: an address no special-purpose
// row covers, which the fake uplink leads to the test's proxy on loopback.
var (
	endpointAddr = netip.MustParseAddrPort("192.0.9.80:1080")
	// privateDst is behind the Egress only: hard-denied were it direct.
	privateDst = netip.MustParseAddrPort("10.1.2.3:80")
)

const egressID = "eg-office"

// forwarding is the policy under test: PUBLIC_INTERNET with 10.1.0.0/16
// and 8.8.4.0/24 forwarded through egressID.
var forwarding = &ctrlv1.NetworkPolicy{Mode: public.Mode, Egresses: []*ctrlv1.NetworkPolicyEgress{
	{EgressId: egressID, Destinations: []string{"10.1.0.0/16", "8.8.4.0/24"}},
}}

func compileForwarding(t *testing.T, p *ctrlv1.NetworkPolicy) *policy.Policy {
	t.Helper()
	c, err := policy.Compile(p, policy.Context{
		LinkDNS:  []netip.Addr{userstack.GatewayV4, userstack.GatewayV6},
		Egresses: map[string]policy.EgressRef{egressID: {Revision: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// hardDeny is the dial check the node gives: the special-purpose rows.
func hardDeny(a netip.Addr) error {
	if r, denied := policy.SpecialPurpose(a); denied {
		return fmt.Errorf("%s is in %s (%s)", a, r.Prefix, r.Name)
	}
	return nil
}

// proxyWorld is where the test's proxies reach: the destinations behind
// the Egress, on loopback.
func proxyWorld(routes map[netip.AddrPort]string) egresstest.Dial {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		to, ok := routes[netip.MustParseAddrPort(addr)]
		if !ok {
			return nil, fmt.Errorf("%s: connection refused", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, to)
	}
}

// results records what the slot reported of each forwarded dial.
type results struct {
	mu   sync.Mutex
	errs []error
}

func (r *results) report(id string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id != egressID {
		err = fmt.Errorf("reported for %q: %v", id, err)
	}
	r.errs = append(r.errs, err)
}

func (r *results) all() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

// forwardingSlot serves a slot whose Egress is spec (its endpoint reached
// at proxy), with ca trusted for it.
func forwardingSlot(t *testing.T, spec *ctrlv1.EgressSpec, ca *egresstest.CA, up *fakeUplink, proxy netip.AddrPort) (*userstack.Slot, net.Conn, *results) {
	t.Helper()
	if proxy.IsValid() {
		up.tcp[endpointAddr] = proxy.String()
	}
	d, err := egress.New(egress.Config{Spec: spec, RootCAs: ca.Pool, Lookup: net.DefaultResolver.LookupNetIP, Check: hardDeny, Dial: up.DialTCP})
	if err != nil {
		t.Fatal(err)
	}
	res := &results{}
	s, conn := serveSlot(t, userstack.Config{Policy: compileForwarding(t, forwarding), Revision: 1, Uplink: up,
		Egresses: map[string]userstack.EgressDialer{egressID: d}, EgressResult: res.report})
	return s, conn, res
}

// egressKinds are SOCKS5 and HTTP CONNECT, each plain and behind TLS.
type egressKind struct {
	proto ctrlv1.EgressProtocol
	tls   bool
}

func (k egressKind) String() string { return fmt.Sprintf("%v tls=%v", k.proto, k.tls) }

var egressKinds = []egressKind{
	{ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, false}, {ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, true},
	{ctrlv1.EgressProtocol_EGRESS_PROTOCOL_HTTP_CONNECT, false}, {ctrlv1.EgressProtocol_EGRESS_PROTOCOL_HTTP_CONNECT, true},
}

// startEgress runs the kind's endpoint, reaching routes, and returns its
// address and the spec that reaches it through the fake uplink.
func startEgress(t *testing.T, k egressKind, ca *egresstest.CA, routes map[netip.AddrPort]string) (netip.AddrPort, *ctrlv1.EgressSpec) {
	t.Helper()
	var cert *tls.Certificate
	if k.tls {
		c := ca.Server(t, "egress.test")
		cert = &c
	}
	var addr netip.AddrPort
	if k.proto == ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5 {
		addr = egresstest.SOCKS5(t, cert, proxyWorld(routes))
	} else {
		addr = egresstest.HTTPConnect(t, cert, proxyWorld(routes))
	}
	return addr, &ctrlv1.EgressSpec{Protocol: k.proto, Endpoint: endpointAddr.String(), Tls: k.tls, ServerName: "egress.test",
		Username: egresstest.User, Password: egresstest.Password}
}

// A guest's connection to a destination the policy forwards goes through
// the Egress, a private one the hard deny would refuse included, and
// carries bytes both ways; the node dials only the Egress's endpoint.
func TestForwardedTCPGoesThroughTheEgress(t *testing.T) {
	srv := echoServer(t)
	for _, k := range egressKinds {
		t.Run(k.String(), func(t *testing.T) {
			ca := egresstest.NewCA(t)
			proxy, spec := startEgress(t, k, ca, map[netip.AddrPort]string{privateDst: srv, publicV4: srv})
			up := &fakeUplink{tcp: map[netip.AddrPort]string{publicV4: srv}}
			_, conn, res := forwardingSlot(t, spec, ca, up, proxy)
			g := guestStack(t, conn)
			for _, dst := range []netip.AddrPort{privateDst, publicV4} {
				c, err := dial(withTimeout(t), g, dst)
				if err != nil {
					t.Fatalf("dial %s: %v", dst, err)
				}
				msg := "through the egress to " + dst.String()
				if _, err := c.Write([]byte(msg)); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
					t.Errorf("echo through the Egress to %s: %q %v", dst, got, err)
				}
				_ = c.Close()
			}
			if want := []netip.AddrPort{endpointAddr, endpointAddr}; !slices.Equal(up.dials(), want) {
				t.Errorf("the uplink dialled %v; want only the endpoint, twice", up.dials())
			}
			if errs := res.all(); len(errs) != 2 || errs[0] != nil || errs[1] != nil {
				t.Errorf("reported %v; want two successes", errs)
			}
		})
	}
}

// When forwarding fails the guest's connection is reset, the fault is
// reported as its kind, and the flow never leaves directly (the uplink
// could reach the destination, and is never asked to).
func TestFailedForwardingResetsTheGuest(t *testing.T) {
	srv := echoServer(t)
	other := egresstest.NewCA(t)
	for _, k := range egressKinds {
		t.Run(k.String(), func(t *testing.T) {
			ca := egresstest.NewCA(t)
			routes := map[netip.AddrPort]string{publicV4: srv}
			cases := []struct {
				name    string
				edit    func(*ctrlv1.EgressSpec)
				ca      *egresstest.CA
				down    bool
				want    egress.Kind
				applies bool
			}{
				{name: "wrong password", edit: func(s *ctrlv1.EgressSpec) { s.Password = "wrong" }, ca: ca, want: egress.AuthenticationFailed, applies: true},
				{name: "endpoint down", ca: ca, down: true, want: egress.EndpointUnreachable, applies: true},
				{name: "untrusted certificate", ca: other, want: egress.TLSVerificationFailed, applies: k.tls},
			}
			for _, c := range cases {
				if !c.applies {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					proxy, spec := startEgress(t, k, ca, routes)
					if c.edit != nil {
						c.edit(spec)
					}
					if c.down {
						proxy = netip.AddrPort{}
					}
					up := &fakeUplink{tcp: map[netip.AddrPort]string{publicV4: srv}}
					_, conn, res := forwardingSlot(t, spec, c.ca, up, proxy)
					expectReset(t, guestStack(t, conn), publicV4)
					if slices.Contains(up.dials(), publicV4) {
						t.Errorf("the flow left directly: %v", up.dials())
					}
					errs := res.all()
					if len(errs) != 1 {
						t.Fatalf("reported %v; want one failure", errs)
					}
					if got, ok := egress.KindOf(errs[0]); !ok || got != c.want {
						t.Errorf("reported %v (%v); want %v", errs[0], got, c.want)
					}
				})
			}
		})
	}
}

// A destination the Egress cannot reach is a reset too, and is reported
// as a destination's result, not an Egress fault.
func TestUnreachableDestinationBehindTheEgress(t *testing.T) {
	ca := egresstest.NewCA(t)
	for _, k := range egressKinds {
		proxy, spec := startEgress(t, k, ca, nil)
		up := &fakeUplink{tcp: map[netip.AddrPort]string{}}
		_, conn, res := forwardingSlot(t, spec, ca, up, proxy)
		expectReset(t, guestStack(t, conn), privateDst)
		errs := res.all()
		if _, fault := egress.KindOf(errs[0]); len(errs) != 1 || fault {
			t.Errorf("%v: reported %v; want one destination result", k, errs)
		}
	}
}

// expectReset: the guest's connection to dst is refused (reset).
func expectReset(t *testing.T, g *stack.Stack, dst netip.AddrPort) {
	t.Helper()
	c, err := dial(withTimeout(t), g, dst)
	if err == nil {
		_ = c.Close()
	}
	if err == nil || !strings.HasSuffix(err.Error(), (&tcpip.ErrConnectionRefused{}).String()) {
		t.Errorf("dial %s: %v, want connection refused", dst, err)
	}
}

// An echo request to a destination the policy forwards is answered at once
// with administratively prohibited; nothing is sent.
func TestEchoToAForwardedDestinationIsProhibited(t *testing.T) {
	up := &fakeUplink{tcp: map[netip.AddrPort]string{}, echoes: map[netip.Addr]bool{publicV4.Addr(): true}}
	ca := egresstest.NewCA(t)
	_, spec := startEgress(t, egressKinds[0], ca, nil)
	_, conn, _ := forwardingSlot(t, spec, ca, up, netip.AddrPort{})
	g := newRawGuest(conn)
	for _, dst := range []netip.Addr{publicV4.Addr(), privateDst.Addr()} {
		req := echoRequest(userstack.GuestV4.Addr(), dst)
		if err := g.w.WriteFrame(req); err != nil {
			t.Fatal(err)
		}
		from, msg := g.icmpFrom(t)
		quoted := req[header.EthernetMinimumSize:]
		if from != userstack.GatewayV4 || msg[0] != byte(header.ICMPv4DstUnreachable) || msg[1] != byte(header.ICMPv4AdminProhibited) || !bytes.Equal(msg[8:], quoted) {
			t.Errorf("echo to forwarded %s: from %s % x", dst, from, msg)
		}
	}
	if len(up.pings()) != 0 {
		t.Errorf("the uplink sent %v", up.pings())
	}
}

// A policy change that moves an open forwarded connection off its Egress
// (here to leaving directly) keeps it on its path for the drain, then
// resets it; it is never moved onto the new path.
func TestAMovedForwardedConnectionDrains(t *testing.T) {
	srv := echoServer(t)
	ca := egresstest.NewCA(t)
	proxy, spec := startEgress(t, egressKinds[0], ca, map[netip.AddrPort]string{publicV4: srv})
	up := &fakeUplink{tcp: map[netip.AddrPort]string{publicV4: srv}}
	s, conn, _ := forwardingSlot(t, spec, ca, up, proxy)
	c, err := dial(withTimeout(t), guestStack(t, conn), publicV4)
	if err != nil {
		t.Fatal(err)
	}
	s.SetPolicy(compileForwarding(t, public), 2, 0)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("the moved connection: %v, want it reset", err)
	}
	if slices.Contains(up.dials(), publicV4) {
		t.Errorf("the moved connection was re-dialled directly: %v", up.dials())
	}
}

// An Egress whose endpoint the dial check (the hard deny) refuses is never
// dialled: the guest is reset and the Egress reported unreachable.
func TestAHardDeniedEndpointIsNeverDialled(t *testing.T) {
	srv := echoServer(t)
	ca := egresstest.NewCA(t)
	proxy, spec := startEgress(t, egressKinds[0], ca, map[netip.AddrPort]string{publicV4: srv})
	denied := netip.MustParseAddrPort("10.9.9.9:1080")
	spec.Endpoint = denied.String()
	up := &fakeUplink{tcp: map[netip.AddrPort]string{publicV4: srv, denied: proxy.String()}}
	_, conn, res := forwardingSlot(t, spec, ca, up, netip.AddrPort{})
	expectReset(t, guestStack(t, conn), publicV4)
	if len(up.dials()) != 0 {
		t.Errorf("the uplink dialled %v; the endpoint is hard-denied", up.dials())
	}
	if errs := res.all(); len(errs) != 1 {
		t.Errorf("reported %v; want one failure", errs)
	} else if got, ok := egress.KindOf(errs[0]); !ok || got != egress.EndpointUnreachable {
		t.Errorf("reported %v; want ENDPOINT_UNREACHABLE", errs[0])
	}
}
