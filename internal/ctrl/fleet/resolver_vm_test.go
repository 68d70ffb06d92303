package fleet_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/miekg/dns"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/node/netslot/egress/egresstest"
	"github.com/kibotos/kibotos/internal/node/netslot/resolver/resolvertest"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
	"github.com/kibotos/kibotos/internal/testenv/testnet"
)

// startDNS is a DNS server of the test internet at `at` over network
// ("udp" or "tcp") answering every query with the A record answer: a
// caller's upstream.
func startDNS(t *testing.T, inet *testnet.Internet, network string, at netip.AddrPort, answer string) *dns.Server {
	t.Helper()
	srv := &dns.Server{Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg).SetReply(q)
		if rr, err := dns.NewRR(q.Question[0].Name + " 60 IN A " + answer); err == nil {
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})}
	if network == "udp" {
		srv.PacketConn = inet.ListenPacket(t, "udp", at.String())
	} else {
		srv.Listener = inet.Listen(t, "tcp", at.String())
	}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return srv
}

func (e *vmEnv) resolvers() ctrlv1connect.ResolverServiceClient {
	return ctrlv1connect.NewResolverServiceClient(http.DefaultClient, e.c.Ctrl.Client.WorkspaceEndpoint,
		connect.WithInterceptors(auth.Bearer(e.c.Ctrl.Client.Token)))
}

func (e *vmEnv) createResolver(commandID string, protocol ctrlv1.ResolverProtocol, at netip.AddrPort) string {
	e.t.Helper()
	res, err := e.resolvers().CreateResolver(ctx, connect.NewRequest(&ctrlv1.CreateResolverRequest{
		Command: cmd(commandID), Spec: &ctrlv1.ResolverSpec{Protocol: protocol, Address: at.String()},
	}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.GetResolver().GetResolverId()
}

var directResolverPath = &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_Direct{Direct: &ctrlv1.ResolverDirectPath{}}}

func resolverVia(egressID string) *ctrlv1.ResolverPath {
	return &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_EgressId{EgressId: egressID}}
}

// nslookup is what the guest's resolver answers for kibotos.test, through
// the nameserver it booted with.
func (e *vmEnv) nslookup(id string) string {
	e.t.Helper()
	out, _ := e.c.Exec(e.t, id, "sh", "-c", "nslookup kibotos.test 2>&1")
	return out
}

// updatePolicy puts p in force as revision rev+1 and waits for the node's
// confirmation; it returns the confirmed status.
func (e *vmEnv) updatePolicy(id string, rev uint64, p *ctrlv1.NetworkPolicy) *ctrlv1.NetworkPolicyStatus {
	e.t.Helper()
	if _, err := e.c.Workspaces.UpdateWorkspaceNetworkPolicy(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceNetworkPolicyRequest{
		Command: cmd(fmt.Sprintf("policy-%s-%d", id, rev+1)), WorkspaceId: id, ExpectedRevision: rev, NetworkPolicy: p,
	})); err != nil {
		e.t.Fatal(err)
	}
	var st *ctrlv1.NetworkPolicyStatus
	waitLong(e.t, "the policy update confirmed", func() bool {
		st = e.workspace(id).GetNetworkPolicyStatus()
		return st.GetAppliedRevision() == rev+1
	})
	return st
}

// wantResolverStatus checks a confirmed status names exactly the one
// resolvers entry (id on path) at Resolver revision 1.
func wantResolverStatus(t *testing.T, st *ctrlv1.NetworkPolicyStatus, id string, path *ctrlv1.ResolverPath) {
	t.Helper()
	want := &ctrlv1.NetworkPolicyResolverStatus{ResolverId: id, Path: path, AppliedRevision: 1}
	if got := st.GetResolvers(); len(got) != 1 || !proto.Equal(got[0], want) {
		t.Errorf("network_policy_status.resolvers at revision %d: %v, want [%v]", st.GetAppliedRevision(), got, want)
	}
}

