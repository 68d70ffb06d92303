package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"golang.org/x/net/proxy"
)

// withConn is the SOCKS5 dialer golang.org/x/net/proxy returns: it runs
// the handshake on a connection the node already made to the endpoint, so
// the endpoint is dialled only by dialEndpoint (resolved and checked here).
type withConn interface {
	DialWithConn(ctx context.Context, c net.Conn, network, address string) (net.Addr, error)
}

// socks5 asks the endpoint on conn to CONNECT to dst (an address, never a
// name: the guest dialled an address). x/net's client parses every reply;
// the node parses nothing of the SOCKS5 exchange itself.
func (d *Dialer) socks5(ctx context.Context, conn net.Conn, dst netip.AddrPort) (net.Conn, error) {
	var auth *proxy.Auth
	if u, p := d.cfg.Spec.GetUsername(), d.cfg.Spec.GetPassword(); u != "" || p != "" {
		auth = &proxy.Auth{User: u, Password: p}
	}
	pd, err := proxy.SOCKS5("tcp", d.cfg.Spec.GetEndpoint(), auth, nil)
	if err != nil {
		_ = conn.Close()
		return nil, fault(HandshakeFailed, err)
	}
	s, ok := pd.(withConn)
	if !ok {
		_ = conn.Close()
		return nil, fault(HandshakeFailed, errors.New("golang.org/x/net/proxy's SOCKS5 dialer cannot take a connection"))
	}
	if _, err := s.DialWithConn(ctx, conn, "tcp", dst.String()); err != nil {
		_ = conn.Close()
		return nil, classifySOCKS5(err)
	}
	return conn, nil
}

// destinationReplies are the SOCKS5 replies (RFC 1928 section 6) that are
// the result of one connection, as x/net's client names them: "connection
// not allowed by ruleset", "network unreachable", "host unreachable",
// "connection refused", "TTL expired". The rest (a general failure, an
// unsupported command or address type, a bad version) is the Egress's.
var destinationReplies = []string{
	"connection not allowed by ruleset", "network unreachable", "host unreachable", "connection refused", "TTL expired",
}

// classifySOCKS5 reads x/net's SOCKS5 errors, which are untyped: its
// messages are matched, and the tests against a real SOCKS5 server pin
// them, so an x/net update that changes them fails the tests rather than
// misreporting.
func classifySOCKS5(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "username/password authentication failed"):
		return fault(AuthenticationFailed, err)
	case strings.Contains(msg, "unknown error "):
		for _, r := range destinationReplies {
			if strings.HasSuffix(msg, "unknown error "+r) {
				return fmt.Errorf("%w: %v", ErrDestination, err)
			}
		}
	}
	return fault(HandshakeFailed, err)
}
