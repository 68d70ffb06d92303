package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/netip"
	"slices"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/resolver/resolvertest"
	"github.com/kibotos/kibotos/internal/testenv/testnet"
)

// The slot's guest's DNS query latency per Resolver protocol: after each
// round of the other measures, the slot's attachment is given policies
// (Apply, as a running execution's update is) whose link DNS address
// forwards to one Resolver each, and the guest asks it -queries times.
// The Resolvers are resolvertest's servers of all four protocols at
// upstreamHost in the test internet (the tests' upstream), asked over udp,
// tcp, tls and https directly from the uplink, and over udp and tcp
// through the slot's Egress (egress.go; UDP ASSOCIATE for udp); the
// baseline is the same policy without a Resolver, the deployment resolver
// 9.9.9.9 (the bench's own DNS server).
var upstreamHost = netip.MustParseAddr("9.9.9.53")

// dnsPath is one way the slot answers its link DNS address.
type dnsPath struct {
	name string
	// spec is the Resolver's; nil is none (the deployment resolver).
	spec *ctrlv1.ResolverSpec
	// egress: through the slot's Egress, else direct.
	egress  bool
	samples []time.Duration
}

// resolverBench is the slot's Resolvers and the policies that put each in
// force.
type resolverBench struct {
	upstream *resolvertest.Server
	paths    []*dnsPath
	revision uint64
}

// startResolvers runs the upstream in inet; the TLS upstreams'
// certificates are the returned pool's.
func startResolvers(inet *testnet.Internet) (*resolverBench, *x509.CertPool, error) {
	up, err := resolvertest.Open(inet, upstreamHost)
	if err != nil {
		return nil, nil, err
	}
	udp := &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, Address: up.UDP.String()}
	tcp := &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, Address: up.TCP.String()}
	b := &resolverBench{upstream: up, revision: 1, paths: []*dnsPath{
		{name: "deployment resolver (no Resolver)"},
		{name: "udp", spec: udp},
		{name: "tcp", spec: tcp},
		{name: "tls (DNS over TLS)", spec: &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TLS,
			Address: up.TLS.String(), ServerName: resolvertest.ServerName}},
		{name: "https (DNS over HTTPS)", spec: &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS,
			Url: up.URL, ServerName: resolvertest.ServerName}},
		{name: "udp through the Egress", spec: udp, egress: true},
		{name: "tcp through the Egress", spec: tcp, egress: true},
	}}
	return b, up.CA.Pool, nil
}

func (b *resolverBench) close() { _ = b.upstream.Close() }

// policy is slotPolicy with p's Resolver at the next revision.
func (b *resolverBench) policy(p *dnsPath) netslot.Policy {
	b.revision++
	pol := slotPolicy()
	pol.Network.Revision = b.revision
	if p.spec == nil {
		return pol
	}
	path := &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_Direct{Direct: &ctrlv1.ResolverDirectPath{}}}
	if p.egress {
		path = &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_EgressId{EgressId: benchEgressID}}
	}
	id := fmt.Sprintf("bench-resolver-%d", slices.Index(b.paths, p))
	pol.Network.Resolvers = []*ctrlv1.NetworkPolicyResolver{{ResolverId: id, Path: path}}
	pol.Resolvers = []*nodev1.ResolvedResolver{{ResolverId: id, Revision: 1, Path: path, Spec: p.spec}}
	return pol
}

// round asks every path n queries from s's guest, in order on even rounds
// and reversed on odd ones, then puts the baseline back in force for the
// other measures. keep adds the queries to the paths' samples.
func (b *resolverBench) round(ctx context.Context, s *subject, att netslot.Attachment, r, n int, keep bool) error {
	order := slices.Clone(b.paths)
	if r%2 == 1 {
		slices.Reverse(order)
	}
	for _, p := range order {
		if err := b.ask(ctx, s, att, p, n, keep); err != nil {
			return err
		}
	}
	if err := att.Apply(ctx, b.policy(b.paths[0]), 0); err != nil {
		return fmt.Errorf("the policy without a Resolver: %w", err)
	}
	return nil
}

// ask puts p in force and asks n queries. The upstream's count of queries
// says who answered: each of p's if it is a Resolver, none otherwise.
func (b *resolverBench) ask(ctx context.Context, s *subject, att netslot.Attachment, p *dnsPath, n int, keep bool) error {
	if err := att.Apply(ctx, b.policy(p), 0); err != nil {
		return fmt.Errorf("the policy with %s: %w", p.name, err)
	}
	before := b.upstream.Queries()
	ds, err := s.probe(ctx, "dns", s.dnsQ, n, resolvertest.Name)
	if err != nil {
		return fmt.Errorf("DNS with %s: %w", p.name, err)
	}
	asked := b.upstream.Queries() - before
	if (p.spec == nil && asked != 0) || (p.spec != nil && asked < int64(n)) {
		return fmt.Errorf("DNS with %s: the Resolvers' upstream read %d queries of the guest's %d", p.name, asked, n)
	}
	if keep {
		p.samples = append(p.samples, ds...)
	}
	return nil
}
