package fleet_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	socks5 "github.com/armon/go-socks5"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/testenv/testnet"
)

// A caller's SOCKS5 proxy (with a password) at a public address of a test
// internet, which alone reaches a private host there, as a caller's
// network would. It counts the connections it was asked to make.
func startSOCKS5(t *testing.T, inet *testnet.Internet, at netip.AddrPort) *atomic.Int32 {
	t.Helper()
	var dials atomic.Int32
	srv, err := socks5.New(&socks5.Config{
		Credentials: socks5.StaticCredentials{"caller": "s3cret"},
		Dial: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			dials.Add(1)
			err = inet.Run(func() error {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln := inet.Listen(t, "tcp", at.String())
	go func() { _ = srv.Serve(ln) }()
	return &dials
}

// Through an Egress, from inside a real guest: a TCP connection whose
// destination the policy's egresses entry covers leaves through the
// caller's SOCKS5 proxy (with its password), to a private address the hard
// deny would refuse directly; an echo to it is refused at once; a private
// address the entry does not cover is still refused, and what no entry
// covers still leaves directly.
func TestAnEgressForwardsFromAGuest(t *testing.T) {
	e := newVMEnv(t)
	proxyAt := netip.MustParseAddrPort("8.8.8.8:1080")
	private := netip.MustParseAddr("10.1.2.3")
	inet := newInternet(t, proxyAt.Addr(), private)
	dials := startSOCKS5(t, inet.Internet, proxyAt)
	n := new(atomic.Int32)
	inet.accepted[private.String()] = n
	go serveEcho(inet.Listen(t, "tcp", netip.AddrPortFrom(private, 80).String()), n)
	e.startInternetNode(inet)

	eg, err := e.c.Egresses.CreateEgress(ctx, connect.NewRequest(&ctrlv1.CreateEgressRequest{
		Command: cmd("egress-1"),
		Spec: &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: proxyAt.String(),
			Username: "caller", Password: "s3cret"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	req := createRequest("create-egress")
	req.Spec.NetworkPolicy = &ctrlv1.NetworkPolicy{
		Mode:     ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
		Egresses: []*ctrlv1.NetworkPolicyEgress{{EgressId: eg.Msg.GetEgress().GetEgressId(), Destinations: []string{"10.1.2.3/32"}}},
	}
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	w := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if st := w.GetNetworkPolicyStatus(); st.GetAppliedRevision() != 1 || len(st.GetEgresses()) != 1 ||
		st.GetEgresses()[0].GetEgressId() != eg.Msg.GetEgress().GetEgressId() || st.GetEgresses()[0].GetAppliedRevision() != 1 {
		t.Errorf("network_policy_status %v, want revision 1 confirmed with the Egress at its revision 1", st)
	}

	if out, code := e.c.Exec(t, id, "sh", "-c", "echo forwarded | nc -w 10 10.1.2.3 80"); code != 0 || out != "forwarded\n" {
		t.Errorf("TCP to the destination the Egress covers: exit %d %q", code, out)
	}
	if dials.Load() != 1 || n.Load() != 1 {
		t.Errorf("the proxy made %d connections and the private host accepted %d, want 1 each", dials.Load(), n.Load())
	}
	if _, code := e.c.Exec(t, id, "ping", "-c", "1", "-W", "10", "10.1.2.3"); code == 0 {
		t.Error("ping of a forwarded destination was answered")
	}
	out, _ := e.c.Exec(t, id, "sh", "-c", "nc -w 10 10.99.0.1 80 </dev/null; echo nc=$?; echo direct | nc -w 10 8.8.4.4 80")
	if !strings.Contains(out, "Connection refused") || !strings.Contains(out, "direct") || dials.Load() != 1 {
		t.Errorf("an uncovered private host and a public one: %q (proxy dials %d), want the first refused, the second direct", out, dials.Load())
	}
}

// An Egress whose endpoint does not answer: the guest's connection is
// reset (never left directly), and the Workspace's egress_observations
// report ENDPOINT_UNREACHABLE with the run's failing_since, unchanged
// while the failures go on; the first connection the Egress makes once its
// proxy is up clears it.
func TestAnEgressFaultIsObservedUntilItsNextSuccess(t *testing.T) {
	e := newVMEnv(t)
	proxyAt := netip.MustParseAddrPort("8.8.8.8:1080")
	private := netip.MustParseAddr("10.1.2.3")
	inet := newInternet(t, proxyAt.Addr(), private)
	n := new(atomic.Int32)
	inet.accepted[private.String()] = n
	go serveEcho(inet.Listen(t, "tcp", netip.AddrPortFrom(private, 80).String()), n)
	e.startInternetNode(inet)
	eg, err := e.c.Egresses.CreateEgress(ctx, connect.NewRequest(&ctrlv1.CreateEgressRequest{
		Command: cmd("egress-down"),
		Spec: &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: proxyAt.String(),
			Username: "caller", Password: "s3cret"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	egressID := eg.Msg.GetEgress().GetEgressId()
	req := createRequest("create-egress-down")
	req.Spec.NetworkPolicy = &ctrlv1.NetworkPolicy{
		Mode:     ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
		Egresses: []*ctrlv1.NetworkPolicyEgress{{EgressId: egressID, Destinations: []string{"10.1.2.0/24"}}},
	}
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)

	nc := "nc -w 10 10.1.2.3 80 </dev/null; echo nc=$?"
	if out, _ := e.c.Exec(t, id, "sh", "-c", nc); !strings.Contains(out, "Connection refused") || n.Load() != 0 {
		t.Errorf("TCP through an Egress that is down: %q, want a reset and nothing reached", out)
	}
	var first *ctrlv1.EgressObservation
	waitLong(t, "the fault observed", func() bool {
		obs := e.workspace(id).GetEgressObservations()
		if len(obs) == 1 {
			first = obs[0]
		}
		return first != nil
	})
	if first.GetEgressId() != egressID || first.GetKind() != ctrlv1.EgressObservationKind_EGRESS_OBSERVATION_KIND_ENDPOINT_UNREACHABLE ||
		first.GetFailingSince() == nil || first.GetObservedAt() == nil {
		t.Errorf("egress observation %v, want ENDPOINT_UNREACHABLE with failing_since and observed_at", first)
	}
	_, _ = e.c.Exec(t, id, "sh", "-c", nc)
	version := e.c.Registration(t, "node-a").GetObservation().GetObservationVersion()
	waitLong(t, "two more observations", func() bool {
		return e.c.Registration(t, "node-a").GetObservation().GetObservationVersion() >= version+2
	})
	w := e.workspace(id)
	if obs := w.GetEgressObservations(); len(obs) != 1 || !proto.Equal(obs[0], first) {
		t.Errorf("egress observations while the failures go on: %v, want %v unchanged", obs, first)
	}
	if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || w.GetGeneration() != 1 {
		t.Errorf("a Workspace with an egress observation: %v at generation %d, want it AVAILABLE at 1 (an observation is not a state)", w.GetState(), w.GetGeneration())
	}

	startSOCKS5(t, inet.Internet, proxyAt)
	if out, code := e.c.Exec(t, id, "sh", "-c", "echo up | nc -w 10 10.1.2.3 80"); code != 0 || out != "up\n" {
		t.Errorf("TCP once the proxy is up: exit %d %q", code, out)
	}
	waitLong(t, "the fault cleared", func() bool { return len(e.workspace(id).GetEgressObservations()) == 0 })
}
