package fleet_test

import (
	"io"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/miekg/dns"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
	"github.com/kibotos/kibotos/internal/testenv"
	"github.com/kibotos/kibotos/internal/testenv/testnet"
)

// The test internet of these tests: public hosts (a TCP echo service and
// a ping-answering host at 8.8.4.4, a second service at 8.8.4.5, the
// deployment resolver at 9.9.9.9) and hosts in hard-denied ranges
// (private, CGNAT, the metadata address), each counting the connections
// it accepted.
type internet struct {
	*testnet.Internet
	accepted map[string]*atomic.Int32 // address → connections accepted
}

var (
	echoHost     = netip.MustParseAddr("8.8.4.4")
	echoHostV6   = netip.MustParseAddr("2606:4700::1111")
	otherHost    = netip.MustParseAddr("8.8.4.5")
	resolverHost = netip.MustParseAddr("9.9.9.9")
	deniedHosts  = []netip.Addr{netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("100.64.0.1"), netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00::1")}
)

func newInternet(t *testing.T, more ...netip.Addr) *internet {
	t.Helper()
	hosts := append(append([]netip.Addr{echoHost, echoHostV6, otherHost, resolverHost}, deniedHosts...), more...)
	inet := &internet{Internet: testnet.New(t, hosts...), accepted: map[string]*atomic.Int32{}}
	for _, h := range append([]netip.Addr{echoHost, echoHostV6, otherHost}, deniedHosts...) {
		n := new(atomic.Int32)
		inet.accepted[h.String()] = n
		ln := inet.Listen(t, "tcp", netip.AddrPortFrom(h, 80).String())
		go serveEcho(ln, n)
	}
	serveDNS(t, inet, netip.AddrPortFrom(resolverHost, 53), "192.0.2.7")
	return inet
}

func serveEcho(ln net.Listener, accepted *atomic.Int32) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		accepted.Add(1)
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// startInternetNode runs node-a with network slots whose uplink is in the
// test internet, resolving through its resolver; a restart (stateDir and
// poolDir of the agent before) keeps them.
func (e *vmEnv) startInternetNode(inet *internet) *testenv.Node {
	e.t.Helper()
	return e.startInternetNodeAt(inet, "", e.t.TempDir())
}

func (e *vmEnv) startInternetNodeAt(inet *internet, stateDir, poolDir string) *testenv.Node {
	e.t.Helper()
	return e.startInternetNodeWith(inet, stateDir, poolDir, userstack.NetworkConfig{Resolvers: []netip.AddrPort{netip.AddrPortFrom(resolverHost, 53)}})
}

// startInternetNodeWith is startInternetNodeAt with the slots' config
// (its uplink is the test internet's).
func (e *vmEnv) startInternetNodeWith(inet *internet, stateDir, poolDir string, cfg userstack.NetworkConfig) *testenv.Node {
	e.t.Helper()
	cfg.Uplink = inet.Uplink()
	network, err := userstack.NewNetwork(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	n := e.c.StartNodeWith(e.t, "node-a", stateDir, func(cfg *node.Config) { cfg.Network = network },
		node.Pool{Name: "default", Dir: poolDir, Default: true})
	e.c.EnsureCapacity(e.t, "default", testenv.DefaultPoolCapacity)
	e.t.Cleanup(n.PowerOff)
	return n
}

// Under PUBLIC_INTERNET, from inside a real guest: TCP to a public host
// carries bytes both ways, ping is answered, the link DNS address answers
// through the deployment resolver; every hard-denied host is refused at
// once and never reached (allow included: an allow entry acts only on
// forwarded traffic); deny refuses a destination only allow does not
// cover, and never acts on link DNS.
func TestPublicInternetFromAGuest(t *testing.T) {
	e := newVMEnv(t)
	inet := newInternet(t)
	e.startInternetNode(inet)
	req := createRequest("create-public")
	req.Spec.NetworkPolicy = &ctrlv1.NetworkPolicy{
		Mode:  ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
		Deny:  []string{"8.8.4.0/24", "9.9.9.9/32"},
		Allow: []string{"8.8.4.4/32", "10.99.0.1/32"},
	}
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	if s := created.Msg.GetWorkspace().GetNetworkPolicyStatus(); s != nil {
		t.Errorf("network_policy_status before any execution: %v, want absent", s)
	}
	w := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if s := w.GetNetworkPolicyStatus(); s.GetAppliedRevision() != 1 || s.GetAppliedAt() == nil || len(s.GetEgresses()) != 0 {
		t.Errorf("network_policy_status once AVAILABLE: %v, want revision 1 confirmed, no Egress", s)
	}

	out, code := e.c.Exec(t, id, "sh", "-c", "echo through | nc -w 10 8.8.4.4 80")
	if code != 0 || out != "through\n" {
		t.Errorf("TCP to a public host in allow: exit %d %q", code, out)
	}
	if out, code := e.c.Exec(t, id, "ping", "-c", "1", "-W", "10", "8.8.4.4"); code != 0 || !strings.Contains(out, "1 packets received") {
		t.Errorf("ping of a public host: exit %d %q", code, out)
	}
	if out, code := e.c.Exec(t, id, "sh", "-c", "echo six | nc -w 10 2606:4700::1111 80"); code != 0 || out != "six\n" {
		t.Errorf("TCP to a public IPv6 host: exit %d %q", code, out)
	}
	if out, code := e.c.Exec(t, id, "ping", "-6", "-c", "1", "-W", "10", "2606:4700::1111"); code != 0 || !strings.Contains(out, "1 packets received") {
		t.Errorf("ping of a public IPv6 host: exit %d %q", code, out)
	}
	if out, code := e.c.Exec(t, id, "nslookup", "kibotos.test"); code != 0 || !strings.Contains(out, "192.0.2.7") {
		t.Errorf("a query to the link DNS address (its resolver in deny): exit %d %q", code, out)
	}
	refused := map[string]string{"8.8.4.5": "deny"}
	for _, h := range deniedHosts {
		refused[h.String()] = "the hard deny"
	}
	for host, why := range refused {
		out, code := e.c.Exec(t, id, "sh", "-c", "nc -w 10 "+host+" 80 </dev/null; echo nc=$?")
		if strings.Contains(host, ":") {
			why += " (IPv6)"
		}
		if !strings.Contains(out, "Connection refused") || !strings.Contains(out, "nc=1") {
			t.Errorf("TCP to %s (refused by %s): exit %d %q", host, why, code, out)
		}
		if n := inet.accepted[host].Load(); n != 0 {
			t.Errorf("%s (refused by %s) accepted %d connections", host, why, n)
		}
	}
	if _, code := e.c.Exec(t, id, "ping", "-c", "1", "-W", "10", "10.99.0.1"); code == 0 {
		t.Error("ping of a hard-denied host in allow was answered")
	}
}

// A live update: UpdateWorkspaceNetworkPolicy on a running Workspace is
// applied without a restart, network_policy_status.applied_revision moves
// to the new revision once the node confirmed it, and from then on the
// guest's new connections follow it. A connection open before it that it
// refuses stays for the call's drain_seconds, reported by
// draining_revision, then closes. After a stop the status is absent.
func TestANetworkPolicyUpdateReachesTheRunningGuest(t *testing.T) {
	e := newVMEnv(t)
	inet := newInternet(t)
	e.startInternetNode(inet)
	req := createRequest("create-live")
	req.Spec.NetworkPolicy = &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET}
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	before := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if out, code := e.c.Exec(t, id, "sh", "-c", "echo before | nc -w 10 8.8.4.4 80"); code != 0 || out != "before\n" {
		t.Fatalf("TCP before the update: exit %d %q", code, out)
	}
	// A connection that stays open: nc's input is a FIFO a sleep holds
	// open (not a pipeline, which the shell would wait out whole).
	if out, code := e.c.Exec(t, id, "sh", "-c", "setsid sh -c 'mkfifo /tmp/f; (sleep 600 > /tmp/f &); nc 8.8.4.4 80 < /tmp/f; echo closed > /tmp/nc-done' </dev/null >/dev/null 2>&1 &"); code != 0 {
		t.Fatalf("the long connection: exit %d %q", code, out)
	}
	waitLong(t, "the long connection accepted", func() bool { return inet.accepted["8.8.4.4"].Load() == 2 })
	updated, err := e.c.Workspaces.UpdateWorkspaceNetworkPolicy(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceNetworkPolicyRequest{
		Command: cmd("deny-echo"), WorkspaceId: id, ExpectedRevision: 1,
		NetworkPolicy: &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET, Deny: []string{"8.8.4.4/32"}},
		DrainSeconds:  8,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := updated.Msg.GetWorkspace().GetSpec().GetNetworkPolicy().GetRevision(); got != 2 {
		t.Fatalf("revision after the update: %d", got)
	}
	var w *ctrlv1.Workspace
	waitLong(t, "revision 2 confirmed", func() bool {
		w = e.workspace(id)
		return w.GetNetworkPolicyStatus().GetAppliedRevision() == 2
	})
	if w.GetGeneration() != before.GetGeneration() {
		t.Errorf("generation %d after the update, want %d: no restart", w.GetGeneration(), before.GetGeneration())
	}
	if got := w.GetNetworkPolicyStatus().GetDrainingRevision(); got != 1 {
		t.Errorf("draining_revision %d right after the update, want 1 (the long connection drains)", got)
	}
	if out, _ := e.c.Exec(t, id, "cat", "/tmp/nc-done"); strings.Contains(out, "closed") {
		t.Error("the long connection closed before its drain ended")
	}
	waitLong(t, "the drain over", func() bool {
		return e.workspace(id).GetNetworkPolicyStatus().GetDrainingRevision() == 0
	})
	waitLong(t, "the long connection closed", func() bool {
		out, _ := e.c.Exec(t, id, "cat", "/tmp/nc-done")
		return strings.Contains(out, "closed")
	})
	if out, _ := e.c.Exec(t, id, "cat", "/etc/resolv.conf"); !strings.Contains(out, "nameserver 10.0.2.2\n") {
		t.Errorf("the guest's nameserver after a policy change: %q, want the link DNS address it booted with", out)
	}
	out, _ := e.c.Exec(t, id, "sh", "-c", "nc -w 10 8.8.4.4 80 </dev/null; echo nc=$?; echo other | nc -w 10 8.8.4.5 80")
	if !strings.Contains(out, "Connection refused") || !strings.Contains(out, "nc=1") || !strings.Contains(out, "other") {
		t.Errorf("after revision 2 was confirmed: %q, want 8.8.4.4 refused and 8.8.4.5 reached", out)
	}
	if _, err := e.c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmd("stop-live"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	if s := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED).GetNetworkPolicyStatus(); s != nil {
		t.Errorf("network_policy_status after the stop: %v, want absent", s)
	}
}

// An update admitted while the Workspace is still being created reaches
// the guest too: the command waits for the start, then applies the newer
// revision, and applied_revision catches up with the spec.
func TestANetworkPolicyUpdateDuringCreateReachesTheGuest(t *testing.T) {
	e := newVMEnv(t)
	inet := newInternet(t)
	e.startInternetNode(inet)
	req := createRequest("create-racing")
	req.Spec.NetworkPolicy = &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET}
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	if _, err := e.c.Workspaces.UpdateWorkspaceNetworkPolicy(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceNetworkPolicyRequest{
		Command: cmd("deny-while-creating"), WorkspaceId: id, ExpectedRevision: 1,
		NetworkPolicy: &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET, Deny: []string{"8.8.4.4/32"}},
	})); err != nil {
		t.Fatal(err)
	}
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	waitLong(t, "revision 2 confirmed", func() bool {
		w := e.workspace(id)
		return w.GetSpec().GetNetworkPolicy().GetRevision() == 2 && w.GetNetworkPolicyStatus().GetAppliedRevision() == 2
	})
	out, _ := e.c.Exec(t, id, "sh", "-c", "nc -w 10 8.8.4.4 80 </dev/null; echo nc=$?")
	if !strings.Contains(out, "Connection refused") || inet.accepted["8.8.4.4"].Load() != 0 {
		t.Errorf("after revision 2 was confirmed: %q, want 8.8.4.4 refused", out)
	}
}

