package userstack_test

import (
	"errors"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kibotos/kibotos/internal/node/netslot/egress"
	"github.com/kibotos/kibotos/internal/node/netslot/egress/egresstest"
	"github.com/kibotos/kibotos/internal/node/netslot/policy"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
)

// movedEndpoint is where revision 2 of the Egress has its endpoint: a
// second proxy.
var movedEndpoint = netip.MustParseAddrPort("192.0.9.81:1080")

// compileAtEgressRevision is the forwarding policy with the slot's dialer
// of egressID at revision rev.
func compileAtEgressRevision(t *testing.T, rev uint64) *policy.Policy {
	t.Helper()
	c, err := policy.Compile(forwarding, policy.Context{
		LinkDNS:  []netip.Addr{userstack.GatewayV4, userstack.GatewayV6},
		Egresses: map[string]policy.EgressRef{egressID: {Revision: rev}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func echoes(c net.Conn, msg string) error {
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != msg {
		return errors.New("echoed " + string(got))
	}
	return nil
}

// An Egress moving to its next revision (its endpoint moved to a second
// proxy) under the same policy revision: a connection through the old
// revision keeps its path for the update's drain while that Egress reports
// the old revision draining (and the policy nothing), then is reset; a new
// connection goes through the new endpoint at once.
func TestAnEgressRevisionChangeDrainsItsConnections(t *testing.T) {
	srv := echoServer(t)
	ca := egresstest.NewCA(t)
	routes := map[netip.AddrPort]string{publicV4: srv}
	first, spec := startEgress(t, egressKinds[0], ca, routes)
	second, _ := startEgress(t, egressKinds[0], ca, routes)
	up := &fakeUplink{tcp: map[netip.AddrPort]string{movedEndpoint: second.String()}}
	s, conn, _ := forwardingSlot(t, spec, ca, up, first)
	g := guestStack(t, conn)
	old, err := dial(withTimeout(t), g, publicV4)
	if err != nil {
		t.Fatal(err)
	}
	if err := echoes(old, "revision 1"); err != nil {
		t.Fatal(err)
	}

	spec.Endpoint = movedEndpoint.String()
	d, err := egress.New(egress.Config{Spec: spec, RootCAs: ca.Pool, Lookup: net.DefaultResolver.LookupNetIP, Check: hardDeny, Dial: up.DialTCP})
	if err != nil {
		t.Fatal(err)
	}
	s.SetEgresses(map[string]userstack.EgressDialer{egressID: d})
	s.SetPolicy(compileAtEgressRevision(t, 2), 1, 500*time.Millisecond)
	if got := s.EgressDraining(); !maps.Equal(got, map[string]uint64{egressID: 1}) || s.Draining() != 0 {
		t.Errorf("right after the Egress moved to revision 2: egress draining %v, policy draining %d; want %s at 1, and 0", got, s.Draining(), egressID)
	}
	if err := echoes(old, "during the drain"); err != nil {
		t.Errorf("the revision 1 connection during its drain: %v", err)
	}
	fresh, err := dial(withTimeout(t), g, publicV4)
	if err != nil {
		t.Fatalf("a new connection after the move: %v", err)
	}
	if dials := up.dials(); !slices.Equal(dials, []netip.AddrPort{endpointAddr, movedEndpoint}) {
		t.Errorf("the uplink dialled %v; want the first endpoint, then the moved one", dials)
	}

	_ = old.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := old.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the revision 1 connection after its drain: %v, want it reset", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(s.EgressDraining()) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling a condition, not waiting for readiness
	}
	if got := s.EgressDraining(); len(got) != 0 {
		t.Errorf("egress draining %v once the old connection closed, want none", got)
	}
	if err := echoes(fresh, "revision 2"); err != nil {
		t.Errorf("the revision 2 connection: %v", err)
	}
}

// forwardedConnection is a slot forwarding through one Egress (SOCKS5)
// and a guest connection open through it to an echo server.
func forwardedConnection(t *testing.T) (*userstack.Slot, net.Conn) {
	t.Helper()
	srv := echoServer(t)
	ca := egresstest.NewCA(t)
	proxy, spec := startEgress(t, egressKinds[0], ca, map[netip.AddrPort]string{publicV4: srv})
	s, conn, _ := forwardingSlot(t, spec, ca, &fakeUplink{tcp: map[netip.AddrPort]string{}}, proxy)
	c, err := dial(withTimeout(t), guestStack(t, conn), publicV4)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// A policy revision that leaves the Egress's revision as it was does not
// move its connections: they stay open with nothing draining.
func TestTheSameEgressRevisionKeepsItsConnections(t *testing.T) {
	s, c := forwardedConnection(t)
	s.SetPolicy(compileAtEgressRevision(t, 1), 2, 0)
	if err := echoes(c, "same egress revision"); err != nil || len(s.EgressDraining()) != 0 || s.Draining() != 0 {
		t.Errorf("after a policy revision with the same Egress revision: %v, egress draining %v, policy draining %d", err, s.EgressDraining(), s.Draining())
	}
}

// NetworkPolicyEgress.destinations are "matched as a set": a policy
// revision that only reorders them moves no connection, which keeps
// echoing with nothing draining.
func TestReorderedDestinationsMoveNoConnection(t *testing.T) {
	s, c := forwardedConnection(t)
	reordered := proto.CloneOf(forwarding)
	slices.Reverse(reordered.Egresses[0].Destinations)
	s.SetPolicy(compileForwarding(t, reordered), 2, 0)
	if err := echoes(c, "reordered"); err != nil || len(s.EgressDraining()) != 0 || s.Draining() != 0 {
		t.Errorf("after a policy revision that reorders the destinations: %v, egress draining %v, policy draining %d", err, s.EgressDraining(), s.Draining())
	}
}
