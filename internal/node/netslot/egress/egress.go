// Package egress dials destinations through a caller-owned Egress: a SOCKS5
// (RFC 1928) or HTTP CONNECT proxy, optionally behind TLS, with optional
// username and password. The node resolves the endpoint's host name itself
// and puts every address through the caller's dial check (the hard deny)
// before dialling it, so an Egress can never be pointed at the node's own
// networks. Failures are typed (*Error with a Kind) so the slot can report
// the Egress's faults; a destination the Egress reports unreachable or
// refused is ErrDestination, which is not a fault of the Egress. A SOCKS5
// Egress with udp_enabled carries datagrams too (DialUDP: UDP ASSOCIATE,
// its relay address checked like the endpoint's).
package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// Kind is why a connection through the Egress failed before it reached a
// destination: the reference's EgressObservationKind.
type Kind uint8

const (
	EndpointUnreachable   Kind = iota + 1 // not connected to, or every address removed by the dial check
	TLSVerificationFailed                 // the endpoint's certificate is not trusted or not for server_name
	HandshakeFailed                       // the protocol failed, answered something invalid, or timed out
	AuthenticationFailed                  // the endpoint explicitly rejected the credentials
	UDPAssociationFailed                  // the endpoint refused UDP ASSOCIATE, its relay was removed by the dial check or is unreachable
)

