package main

import (
	"context"
	"io"
	"net"
	"net/netip"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/egress/egresstest"
	"github.com/kibotos/kibotos/internal/testenv/testnet"
)

// The slot's Egress: a SOCKS5 proxy with UDP ASSOCIATE at egressAt in the
// test internet (egresstest.OpenSOCKS5UDP: github.com/armon/go-socks5, the
// server egresstest runs for the tests, with its rule hook serving
// ASSOCIATE), which forwardedHost's servers are reached through and, with
// -resolvers, the Resolvers on the Egress's path. The same server code as
// publicHost's runs at forwardedHost, so direct and forwarded differ only
// by the proxy. One Egress, because a policy names at most one.
var (
	egressAt      = netip.MustParseAddrPort("8.8.8.8:1080")
	forwardedHost = netip.MustParseAddr("8.8.4.5")
)

const benchEgressID = "bench-egress"

// slotPolicy is PUBLIC_INTERNET with forwardedHost sent through the Egress.
func slotPolicy() netslot.Policy {
	return netslot.Policy{
		Network: &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET, Revision: 1,
			Egresses: []*ctrlv1.NetworkPolicyEgress{{EgressId: benchEgressID, Destinations: []string{forwardedHost.String() + "/32"}}}},
		Egresses: []*nodev1.ResolvedEgress{{EgressId: benchEgressID, Revision: 1, Spec: &ctrlv1.EgressSpec{
			Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: egressAt.String(),
			Username: egresstest.User, Password: egresstest.Password, UdpEnabled: true,
		}}},
	}
}

// startSOCKS5 serves the Egress in inet: it listens there and dials its
// destinations and relays its datagrams from there.
func startSOCKS5(inet *testnet.Internet) (io.Closer, error) {
	return egresstest.OpenSOCKS5UDP(inet, egressAt, nil, dialIn(inet.Run), egresstest.UDPOptions{})
}

// dialIn dials from where run runs (the test internet): a proxy's
// connections to its destinations.
func dialIn(run in) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = run(func() error {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}
