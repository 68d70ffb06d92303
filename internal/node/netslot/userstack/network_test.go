package userstack_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
)

// The guest's nameserver is the link DNS address: the gateway in the
// family of the first deployment resolver, fe80::1 for IPv6, 10.0.2.2 for
// IPv4 or when there is none.
func TestTheLinkDNSAddressFollowsTheFirstResolversFamily(t *testing.T) {
	for _, c := range []struct {
		resolvers []netip.AddrPort
		want      netip.Addr
	}{
		{nil, userstack.GatewayV4},
		{[]netip.AddrPort{netip.MustParseAddrPort("9.9.9.9:53"), netip.MustParseAddrPort("[2620:fe::fe]:53")}, userstack.GatewayV4},
		{[]netip.AddrPort{netip.MustParseAddrPort("[2620:fe::fe]:53"), netip.MustParseAddrPort("9.9.9.9:53")}, netip.MustParseAddr("fe80::1")},
	} {
		n, err := userstack.NewNetwork(userstack.NetworkConfig{Uplink: &fakeUplink{}, Resolvers: c.resolvers})
		if err != nil {
			t.Fatal(err)
		}
		a, err := n.Attach(context.Background(), "i-1", netslot.Policy{})
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Guest().Nameserver; got != c.want || n.LinkDNS() != c.want {
			t.Errorf("resolvers %v: nameserver %s (LinkDNS %s), want %s", c.resolvers, got, n.LinkDNS(), c.want)
		}
		_ = a.Release()
	}
}
