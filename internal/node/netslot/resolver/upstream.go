package resolver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"github.com/miekg/dns"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot/egress"
)

// Config is what an Upstream needs.
type Config struct {
	Spec *ctrlv1.ResolverSpec
	Path Path
	// RootCAs verifies tls and https upstreams; nil is the host's pool.
	RootCAs *x509.CertPool
	// Lookup resolves a host name in the address or url
	// (net.DefaultResolver's LookupNetIP); every address it gives goes
	// through the Path. An IP literal is not looked up. Nil when the
	// caller resolves no names: a name is then refused by New.
	Lookup func(ctx context.Context, network, host string) ([]netip.Addr, error)
	// Timeout bounds one query; zero is DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout bounds a query when Config.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// Upstream asks one Resolver. It keeps idle connections and sockets
// between queries; Close lets them go.
type Upstream struct {
	cfg   Config
	proto ctrlv1.ResolverProtocol
	host  string // the address's or url's host: an IP literal or a name
	port  uint16
	tls   *tls.Config // tls and https
	url   string      // https
	http  *http.Client
	idle  idlePool
}

// New checks cfg and makes its Upstream.
func New(cfg Config) (*Upstream, error) {
	if cfg.Spec == nil || cfg.Path == nil {
		return nil, errors.New("resolver: an upstream needs a spec and a path")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	u := &Upstream{cfg: cfg, proto: cfg.Spec.GetProtocol()}
	var err error
	switch u.proto {
	case ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP,
		ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TLS:
		u.host, u.port, err = hostPort("address", cfg.Spec.GetAddress())
	case ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS:
		err = u.parseURL(cfg.Spec.GetUrl())
	default:
		return nil, fmt.Errorf("resolver: protocol %v is not supported", u.proto)
	}
	if err != nil {
		return nil, err
	}
	if _, lerr := netip.ParseAddr(u.host); lerr != nil && cfg.Lookup == nil {
		return nil, fmt.Errorf("resolver: host %q is a name, and the upstream was given no lookup", u.host)
	}
	name := cfg.Spec.GetServerName()
	if name == "" {
		name = u.host
	}
	u.tls = &tls.Config{ServerName: name, RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12}
	if u.proto == ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS {
		u.http = u.newHTTPClient()
	}
	return u, nil
}

// hostPort splits host:port, the port 1 to 65535.
func hostPort(field, s string) (string, uint16, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("resolver: %s %q: %w", field, s, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || host == "" {
		return "", 0, fmt.Errorf("resolver: %s %q is not host:port", field, s)
	}
	return host, uint16(n), nil
}

// parseURL takes the https:// URL queries are POSTed to, as given.
func (u *Upstream) parseURL(s string) error {
	p, err := url.Parse(s)
	if err != nil || p.Scheme != "https" || p.Hostname() == "" {
		return fmt.Errorf("resolver: url %q is not an https:// URL with a host", s)
	}
	u.url, u.host, u.port = s, p.Hostname(), 443
	if p.Port() != "" {
		if _, u.port, err = hostPort("url", p.Host); err != nil {
			return err
		}
	}
	return nil
}

// Close lets the idle connections and sockets go; from then on udp, tcp
// and tls keep none. Exchange may still be called: it dials again.
func (u *Upstream) Close() error {
	u.idle.close()
	if u.http != nil {
		u.http.CloseIdleConnections()
	}
	return nil
}

// Exchange asks the upstream q and returns its answer, whatever its rcode.
// A failure is an *Error, or the Egress's *egress.Error on the way.
func (u *Upstream) Exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
	defer cancel()
	switch u.proto {
	case ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS:
		return u.exchangeHTTPS(ctx, q)
	case ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP:
		reply, addr, err := u.exchangeConn(ctx, q, transportUDP)
		if err != nil || !reply.Truncated {
			return reply, err
		}
		// The answer did not fit a datagram: ask the same address over
		// tcp, as resolver.proto says.
		return u.exchangeAt(ctx, q, transportTCP, addr)
	case ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP:
		reply, _, err := u.exchangeConn(ctx, q, transportTCP)
		return reply, err
	}
	reply, _, err := u.exchangeConn(ctx, q, transportTLS)
	return reply, err
}

// addrs are the upstream host's addresses: an IP literal as it is, a name
// through the lookup.
func (u *Upstream) addrs(ctx context.Context) ([]netip.AddrPort, error) {
	if a, err := netip.ParseAddr(u.host); err == nil {
		return []netip.AddrPort{netip.AddrPortFrom(a.Unmap(), u.port)}, nil
	}
	found, err := u.cfg.Lookup(ctx, "ip", u.host)
	if err != nil {
		return nil, fault(UpstreamUnreachable, fmt.Errorf("resolve %q: %w", u.host, err))
	}
	if len(found) == 0 {
		return nil, fault(UpstreamUnreachable, fmt.Errorf("%q resolved to no address", u.host))
	}
	out := make([]netip.AddrPort, len(found))
	for i, a := range found {
		out[i] = netip.AddrPortFrom(a.Unmap(), u.port)
	}
	return out, nil
}

// dialAny connects to the first of addrs that dial connects to. When none
// does the failure is the upstream's, unless the Egress on the way
// reported a fault of its own.
func dialAny[T any](ctx context.Context, addrs []netip.AddrPort, dial func(context.Context, netip.AddrPort) (T, error)) (T, netip.AddrPort, error) {
	var errs []error
	var zero T
	for _, a := range addrs {
		c, err := dial(ctx, a)
		if err == nil {
			return c, a, nil
		}
		if _, ok := egress.KindOf(err); ok {
			return zero, a, err
		}
		if _, ok := KindOf(err); ok {
			return zero, a, err
		}
		errs = append(errs, err)
	}
	return zero, netip.AddrPort{}, fault(UpstreamUnreachable, errors.Join(errs...))
}

// exchangeFault is a failed exchange as the upstream's fault: no answer
// by the deadline is a timeout; the Egress's faults stay its own.
func exchangeFault(ctx context.Context, err error) error {
	if _, ok := egress.KindOf(err); ok {
		return err
	}
	if _, ok := KindOf(err); ok {
		return err
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() || ctx.Err() != nil {
		return fault(UpstreamTimeout, err)
	}
	return fault(UpstreamUnreachable, err)
}
