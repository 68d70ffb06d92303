package userstack_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/egress/egresstest"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
)

// The addresses of the tests' DNS servers as the node sees them.
var (
	deploymentAddr = netip.MustParseAddrPort("9.9.9.9:53")
	resolverAddr   = netip.MustParseAddrPort("9.9.9.53:53")
	// privateResolver is behind the Egress only.
	privateResolver = netip.MustParseAddrPort("10.1.2.53:53")
)

// dnsServer is a DNS server on loopback over network ("udp" or "tcp")
// answering every A query with answer, or NXDOMAIN when answer is
// "NXDOMAIN".
func dnsServer(t *testing.T, network, answer string) string {
	t.Helper()
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg).SetReply(q)
		if answer == "NXDOMAIN" {
			m.Rcode = dns.RcodeNameError
		} else {
			rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A " + answer)
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})
	srv := &dns.Server{Handler: handler}
	if network == "udp" {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv.PacketConn = pc
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv.Listener = ln
	}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	if srv.PacketConn != nil {
		return srv.PacketConn.LocalAddr().String()
	}
	return srv.Listener.Addr().String()
}

// downUplink is a fakeUplink whose resolverAddr refuses while down is set.
type downUplink struct {
	*fakeUplink
	down atomic.Bool
}

func (u *downUplink) DialUDP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	if dst == resolverAddr && u.down.Load() {
		u.record(dst)
		return nil, syscall.ECONNREFUSED
	}
	return u.fakeUplink.DialUDP(ctx, dst)
}

func (u *downUplink) DialTCP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	if dst == resolverAddr && u.down.Load() {
		u.record(dst)
		return nil, syscall.ECONNREFUSED
	}
	return u.fakeUplink.DialTCP(ctx, dst)
}

// attached attaches one execution of a Network on up under pol and serves
// its slot to a guest stack, as QEMU's stream would.
func attached(t *testing.T, up userstack.Uplink, pol netslot.Policy) (netslot.Attachment, *stack.Stack) {
	t.Helper()
	n, err := userstack.NewNetwork(userstack.NetworkConfig{Uplink: up, Resolvers: []netip.AddrPort{deploymentAddr}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := n.Attach(context.Background(), "i-1", pol)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "rs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, userstack.SocketName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	a.Started(dir)
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Release(); _ = conn.Close() })
	return a, guestStack(t, conn)
}

func directPath() *ctrlv1.ResolverPath {
	return &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_Direct{Direct: &ctrlv1.ResolverDirectPath{}}}
}

func egressPath() *ctrlv1.ResolverPath {
	return &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_EgressId{EgressId: egressID}}
}

// withResolver is pol's network policy at revision rev with one resolvers
// entry: resolver_id "rs-1" on path, answered at addr over protocol.
func withResolver(pol netslot.Policy, rev uint64, path *ctrlv1.ResolverPath, protocol ctrlv1.ResolverProtocol, addr netip.AddrPort) netslot.Policy {
	np := &ctrlv1.NetworkPolicy{Mode: public.Mode, Revision: rev, Egresses: pol.Network.GetEgresses(),
		Resolvers: []*ctrlv1.NetworkPolicyResolver{{ResolverId: "rs-1", Path: path}}}
	return netslot.Policy{Network: np, Egresses: pol.Egresses, Resolvers: []*nodev1.ResolvedResolver{
		{ResolverId: "rs-1", Revision: 1, Path: path, Spec: &ctrlv1.ResolverSpec{Protocol: protocol, Address: addr.String()}},
	}}
}

