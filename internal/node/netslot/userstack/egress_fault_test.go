package userstack_test

import (
	"context"
	"net/netip"
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/egress/egresstest"
)

// A destination the Egress reports refused is the result of one
// connection, not a fault of the Egress: it ends the Egress's run of
// failures as a success would. (The run here is AUTHENTICATION_FAILED,
// from a wrong password; the next revision has the right one.)
func TestADestinationTheEgressRefusesIsNoEgressFault(t *testing.T) {
	proxy := egresstest.SOCKS5(t, nil, proxyWorld(nil)) // reaches nothing: every destination is refused
	up := &fakeUplink{tcp: map[netip.AddrPort]string{endpointAddr: proxy.String()}}
	spec := func(password string) *ctrlv1.EgressSpec {
		return &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: endpointAddr.String(),
			Username: egresstest.User, Password: password}
	}
	pol := func(rev uint64, password string) netslot.Policy {
		np := &ctrlv1.NetworkPolicy{Mode: forwarding.Mode, Revision: 1, Egresses: forwarding.Egresses}
		return netslot.Policy{Network: np, Egresses: []*nodev1.ResolvedEgress{{EgressId: egressID, Revision: rev, Spec: spec(password)}}}
	}
	a, g := attached(t, up, pol(1, "wrong"))
	refused := func(what string) {
		t.Helper()
		if c, err := dial(withTimeout(t), g, privateDst); err == nil {
			_ = c.Close()
			t.Fatalf("%s: the guest's connection was accepted", what)
		}
	}
	refused("through an Egress that refuses the password")
	if f := a.EgressFaults(); len(f) != 1 || f[0].Kind != ctrlv1.EgressObservationKind_EGRESS_OBSERVATION_KIND_AUTHENTICATION_FAILED {
		t.Fatalf("egress faults after a wrong password: %+v, want AUTHENTICATION_FAILED", f)
	}
	if err := a.Apply(context.Background(), pol(2, egresstest.Password), 0); err != nil {
		t.Fatal(err)
	}
	refused("to a destination the Egress refuses")
	if f := a.EgressFaults(); len(f) != 0 {
		t.Errorf("egress faults after the Egress refused a destination: %+v, want none (a destination result)", f)
	}
}

// egress_observations has "one entry for each Egress the current execution
// forwards through that is failing": a policy revision that names the
// failing Egress no more drops its fault, though no connection through it
// ever succeeded (none can any more).
func TestAnEgressThePolicyDropsKeepsNoFault(t *testing.T) {
	proxy := egresstest.SOCKS5(t, nil, proxyWorld(nil))
	up := &fakeUplink{tcp: map[netip.AddrPort]string{endpointAddr: proxy.String()}}
	spec := &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: endpointAddr.String(),
		Username: egresstest.User, Password: "wrong"}
	np := &ctrlv1.NetworkPolicy{Mode: forwarding.Mode, Revision: 1, Egresses: forwarding.Egresses}
	a, g := attached(t, up, netslot.Policy{Network: np, Egresses: []*nodev1.ResolvedEgress{{EgressId: egressID, Revision: 1, Spec: spec}}})
	if c, err := dial(withTimeout(t), g, privateDst); err == nil {
		_ = c.Close()
		t.Fatal("the guest's connection through an Egress that refuses the password was accepted")
	}
	if f := a.EgressFaults(); len(f) != 1 {
		t.Fatalf("egress faults after a wrong password: %+v, want one", f)
	}
	if err := a.Apply(context.Background(), netslot.Policy{Network: &ctrlv1.NetworkPolicy{Mode: forwarding.Mode, Revision: 2}}, 0); err != nil {
		t.Fatal(err)
	}
	if f := a.EgressFaults(); len(f) != 0 {
		t.Errorf("egress faults once the policy names the Egress no more: %+v, want none", f)
	}
}