// The policy's Resolver from inside one real guest, whose nameserver never
// changes: a udp Resolver on the direct path answers in place of the
// deployment resolver (which answers the same name otherwise); stopped, it
// is SERVFAIL (never the deployment resolver's answer) and an
// UPSTREAM_UNREACHABLE (or UPSTREAM_TIMEOUT) resolver observation until it
// answers again; a live update to a tcp Resolver, then to a tcp Resolver in
// a private range that only a SOCKS5 Egress reaches, sends the queries
// there, and still does after an agent restart; removing the entry sends
// them to the deployment resolver again. network_policy_status.resolvers
// follows each confirmed revision.
func TestThePolicyResolverAnswersTheGuest(t *testing.T) {
	e := newVMEnv(t)
	public, proxyAt := netip.MustParseAddr("1.1.1.1"), netip.MustParseAddrPort("8.8.8.8:1080")
	private := netip.MustParseAddrPort("10.1.2.53:53")
	inet := newInternet(t, public, proxyAt.Addr(), private.Addr())
	upstream := netip.AddrPortFrom(public, 53)
	udp := startDNS(t, inet.Internet, "udp", upstream, "198.51.100.1")
	startDNS(t, inet.Internet, "tcp", upstream, "198.51.100.2")
	startDNS(t, inet.Internet, "tcp", private, "198.51.100.3")
	proxyDials := startSOCKS5(t, inet.Internet, proxyAt)
	agent := e.startInternetNode(inet)

	udpID := e.createResolver("resolver-udp", ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, upstream)
	tcpID := e.createResolver("resolver-tcp", ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, upstream)
	privateID := e.createResolver("resolver-private", ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, private)
	eg, err := e.c.Egresses.CreateEgress(ctx, connect.NewRequest(&ctrlv1.CreateEgressRequest{
		Command: cmd("resolver-egress"),
		Spec: &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: proxyAt.String(),
			Username: "caller", Password: "s3cret"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	egressID := eg.Msg.GetEgress().GetEgressId()

	req := createRequest("create-resolver")
	req.Spec.NetworkPolicy = &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
		Resolvers: []*ctrlv1.NetworkPolicyResolver{{ResolverId: udpID, Path: directResolverPath}}}
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	w := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	wantResolverStatus(t, w.GetNetworkPolicyStatus(), udpID, directResolverPath)
	if out := e.nslookup(id); !strings.Contains(out, "198.51.100.1") || strings.Contains(out, "192.0.2.7") {
		t.Errorf("a query with a udp Resolver: %q, want its answer 198.51.100.1, not the deployment resolver's", out)
	}
	resolvConf, _ := e.c.Exec(t, id, "cat", "/etc/resolv.conf")

	e.unavailableUpstream(id, udpID, udp, inet.Internet, upstream)

	st := e.updatePolicy(id, 1, &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
		Resolvers: []*ctrlv1.NetworkPolicyResolver{{ResolverId: tcpID, Path: directResolverPath}}})
	wantResolverStatus(t, st, tcpID, directResolverPath)
	if out := e.nslookup(id); !strings.Contains(out, "198.51.100.2") {
		t.Errorf("a query with a tcp Resolver: %q, want its answer 198.51.100.2", out)
	}

	st = e.updatePolicy(id, 2, &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
		Egresses:  []*ctrlv1.NetworkPolicyEgress{{EgressId: egressID, Destinations: []string{"10.1.2.0/24"}}},
		Resolvers: []*ctrlv1.NetworkPolicyResolver{{ResolverId: privateID, Path: resolverVia(egressID)}}})
	wantResolverStatus(t, st, privateID, resolverVia(egressID))
	if out := e.nslookup(id); !strings.Contains(out, "198.51.100.3") || proxyDials.Load() == 0 {
		t.Errorf("a query with a tcp Resolver behind the Egress: %q (proxy dials %d), want 198.51.100.3 through the proxy", out, proxyDials.Load())
	}
	// An agent restart attaches the running guest's network again from its
	// record, the Resolver and its Egress included.
	agent.Stop(t)
	e.startInternetNodeAt(inet, agent.StateDir, agent.PoolDir)
	waitLong(t, "the Resolver through the new agent", func() bool {
		out, _, err := e.c.TryExec(id, "sh", "-c", "nslookup kibotos.test 2>&1")
		return err == nil && strings.Contains(out, "198.51.100.3")
	})

	st = e.updatePolicy(id, 3, &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET})
	if len(st.GetResolvers()) != 0 {
		t.Errorf("network_policy_status.resolvers without resolvers: %v, want none", st.GetResolvers())
	}
	if out := e.nslookup(id); !strings.Contains(out, "192.0.2.7") {
		t.Errorf("a query once the Resolver was removed: %q, want the deployment resolver's 192.0.2.7", out)
	}
	if out, _ := e.c.Exec(t, id, "cat", "/etc/resolv.conf"); out != resolvConf || !strings.Contains(out, "nameserver 10.0.2.2\n") {
		t.Errorf("the guest's resolv.conf after the changes: %q, want the one it booted with %q", out, resolvConf)
	}
}