// The node agent restarting under a running guest: the guest's network is
// attached again, under the policy in force (its record keeps it), and new
// connections leave again once the agent is back; the guest never restarts.
func TestTheNetworkComesBackAfterAnAgentRestart(t *testing.T) {
	e := newVMEnv(t)
	inet := newInternet(t)
	a := e.startInternetNode(inet)
	req := createRequest("create-restart")
	req.Spec.NetworkPolicy = &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET, Deny: []string{"8.8.4.5/32"}}
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	before := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if out, code := e.c.Exec(t, id, "sh", "-c", "echo one | nc -w 10 8.8.4.4 80"); code != 0 || out != "one\n" {
		t.Fatalf("TCP before the restart: exit %d %q", code, out)
	}
	a.Stop(t) // the VM runs on; its network waits for an agent
	e.startInternetNodeAt(inet, a.StateDir, a.PoolDir)
	waitLong(t, "TCP through the new agent", func() bool {
		// unavailable until the new agent reached the guest's channel
		out, _, err := e.c.TryExec(id, "sh", "-c", "echo two | nc -w 5 8.8.4.4 80")
		return err == nil && out == "two\n"
	})
	out, _ := e.c.Exec(t, id, "sh", "-c", "nc -w 10 8.8.4.5 80 </dev/null; echo nc=$?")
	if !strings.Contains(out, "Connection refused") || inet.accepted["8.8.4.5"].Load() != 0 {
		t.Errorf("the deny entry after the restart: %q, want 8.8.4.5 still refused", out)
	}
	if w := e.workspace(id); w.GetGeneration() != before.GetGeneration() || w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
		t.Errorf("after the agent restart: %v at generation %d, want AVAILABLE at %d", w.GetState(), w.GetGeneration(), before.GetGeneration())
	}
}

