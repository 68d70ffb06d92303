package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"

	socks5 "github.com/armon/go-socks5"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/netslot"
)

// The slot's Egress: a SOCKS5 proxy (github.com/armon/go-socks5, the
// server egresstest runs for the tests) at egressAt in the test internet,
// which forwardedHost's servers are reached through. The same server code
// as publicHost's runs there, so direct and forwarded differ only by the
// proxy.
var (
	egressAt      = netip.MustParseAddrPort("8.8.8.8:1080")
	forwardedHost = netip.MustParseAddr("8.8.4.5")
)

const (
	benchEgressID = "bench-egress"
	egressUser    = "bench"
	egressPass    = "bench-password"
)

// slotPolicy is PUBLIC_INTERNET with forwardedHost sent through the Egress.
func slotPolicy() netslot.Policy {
	return netslot.Policy{
		Network: &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET, Revision: 1,
			Egresses: []*ctrlv1.NetworkPolicyEgress{{EgressId: benchEgressID, Destinations: []string{forwardedHost.String() + "/32"}}}},
		Egresses: []*nodev1.ResolvedEgress{{EgressId: benchEgressID, Revision: 1, Spec: &ctrlv1.EgressSpec{
			Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: egressAt.String(), Username: egressUser, Password: egressPass,
		}}},
	}
}

// startSOCKS5 serves the Egress in the test internet (run enters it): it
// listens there and dials its destinations from there.
func startSOCKS5(run in) (io.Closer, error) {
	srv, err := socks5.New(&socks5.Config{
		Credentials: socks5.StaticCredentials{egressUser: egressPass},
		Logger:      log.New(io.Discard, "", 0),
		Dial: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = run(func() error {
				var d net.Dialer
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	})
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	if err := run(func() (err error) {
		ln, err = net.Listen("tcp", egressAt.String())
		return err
	}); err != nil {
		return nil, fmt.Errorf("the Egress at %s: %w", egressAt, err)
	}
	go func() { _ = srv.Serve(ln) }()
	return ln, nil
}
