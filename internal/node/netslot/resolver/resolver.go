// Package resolver is the upstream leg of a policy's Resolver: the link DNS
// address hands it each guest query it forwards in place of the deployment
// resolvers, and it asks the upstream over udp, tcp, tls (DNS over TLS) or
// https (DNS over HTTPS), on the path the policy names (directly from the
// host's uplink, every address through the dial check, or through an
// Egress, unchecked). An upstream that cannot be asked is an *Error with a
// Kind, the reference's ResolverObservationKind; a fault of the Egress on
// the way is the egress package's *egress.Error instead, because it is
// reported as the Egress's. An answer the upstream gives, NXDOMAIN and
// SERVFAIL included, is a DNS result and no error. Nothing falls back: a
// failed query is the caller's SERVFAIL.
package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// Kind is why a query to the upstream failed.
type Kind uint8

const (
	UpstreamUnreachable   Kind = iota + 1 // not connected to, or every address removed by the dial check
	UpstreamTimeout                       // no answer within the query deadline
	TLSVerificationFailed                 // a tls or https upstream's certificate is not trusted or not for its host
	HTTPErrorStatus                       // an https upstream answered outside 2xx
)

func (k Kind) String() string {
	switch k {
	case UpstreamUnreachable:
		return "UPSTREAM_UNREACHABLE"
	case UpstreamTimeout:
		return "UPSTREAM_TIMEOUT"
	case TLSVerificationFailed:
		return "TLS_VERIFICATION_FAILED"
	case HTTPErrorStatus:
		return "HTTP_ERROR_STATUS"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Observation is k as the reference's enum.
func (k Kind) Observation() ctrlv1.ResolverObservationKind {
	switch k {
	case UpstreamUnreachable:
		return ctrlv1.ResolverObservationKind_RESOLVER_OBSERVATION_KIND_UPSTREAM_UNREACHABLE
	case UpstreamTimeout:
		return ctrlv1.ResolverObservationKind_RESOLVER_OBSERVATION_KIND_UPSTREAM_TIMEOUT
	case TLSVerificationFailed:
		return ctrlv1.ResolverObservationKind_RESOLVER_OBSERVATION_KIND_TLS_VERIFICATION_FAILED
	case HTTPErrorStatus:
		return ctrlv1.ResolverObservationKind_RESOLVER_OBSERVATION_KIND_HTTP_ERROR_STATUS
	}
	return ctrlv1.ResolverObservationKind_RESOLVER_OBSERVATION_KIND_UNSPECIFIED
}

// Error is a fault of the upstream.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("resolver %s: %v", e.Kind, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

func fault(k Kind, err error) error { return &Error{Kind: k, Err: err} }

// KindOf is the upstream fault err carries, and false when it carries none
// (no error, or a fault of the Egress on the way).
func KindOf(err error) (Kind, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind, true
	}
	return 0, false
}

// Path is how connections and datagrams to the upstream leave.
type Path interface {
	// DialTCP connects to dst.
	DialTCP(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
	// DialUDP opens a datagram socket to dst: each Write is one datagram.
	DialUDP(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
}

// Direct is the direct path: the host's own sockets (the slot's uplink),
// every address put through check (the hard deny) before it is dialled.
func Direct(uplink Path, check func(netip.Addr) error) Path {
	return &direct{uplink: uplink, check: check}
}

type direct struct {
	uplink Path
	check  func(netip.Addr) error
}

func (d *direct) DialTCP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	if err := d.check(dst.Addr()); err != nil {
		return nil, fmt.Errorf("%s removed by the dial check: %w", dst, err)
	}
	return d.uplink.DialTCP(ctx, dst)
}

func (d *direct) DialUDP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	if err := d.check(dst.Addr()); err != nil {
		return nil, fmt.Errorf("%s removed by the dial check: %w", dst, err)
	}
	return d.uplink.DialUDP(ctx, dst)
}

// Through is the path through an Egress: connections are the dialer's
// DialContext, datagrams its DialUDP (a SOCKS5 UDP association). Its
// faults stay the Egress's (*egress.Error), never the upstream's.
func Through(d EgressDialer) Path { return throughEgress{d} }

// EgressDialer is what Through needs of an Egress (*egress.Dialer).
type EgressDialer interface {
	DialContext(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
	DialUDP(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
}

type throughEgress struct{ d EgressDialer }

func (t throughEgress) DialTCP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	return t.d.DialContext(ctx, dst)
}

func (t throughEgress) DialUDP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	return t.d.DialUDP(ctx, dst)
}