// A node whose first deployment resolver is IPv6 gives its guests the
// IPv6 link DNS address, fe80::1, as their only nameserver (scoped to the
// guest's one interface), and a query to it goes to that resolver, not to
// the IPv4 one after it (each answers the name differently).
func TestAnIPv6FirstResolverGivesTheGuestFe80LinkDNS(t *testing.T) {
	e := newVMEnv(t)
	resolverV6 := netip.MustParseAddr("2620:fe::fe")
	inet := newInternet(t, resolverV6)
	serveDNS(t, inet, netip.AddrPortFrom(resolverV6, 53), "192.0.2.66")
	e.startInternetNodeWith(inet, "", t.TempDir(), userstack.NetworkConfig{
		Resolvers: []netip.AddrPort{netip.AddrPortFrom(resolverV6, 53), netip.AddrPortFrom(resolverHost, 53)}})
	req := createRequest("create-v6-dns")
	req.Spec.NetworkPolicy = &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET}
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if out, code := e.c.Exec(t, id, "grep", "nameserver", "/etc/resolv.conf"); code != 0 || out != "nameserver fe80::1%eth0\n" {
		t.Errorf("the guest's nameservers: exit %d %q, want only fe80::1 on eth0", code, out)
	}
	if out, code := e.c.Exec(t, id, "nslookup", "kibotos.test"); code != 0 || !strings.Contains(out, "192.0.2.66") {
		t.Errorf("a query to the IPv6 link DNS address: exit %d %q, want the IPv6 resolver's answer", code, out)
	}
}