// queryTCP is query over a TCP connection to the link DNS address.
func queryTCP(t *testing.T, g *stack.Stack, name string) *dns.Msg {
	t.Helper()
	c, err := dial(withTimeout(t), g, netip.AddrPortFrom(userstack.GatewayV4, 53))
	if err != nil {
		t.Fatalf("connect to the link DNS address over TCP: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	reply, _, err := (&dns.Client{Net: "tcp"}).ExchangeWithConn(new(dns.Msg).SetQuestion(name, dns.TypeA), &dns.Conn{Conn: c})
	if err != nil {
		t.Fatalf("query %s over TCP: %v", name, err)
	}
	return reply
}

func answerOf(r *dns.Msg) string {
	if r.Rcode != dns.RcodeSuccess {
		return dns.RcodeToString[r.Rcode]
	}
	if len(r.Answer) != 1 {
		return r.String()
	}
	if a, ok := r.Answer[0].(*dns.A); ok {
		return a.A.String()
	}
	return r.Answer[0].String()
}

// With a Resolver in the policy the link DNS address forwards the guest's
// queries, over UDP and TCP, to it and never to the deployment resolver;
// a revision that removes it sends them to the deployment resolver again
// and one that adds a tcp Resolver to that one, at the same address.
func TestLinkDNSAsksThePolicyResolver(t *testing.T) {
	up := &fakeUplink{
		udp: map[netip.AddrPort]string{deploymentAddr: dnsServer(t, "udp", "192.0.2.7"), resolverAddr: dnsServer(t, "udp", "198.51.100.53")},
		tcp: map[netip.AddrPort]string{deploymentAddr: dnsServer(t, "tcp", "192.0.2.7"), resolverAddr: dnsServer(t, "tcp", "198.51.100.54")},
	}
	udpResolver := withResolver(netslot.Policy{}, 1, directPath(), ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, resolverAddr)
	a, g := attached(t, up, udpResolver)
	if got := answerOf(query(t, g, userstack.GatewayV4, "example.com.")); got != "198.51.100.53" {
		t.Errorf("a UDP query with a udp Resolver: %s, want the Resolver's 198.51.100.53", got)
	}
	if got := answerOf(queryTCP(t, g, "example.com.")); got != "198.51.100.53" {
		t.Errorf("a TCP query with a udp Resolver: %s, want the Resolver's 198.51.100.53", got)
	}
	if slices.Contains(up.dials(), deploymentAddr) {
		t.Errorf("the deployment resolver was asked while a Resolver was in force: %v", up.dials())
	}

	if err := a.Apply(context.Background(), netslot.Policy{Network: &ctrlv1.NetworkPolicy{Mode: public.Mode, Revision: 2}}, 0); err != nil {
		t.Fatal(err)
	}
	if got := answerOf(query(t, g, userstack.GatewayV4, "example.com.")); got != "192.0.2.7" {
		t.Errorf("a UDP query after the Resolver was removed: %s, want the deployment resolver's 192.0.2.7", got)
	}
	if got := answerOf(queryTCP(t, g, "example.com.")); got != "192.0.2.7" {
		t.Errorf("a TCP query after the Resolver was removed: %s, want the deployment resolver's 192.0.2.7", got)
	}

	tcpResolver := withResolver(netslot.Policy{}, 3, directPath(), ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, resolverAddr)
	if err := a.Apply(context.Background(), tcpResolver, 0); err != nil {
		t.Fatal(err)
	}
	if got := answerOf(query(t, g, userstack.GatewayV4, "example.com.")); got != "198.51.100.54" {
		t.Errorf("a UDP query with a tcp Resolver: %s, want the Resolver's 198.51.100.54", got)
	}
	if f := a.ResolverFaults(); len(f) != 0 {
		t.Errorf("resolver faults while every query was answered: %v", f)
	}
}

// A Resolver that cannot be reached is SERVFAIL to the guest, never the
// deployment resolver's answer, and a fault of its entry that stays the
// same run while failures continue and is cleared by the next answer.
func TestAnUnavailableResolverIsSERVFAIL(t *testing.T) {
	up := &downUplink{fakeUplink: &fakeUplink{udp: map[netip.AddrPort]string{
		deploymentAddr: dnsServer(t, "udp", "192.0.2.7"), resolverAddr: dnsServer(t, "udp", "198.51.100.53"),
	}}}
	up.down.Store(true)
	a, g := attached(t, up, withResolver(netslot.Policy{}, 1, directPath(), ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, resolverAddr))
	if got := answerOf(query(t, g, userstack.GatewayV4, "example.com.")); got != "SERVFAIL" {
		t.Errorf("a query to an unreachable Resolver: %s, want SERVFAIL", got)
	}
	faults := a.ResolverFaults()
	if len(faults) != 1 || faults[0].ResolverID != "rs-1" || faults[0].Path.GetDirect() == nil ||
		faults[0].Kind != ctrlv1.ResolverObservationKind_RESOLVER_OBSERVATION_KIND_UPSTREAM_UNREACHABLE || faults[0].Message == "" {
		t.Fatalf("resolver faults: %+v, want one UPSTREAM_UNREACHABLE of rs-1 on the direct path", faults)
	}
	_ = query(t, g, userstack.GatewayV4, "example.com.")
	if again := a.ResolverFaults(); len(again) != 1 || !again[0].Since.Equal(faults[0].Since) {
		t.Errorf("a second failure: %+v, want the same run (since %v)", again, faults[0].Since)
	}
	if slices.Contains(up.dials(), deploymentAddr) {
		t.Errorf("a failed query fell back to the deployment resolver: %v", up.dials())
	}

	up.down.Store(false)
	if got := answerOf(query(t, g, userstack.GatewayV4, "example.com.")); got != "198.51.100.53" {
		t.Errorf("a query once the Resolver is back: %s", got)
	}
	if f := a.ResolverFaults(); len(f) != 0 {
		t.Errorf("resolver faults after an answer: %+v, want none", f)
	}
}

// On the direct path the hard deny acts on the upstream: a Resolver in a
// private range is never dialled and its entry reports it unreachable.
func TestADirectResolverIsHardDenied(t *testing.T) {
	up := &fakeUplink{udp: map[netip.AddrPort]string{privateResolver: dnsServer(t, "udp", "198.51.100.53")}}
	a, g := attached(t, up, withResolver(netslot.Policy{}, 1, directPath(), ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, privateResolver))
	if got := answerOf(query(t, g, userstack.GatewayV4, "example.com.")); got != "SERVFAIL" {
		t.Errorf("a query to a hard-denied Resolver: %s, want SERVFAIL", got)
	}
	if slices.Contains(up.dials(), privateResolver) {
		t.Errorf("the hard-denied Resolver was dialled: %v", up.dials())
	}
	if f := a.ResolverFaults(); len(f) != 1 || f[0].Kind != ctrlv1.ResolverObservationKind_RESOLVER_OBSERVATION_KIND_UPSTREAM_UNREACHABLE {
		t.Errorf("resolver faults: %+v, want UPSTREAM_UNREACHABLE", f)
	}
}

// A tcp Resolver through an Egress is asked through it, a private upstream
// only the Egress reaches included; a udp one through an Egress without
// udp_enabled (which ctrl refuses to admit) is SERVFAIL with its entry's
// fault saying so, never asked another way.
func TestAResolverThroughAnEgress(t *testing.T) {
	routes := map[netip.AddrPort]string{privateResolver: dnsServer(t, "tcp", "198.51.100.80")}
	proxy := egresstest.SOCKS5(t, nil, proxyWorld(routes))
	up := &fakeUplink{tcp: map[netip.AddrPort]string{endpointAddr: proxy.String()}}
	pol := netslot.Policy{Network: forwarding, Egresses: []*nodev1.ResolvedEgress{{EgressId: egressID, Revision: 1, Spec: &ctrlv1.EgressSpec{
		Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: endpointAddr.String(), Username: egresstest.User, Password: egresstest.Password,
	}}}}
	a, g := attached(t, up, withResolver(pol, 1, egressPath(), ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, privateResolver))
	if got := answerOf(query(t, g, userstack.GatewayV4, "example.com.")); got != "198.51.100.80" {
		t.Errorf("a query to a tcp Resolver behind the Egress: %s, want 198.51.100.80", got)
	}
	if d := up.dials(); slices.Contains(d, privateResolver) || slices.Contains(d, deploymentAddr) {
		t.Errorf("the node dialled past the Egress: %v", d)
	}
	if f := a.EgressFaults(); len(f) != 0 {
		t.Errorf("egress faults: %+v", f)
	}

	if err := a.Apply(context.Background(), withResolver(pol, 2, egressPath(), ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, privateResolver), 0); err != nil {
		t.Fatal(err)
	}
	if got := answerOf(query(t, g, userstack.GatewayV4, "example.com.")); got != "SERVFAIL" {
		t.Errorf("a query to a udp Resolver through an Egress: %s, want SERVFAIL", got)
	}
	if f := a.ResolverFaults(); len(f) != 1 || !strings.Contains(f[0].Message, "udp_enabled") || f[0].Path.GetEgressId() != egressID {
		t.Errorf("resolver faults: %+v, want the entry's saying the Egress carries no UDP without udp_enabled", f)
	}
}

// A policy whose Resolver the node cannot ask (a protocol it does not
// know, or an entry ctrl did not resolve) is unenforceable: the attach
// fails.
func TestAnUnaskableResolverIsUnenforceable(t *testing.T) {
	n, err := userstack.NewNetwork(userstack.NetworkConfig{Uplink: &fakeUplink{}})
	if err != nil {
		t.Fatal(err)
	}
	unknown := withResolver(netslot.Policy{}, 1, directPath(), ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UNSPECIFIED, resolverAddr)
	unresolved := withResolver(netslot.Policy{}, 1, directPath(), ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, resolverAddr)
	unresolved.Resolvers = nil
	for name, pol := range map[string]netslot.Policy{"unknown protocol": unknown, "unresolved": unresolved} {
		if _, err := n.Attach(context.Background(), "i-"+strings.ReplaceAll(name, " ", "-"), pol); !netslot.IsUnenforceable(err) {
			t.Errorf("%s: Attach: %v, want Unenforceable", name, err)
		}
	}
}

// An NXDOMAIN the upstream answers is a DNS result: it reaches the guest
// and clears the entry's run of faults.
func TestAnNXDOMAINClearsTheResolverFault(t *testing.T) {
	up := &downUplink{fakeUplink: &fakeUplink{udp: map[netip.AddrPort]string{resolverAddr: dnsServer(t, "udp", "NXDOMAIN")}}}
	up.down.Store(true)
	a, g := attached(t, up, withResolver(netslot.Policy{}, 1, directPath(), ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, resolverAddr))
	_ = query(t, g, userstack.GatewayV4, "example.com.")
	if f := a.ResolverFaults(); len(f) != 1 {
		t.Fatalf("resolver faults while unreachable: %+v, want one", f)
	}
	up.down.Store(false)
	if got := answerOf(query(t, g, userstack.GatewayV4, "nowhere.example.")); got != "NXDOMAIN" {
		t.Errorf("a name the upstream does not know: %s, want its NXDOMAIN", got)
	}
	if f := a.ResolverFaults(); len(f) != 0 {
		t.Errorf("resolver faults after an NXDOMAIN: %+v, want none", f)
	}
}

// A Resolver behind an Egress that cannot be reached: SERVFAIL, and the
// fault is the Egress's (ENDPOINT_UNREACHABLE), not the Resolver's.
func TestAnEgressFaultOnTheWayIsNotTheResolvers(t *testing.T) {
	up := &fakeUplink{tcp: map[netip.AddrPort]string{}} // the endpoint refuses
	pol := netslot.Policy{Network: forwarding, Egresses: []*nodev1.ResolvedEgress{{EgressId: egressID, Revision: 1, Spec: &ctrlv1.EgressSpec{
		Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: endpointAddr.String(), Username: egresstest.User, Password: egresstest.Password,
	}}}}
	a, g := attached(t, up, withResolver(pol, 1, egressPath(), ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, privateResolver))
	if got := answerOf(query(t, g, userstack.GatewayV4, "example.com.")); got != "SERVFAIL" {
		t.Errorf("a query through an Egress that is down: %s, want SERVFAIL", got)
	}
	if f := a.EgressFaults(); len(f) != 1 || f[0].EgressID != egressID || f[0].Kind != ctrlv1.EgressObservationKind_EGRESS_OBSERVATION_KIND_ENDPOINT_UNREACHABLE {
		t.Errorf("egress faults: %+v, want ENDPOINT_UNREACHABLE of %s", f, egressID)
	}
	if f := a.ResolverFaults(); len(f) != 0 {
		t.Errorf("resolver faults: %+v, want none (the fault is the Egress's)", f)
	}
}

// fakeUpstream answers every query with answer, once release is closed
// when it is set, and records its Close.
type fakeUpstream struct {
	answer  string
	asked   chan struct{} // gets one value per query, when set
	release chan struct{}
	closed  atomic.Bool
}

func (u *fakeUpstream) Exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	if u.asked != nil {
		u.asked <- struct{}{}
	}
	if u.release != nil {
		select {
		case <-u.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if u.closed.Load() {
		return nil, errors.New("asked after Close")
	}
	m := new(dns.Msg).SetReply(q)
	rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A " + u.answer)
	m.Answer = append(m.Answer, rr)
	return m, nil
}

func (u *fakeUpstream) Close() error {
	u.closed.Store(true)
	return nil
}

// A Resolver is in force with its policy revision: a query after
// SetPolicyWith returned asks the new one, while one already asking the
// old keeps it, and the old is closed only once that query is done.
func TestAReplacedResolverClosesAfterItsLastQuery(t *testing.T) {
	p := compile(t, public)
	old := &fakeUpstream{answer: "198.51.100.1", asked: make(chan struct{}, 1), release: make(chan struct{})}
	s, conn := serveSlot(t, userstack.Config{Policy: p, Revision: 1, Uplink: &fakeUplink{},
		Resolver: &userstack.Resolver{ID: "rs-1", Path: directPath(), Upstream: old}})
	g := guestStack(t, conn)
	first := make(chan string, 1)
	go func() { first <- tryQuery(g, "first.example.") }()
	<-old.asked

	s.SetPolicyWith(p, 2, &userstack.Resolver{ID: "rs-2", Path: directPath(), Upstream: &fakeUpstream{answer: "198.51.100.2"}}, 0)
	if got := answerOf(query(t, g, userstack.GatewayV4, "second.example.")); got != "198.51.100.2" {
		t.Errorf("a query after the new Resolver was put in force: %s, want its 198.51.100.2", got)
	}
	if old.closed.Load() {
		t.Error("the old Resolver was closed while a query still used it")
	}
	close(old.release)
	if got := <-first; got != "198.51.100.1" {
		t.Errorf("the query that asked the old Resolver: %s, want its 198.51.100.1", got)
	}
	// The slot lets go of the Resolver before it sends the answer.
	if !old.closed.Load() {
		t.Error("the old Resolver was not closed after its last query")
	}
}

// tryQuery is query from a goroutine other than the test's: its answer,
// or the error in words.
func tryQuery(g *stack.Stack, name string) string {
	pc, err := gonet.DialUDP(g, nil, &tcpip.FullAddress{NIC: 1, Addr: addr(userstack.GatewayV4), Port: 53}, ipv4.ProtocolNumber)
	if err != nil {
		return err.Error()
	}
	defer pc.Close()
	_ = pc.SetDeadline(time.Now().Add(20 * time.Second))
	reply, _, err := (&dns.Client{Net: "udp"}).ExchangeWithConn(new(dns.Msg).SetQuestion(name, dns.TypeA), &dns.Conn{Conn: pc})
	if err != nil {
		return err.Error()
	}
	return answerOf(reply)
}