// unavailableUpstream stops the udp Resolver id's server: the guest's
// queries are SERVFAIL and the Workspace observes the fault, the same
// while failures go on; once the server is back an answer clears it.
func (e *vmEnv) unavailableUpstream(id, resolverID string, srv *dns.Server, inet *testnet.Internet, at netip.AddrPort) {
	t := e.t
	t.Helper()
	if err := srv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if out := e.nslookup(id); !strings.Contains(out, "SERVFAIL") || strings.Contains(out, "192.0.2.7") {
		t.Errorf("a query to a stopped Resolver: %q, want SERVFAIL and never the deployment resolver's answer", out)
	}
	var first *ctrlv1.ResolverObservation
	waitLong(t, "the resolver fault observed", func() bool {
		if obs := e.workspace(id).GetResolverObservations(); len(obs) == 1 {
			first = obs[0]
		}
		return first != nil
	})
	kind := first.GetKind()
	if first.GetResolverId() != resolverID || !proto.Equal(first.GetPath(), directResolverPath) || first.GetFailingSince() == nil || first.GetObservedAt() == nil ||
		kind != ctrlv1.ResolverObservationKind_RESOLVER_OBSERVATION_KIND_UPSTREAM_UNREACHABLE && kind != ctrlv1.ResolverObservationKind_RESOLVER_OBSERVATION_KIND_UPSTREAM_TIMEOUT {
		t.Errorf("resolver observation %v, want UPSTREAM_UNREACHABLE or UPSTREAM_TIMEOUT of %s on the direct path", first, resolverID)
	}
	_ = e.nslookup(id)
	version := e.c.Registration(t, "node-a").GetObservation().GetObservationVersion()
	waitLong(t, "two more observations", func() bool {
		return e.c.Registration(t, "node-a").GetObservation().GetObservationVersion() >= version+2
	})
	w := e.workspace(id)
	if obs := w.GetResolverObservations(); len(obs) != 1 || !proto.Equal(obs[0], first) {
		t.Errorf("resolver observations while the failures go on: %v, want %v unchanged", obs, first)
	}
	if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || w.GetGeneration() != 1 {
		t.Errorf("a Workspace with a resolver observation: %v at generation %d, want it AVAILABLE at 1 (an observation is not a state)", w.GetState(), w.GetGeneration())
	}
	if len(e.workspace(id).GetEgressObservations()) != 0 {
		t.Error("an upstream fault on the direct path was observed as an Egress's")
	}

	startDNS(t, inet, "udp", at, "198.51.100.1")
	if out := e.nslookup(id); !strings.Contains(out, "198.51.100.1") {
		t.Errorf("a query once the Resolver is back: %q", out)
	}
	waitLong(t, "the resolver fault cleared", func() bool { return len(e.workspace(id).GetResolverObservations()) == 0 })
}