// serveDNS answers every A query at addr (a host of inet) with a.
func serveDNS(t *testing.T, inet *internet, addr netip.AddrPort, a string) {
	t.Helper()
	pc := inet.ListenPacket(t, "udp", addr.String())
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg).SetReply(q)
		if rr, err := dns.NewRR(q.Question[0].Name + " 60 IN A " + a); err == nil {
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
}

// The hard deny covers ctrl's and the node's own addresses (Own; public
// ones here, as a node on the internet has): a guest's connection to one
// is refused at once and never reached, allow included, and so is one to
// ctrl's ports at the gateway or at loopback, while the public host beside
// them is reached.
func TestTheNodesOwnAddressesAreHardDenied(t *testing.T) {
	e := newVMEnv(t)
	inet := newInternet(t)
	e.startInternetNodeWith(inet, "", t.TempDir(), userstack.NetworkConfig{
		Resolvers: []netip.AddrPort{netip.AddrPortFrom(resolverHost, 53)}, Own: []netip.Addr{otherHost, echoHostV6}})
	req := createRequest("create-own")
	req.Spec.NetworkPolicy = &ctrlv1.NetworkPolicy{
		Mode:  ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
		Allow: []string{otherHost.String() + "/32"},
	}
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	for _, own := range []netip.Addr{otherHost, echoHostV6} {
		out, code := e.c.Exec(t, id, "sh", "-c", "nc -w 10 "+own.String()+" 80 </dev/null; echo nc=$?")
		if !strings.Contains(out, "Connection refused") || !strings.Contains(out, "nc=1") {
			t.Errorf("TCP to the node's own %s: exit %d %q, want refused", own, code, out)
		}
		if n := inet.accepted[own.String()].Load(); n != 0 {
			t.Errorf("the node's own %s accepted %d connections", own, n)
		}
	}
	// ctrl's ports, as a guest could try them: at the gateway (QEMU's
	// user-mode network would lead there to the host's loopback) and at
	// the host's loopback itself. The slot is its own host: both refused.
	for _, ep := range []string{e.c.Ctrl.Client.WorkspaceEndpoint, e.c.Ctrl.Client.OperatorEndpoint, e.c.Ctrl.NodeEndpoint} {
		u, err := url.Parse(ep)
		if err != nil {
			t.Fatal(err)
		}
		for _, host := range []string{userstack.GatewayV4.String(), u.Hostname()} {
			out, code := e.c.Exec(t, id, "sh", "-c", "nc -w 10 "+host+" "+u.Port()+" </dev/null; echo nc=$?")
			if !strings.Contains(out, "nc=1") {
				t.Errorf("TCP to ctrl's port %s at %s: exit %d %q, want refused", u.Port(), host, code, out)
			}
		}
	}
	if out, code := e.c.Exec(t, id, "sh", "-c", "echo through | nc -w 10 "+echoHost.String()+" 80"); code != 0 || out != "through\n" {
		t.Errorf("TCP to a public host beside them: exit %d %q", code, out)
	}
}