func (k Kind) String() string {
	switch k {
	case EndpointUnreachable:
		return "ENDPOINT_UNREACHABLE"
	case TLSVerificationFailed:
		return "TLS_VERIFICATION_FAILED"
	case HandshakeFailed:
		return "HANDSHAKE_FAILED"
	case AuthenticationFailed:
		return "AUTHENTICATION_FAILED"
	case UDPAssociationFailed:
		return "UDP_ASSOCIATION_FAILED"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Observation is k as the reference's enum.
func (k Kind) Observation() ctrlv1.EgressObservationKind {
	switch k {
	case EndpointUnreachable:
		return ctrlv1.EgressObservationKind_EGRESS_OBSERVATION_KIND_ENDPOINT_UNREACHABLE
	case TLSVerificationFailed:
		return ctrlv1.EgressObservationKind_EGRESS_OBSERVATION_KIND_TLS_VERIFICATION_FAILED
	case HandshakeFailed:
		return ctrlv1.EgressObservationKind_EGRESS_OBSERVATION_KIND_HANDSHAKE_FAILED
	case AuthenticationFailed:
		return ctrlv1.EgressObservationKind_EGRESS_OBSERVATION_KIND_AUTHENTICATION_FAILED
	case UDPAssociationFailed:
		return ctrlv1.EgressObservationKind_EGRESS_OBSERVATION_KIND_UDP_ASSOCIATION_FAILED
	}
	return ctrlv1.EgressObservationKind_EGRESS_OBSERVATION_KIND_UNSPECIFIED
}

// Error is a fault of the Egress itself.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("egress %s: %v", e.Kind, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

func fault(k Kind, err error) error { return &Error{Kind: k, Err: err} }

// KindOf is the Egress fault err carries, and false when it carries none
// (a destination result, or no error).
func KindOf(err error) (Kind, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind, true
	}
	return 0, false
}

// ErrDestination: the Egress answered that the destination is unreachable
// or refused. It is the result of one connection, not an Egress fault.
var ErrDestination = errors.New("the Egress reports the destination unreachable or refused")

// Config is what a Dialer needs beside the Egress spec.
type Config struct {
	// Spec is the Egress (password included).
	Spec *ctrlv1.EgressSpec
	// RootCAs verifies the endpoint's certificate when Spec.Tls; nil is
	// the host's pool.
	RootCAs *x509.CertPool
	// Lookup resolves the endpoint's host name (net.DefaultResolver's
	// LookupNetIP). An address literal is not looked up.
	Lookup func(ctx context.Context, network, host string) ([]netip.Addr, error)
	// Check is the dial check every endpoint address is put through before
	// it is dialled: an error removes the address.
	Check func(netip.Addr) error
	// Dial connects to one endpoint address (the slot's uplink).
	Dial func(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
	// DialUDP opens a datagram socket to a SOCKS5 UDP relay the endpoint
	// answered (the slot's uplink): each Write is one datagram. Nil when
	// the Egress carries no UDP.
	DialUDP func(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
}

// Dialer dials destinations through one Egress.
type Dialer struct {
	cfg  Config
	host string
	port uint16
}

// New checks cfg and makes its Dialer.
func New(cfg Config) (*Dialer, error) {
	if cfg.Spec == nil || cfg.Lookup == nil || cfg.Check == nil || cfg.Dial == nil {
		return nil, errors.New("egress: a dialer needs a spec, a lookup, a dial check and a dial")
	}
	switch cfg.Spec.GetProtocol() {
	case ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, ctrlv1.EgressProtocol_EGRESS_PROTOCOL_HTTP_CONNECT:
	default:
		return nil, fmt.Errorf("egress: protocol %v is not supported", cfg.Spec.GetProtocol())
	}
	host, port, err := net.SplitHostPort(cfg.Spec.GetEndpoint())
	if err != nil {
		return nil, fmt.Errorf("egress: endpoint %q: %w", cfg.Spec.GetEndpoint(), err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || host == "" {
		return nil, fmt.Errorf("egress: endpoint %q is not host:port", cfg.Spec.GetEndpoint())
	}
	return &Dialer{cfg: cfg, host: host, port: uint16(n)}, nil
}

// DialContext connects to dst through the Egress. A failure is an *Error
// (a fault of the Egress) or wraps ErrDestination; it never leaves
// directly.
func (d *Dialer) DialContext(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	conn, _, err := d.dialEndpoint(ctx)
	if err != nil {
		return nil, err
	}
	if d.cfg.Spec.GetProtocol() == ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5 {
		return d.socks5(ctx, conn, dst)
	}
	return d.httpConnect(ctx, conn, dst)
}

// dialEndpoint connects to the endpoint (the first of its addresses that
// passes the check and answers) and wraps it in TLS when the spec says so.
// It returns the address connected to as well: a UDP relay the endpoint
// answers as 0.0.0.0 or :: is there.
func (d *Dialer) dialEndpoint(ctx context.Context) (net.Conn, netip.AddrPort, error) {
	addrs, err := d.endpointAddrs(ctx)
	if err != nil {
		return nil, netip.AddrPort{}, fault(EndpointUnreachable, err)
	}
	var errs []error
	for _, a := range addrs {
		if err := d.cfg.Check(a); err != nil {
			errs = append(errs, fmt.Errorf("%s removed by the dial check: %w", a, err))
			continue
		}
		ap := netip.AddrPortFrom(a, d.port)
		c, err := d.cfg.Dial(ctx, ap)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !d.cfg.Spec.GetTls() {
			return c, ap, nil
		}
		tc, err := d.handshakeTLS(ctx, c)
		return tc, ap, err
	}
	return nil, netip.AddrPort{}, fault(EndpointUnreachable, fmt.Errorf("endpoint %s: %w", d.cfg.Spec.GetEndpoint(), errors.Join(errs...)))
}

func (d *Dialer) endpointAddrs(ctx context.Context) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(d.host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	addrs, err := d.cfg.Lookup(ctx, "ip", d.host)
	if err != nil {
		return nil, fmt.Errorf("resolve endpoint %q: %w", d.host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("endpoint %q resolved to no address", d.host)
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, nil
}

// handshakeTLS verifies the endpoint against server_name (the endpoint's
// host when empty) and the configured pool.
func (d *Dialer) handshakeTLS(ctx context.Context, c net.Conn) (net.Conn, error) {
	name := d.cfg.Spec.GetServerName()
	if name == "" {
		name = d.host
	}
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: d.cfg.RootCAs, MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		var verr *tls.CertificateVerificationError
		if errors.As(err, &verr) {
			return nil, fault(TLSVerificationFailed, err)
		}
		return nil, fault(HandshakeFailed, fmt.Errorf("TLS to the endpoint: %w", err))
	}
	return tc, nil
}