// The upstream protocols from inside one real guest: a DNS-over-TLS
// Resolver and a DNS-over-HTTPS one on the direct path (verified against
// server_name with the test CA) answer the guest's queries, and a udp
// Resolver in a private range answers through a SOCKS5 Egress with
// udp_enabled, its datagrams relayed by a UDP association.
func TestResolverProtocolsFromAGuest(t *testing.T) {
	e := newVMEnv(t)
	public, proxyAt, private := netip.MustParseAddr("1.0.0.1"), netip.MustParseAddrPort("8.8.8.9:1080"), netip.MustParseAddr("10.1.2.54")
	inet := newInternet(t, public, proxyAt.Addr(), private)
	upstream := resolvertest.Start(t, inet.Internet, public)
	behind := resolvertest.Start(t, inet.Internet, private)
	proxy := egresstest.SOCKS5UDP(t, inet.Internet, proxyAt, nil, nil, egresstest.UDPOptions{})
	e.startInternetNodeWith(inet, "", t.TempDir(), userstack.NetworkConfig{
		Resolvers: []netip.AddrPort{netip.AddrPortFrom(resolverHost, 53)}, RootCAs: upstream.CA.Pool})

	create := func(commandID string, spec *ctrlv1.ResolverSpec) string {
		res, err := e.resolvers().CreateResolver(ctx, connect.NewRequest(&ctrlv1.CreateResolverRequest{Command: cmd(commandID), Spec: spec}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.GetResolver().GetResolverId()
	}
	dotID := create("resolver-dot", &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TLS,
		Address: upstream.TLS.String(), ServerName: resolvertest.ServerName})
	dohID := create("resolver-doh", &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS,
		Url: upstream.URL, ServerName: resolvertest.ServerName})
	udpID := create("resolver-behind", &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, Address: behind.UDP.String()})
	eg, err := e.c.Egresses.CreateEgress(ctx, connect.NewRequest(&ctrlv1.CreateEgressRequest{
		Command: cmd("resolver-udp-egress"),
		Spec: &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: proxy.Addr.String(),
			Username: egresstest.User, Password: egresstest.Password, UdpEnabled: true},
	}))
	if err != nil {
		t.Fatal(err)
	}
	egressID := eg.Msg.GetEgress().GetEgressId()

	req := createRequest("create-resolver-protocols")
	req.Spec.NetworkPolicy = &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
		Resolvers: []*ctrlv1.NetworkPolicyResolver{{ResolverId: dotID, Path: directResolverPath}}}
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	lookup := func(what string, from *resolvertest.Server) {
		t.Helper()
		before := from.Queries()
		// One type: busybox's nslookup asks A and AAAA at once and can
		// take one's answer for the other when they come back in the
		// other order, as DoH's parallel streams may bring them.
		out, _ := e.c.Exec(t, id, "sh", "-c", "nslookup -type=a "+resolvertest.Name+" 2>&1")
		if !strings.Contains(out, resolvertest.A.String()) || from.Queries() == before {
			t.Errorf("a query with %s: %q (upstream queries %d → %d), want its answer %s", what, out, before, from.Queries(), resolvertest.A)
		}
	}
	lookup("a DNS-over-TLS Resolver", upstream)

	st := e.updatePolicy(id, 1, &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
		Resolvers: []*ctrlv1.NetworkPolicyResolver{{ResolverId: dohID, Path: directResolverPath}}})
	wantResolverStatus(t, st, dohID, directResolverPath)
	lookup("a DNS-over-HTTPS Resolver", upstream)

	st = e.updatePolicy(id, 2, &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
		Egresses:  []*ctrlv1.NetworkPolicyEgress{{EgressId: egressID, Destinations: []string{"10.1.2.0/24"}}},
		Resolvers: []*ctrlv1.NetworkPolicyResolver{{ResolverId: udpID, Path: resolverVia(egressID)}}})
	wantResolverStatus(t, st, udpID, resolverVia(egressID))
	lookup("a udp Resolver behind a SOCKS5 Egress (UDP ASSOCIATE)", behind)
	if obs := e.workspace(id).GetEgressObservations(); len(obs) != 0 {
		t.Errorf("egress observations after answers through it: %v", obs)
	}
}
