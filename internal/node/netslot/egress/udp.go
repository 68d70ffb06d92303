package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// The SOCKS5 UDP ASSOCIATE exchange (RFC 1928 sections 3, 4, 6 and 7, and
// RFC 1929) is written here: golang.org/x/net/proxy's client is bound to
// CONNECT, and the SOCKS5 client libraries that do UDP dial the endpoint
// and the relay themselves, so the node could not resolve and check either
// address before it is dialled. What the endpoint and the relay send is
// parsed strictly, every length bounded before it is read.

// ErrUDPNotEnabled: the Egress has no udp_enabled (or is not SOCKS5), so it
// carries no UDP. It is a configuration the node refuses, not a fault the
// endpoint showed.
var ErrUDPNotEnabled = errors.New("egress: UDP goes through an Egress only when it is SOCKS5 with udp_enabled")

const (
	socksVersion     = 5
	authVersion      = 1 // RFC 1929's subnegotiation version
	methodNoAuth     = 0x00
	methodUserPass   = 0x02
	methodNone       = 0xff
	cmdUDPAssociate  = 3
	atypIPv4         = 1
	atypDomain       = 3
	atypIPv6         = 4
	maxUDPHeaderSize = 4 + 1 + 255 + 2 // RSV FRAG ATYP, the longest DST.ADDR (a name), DST.PORT
)

// DialUDP associates with the Egress's SOCKS5 UDP relay and returns a
// datagram conn to dst through it: each Write is one datagram to dst, each
// Read the payload of one datagram from dst. A failure is an *Error, or
// ErrUDPNotEnabled; it never leaves directly.
func (d *Dialer) DialUDP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	if d.cfg.Spec.GetProtocol() != ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5 || !d.cfg.Spec.GetUdpEnabled() {
		return nil, ErrUDPNotEnabled
	}
	if d.cfg.DialUDP == nil {
		return nil, errors.New("egress: the dialer was made without a datagram dial (Config.DialUDP)")
	}
	ctrl, endpoint, err := d.dialEndpoint(ctx)
	if err != nil {
		return nil, err
	}
	relay, err := d.associate(ctx, ctrl, endpoint)
	if err != nil {
		_ = ctrl.Close()
		return nil, err
	}
	dc, err := d.cfg.DialUDP(ctx, relay)
	if err != nil {
		_ = ctrl.Close()
		return nil, fault(UDPAssociationFailed, fmt.Errorf("open a socket to the UDP relay %s: %w", relay, err))
	}
	return newUDPConn(ctrl, dc, dst), nil
}

// associate runs the handshake and UDP ASSOCIATE on ctrl, bounded by ctx,
// and returns the relay address, checked.
func (d *Dialer) associate(ctx context.Context, ctrl net.Conn, endpoint netip.AddrPort) (netip.AddrPort, error) {
	if deadline, ok := ctx.Deadline(); ok {
		_ = ctrl.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { _ = ctrl.SetDeadline(time.Now()) })
	defer stop()
	if err := d.negotiate(ctrl); err != nil {
		return netip.AddrPort{}, err
	}
	// DST.ADDR and DST.PORT are zeros: the node does not know the address
	// its datagrams will come from (RFC 1928 section 7 allows that).
	if _, err := ctrl.Write([]byte{socksVersion, cmdUDPAssociate, 0, atypIPv4, 0, 0, 0, 0, 0, 0}); err != nil {
		return netip.AddrPort{}, fault(HandshakeFailed, fmt.Errorf("write UDP ASSOCIATE: %w", err))
	}
	bnd, err := readAssociateReply(ctrl)
	if err != nil {
		return netip.AddrPort{}, err
	}
	relay, err := d.relayAddr(ctx, bnd, endpoint)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if !stop() || ctrl.SetDeadline(time.Time{}) != nil {
		return netip.AddrPort{}, fault(HandshakeFailed, ctx.Err())
	}
	return relay, nil
}

// negotiate offers no authentication, or username/password when the spec
// has credentials, and authenticates as the endpoint chose (RFC 1929).
func (d *Dialer) negotiate(c net.Conn) error {
	user, pass := d.cfg.Spec.GetUsername(), d.cfg.Spec.GetPassword()
	withCreds := user != "" || pass != ""
	greeting := []byte{socksVersion, 1, methodNoAuth}
	if withCreds {
		greeting = []byte{socksVersion, 2, methodNoAuth, methodUserPass}
	}
	if _, err := c.Write(greeting); err != nil {
		return fault(HandshakeFailed, fmt.Errorf("write SOCKS5 greeting: %w", err))
	}
	var reply [2]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		return fault(HandshakeFailed, fmt.Errorf("read SOCKS5 method: %w", err))
	}
	switch {
	case reply[0] != socksVersion:
		return fault(HandshakeFailed, fmt.Errorf("SOCKS5 method reply has version %d", reply[0]))
	case reply[1] == methodNoAuth:
		return nil
	case reply[1] == methodUserPass && withCreds:
		return authenticate(c, user, pass)
	case reply[1] == methodNone:
		return fault(HandshakeFailed, errors.New("the endpoint accepts none of the offered authentication methods"))
	}
	return fault(HandshakeFailed, fmt.Errorf("the endpoint chose authentication method %d, which was not offered", reply[1]))
}

// authenticate is RFC 1929's subnegotiation. The credentials were
// validated (at most 255 bytes each) when the Egress was admitted.
func authenticate(c net.Conn, user, pass string) error {
	if len(user) > 255 || len(pass) > 255 {
		return fault(HandshakeFailed, errors.New("a username or password longer than 255 bytes cannot be sent"))
	}
	req := make([]byte, 0, 3+len(user)+len(pass))
	req = append(req, authVersion, byte(len(user)))
	req = append(req, user...)
	req = append(req, byte(len(pass)))
	req = append(req, pass...)
	if _, err := c.Write(req); err != nil {
		return fault(HandshakeFailed, fmt.Errorf("write username/password: %w", err))
	}
	var reply [2]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		return fault(HandshakeFailed, fmt.Errorf("read username/password status: %w", err))
	}
	if reply[0] != authVersion {
		return fault(HandshakeFailed, fmt.Errorf("username/password status has version %d", reply[0]))
	}
	if reply[1] != 0 {
		return fault(AuthenticationFailed, fmt.Errorf("username/password rejected (status %d)", reply[1]))
	}
	return nil
}

// socksAddr is an address as SOCKS5 carries it: an IP address or a name,
// and a port.
type socksAddr struct {
	ip   netip.Addr
	name string
	port uint16
}

// readAssociateReply reads the reply to UDP ASSOCIATE: a refusal is
// UDP_ASSOCIATION_FAILED; anything RFC 1928 does not allow is
// HANDSHAKE_FAILED.
func readAssociateReply(r io.Reader) (socksAddr, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return socksAddr{}, fault(HandshakeFailed, fmt.Errorf("read UDP ASSOCIATE reply: %w", err))
	}
	if head[0] != socksVersion || head[2] != 0 {
		return socksAddr{}, fault(HandshakeFailed, fmt.Errorf("UDP ASSOCIATE reply has version %d and reserved byte %d", head[0], head[2]))
	}
	if head[1] != 0 {
		return socksAddr{}, fault(UDPAssociationFailed, fmt.Errorf("the endpoint refused UDP ASSOCIATE: reply %d", head[1]))
	}
	a, err := readAddr(r, head[3])
	if err != nil {
		return socksAddr{}, fault(HandshakeFailed, fmt.Errorf("UDP ASSOCIATE reply: %w", err))
	}
	if a.port == 0 {
		return socksAddr{}, fault(HandshakeFailed, errors.New("UDP ASSOCIATE reply names relay port 0"))
	}
	return a, nil
}

// readAddr reads ATYP's address and the port after it.
func readAddr(r io.Reader, atyp byte) (socksAddr, error) {
	var n int
	switch atyp {
	case atypIPv4:
		n = 4
	case atypIPv6:
		n = 16
	case atypDomain:
		var l [1]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return socksAddr{}, err
		}
		if l[0] == 0 {
			return socksAddr{}, errors.New("empty domain name")
		}
		n = int(l[0])
	default:
		return socksAddr{}, fmt.Errorf("address type %d", atyp)
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(r, b); err != nil {
		return socksAddr{}, err
	}
	a := socksAddr{port: binary.BigEndian.Uint16(b[n:])}
	if atyp == atypDomain {
		a.name = string(b[:n])
	} else {
		a.ip, _ = netip.AddrFromSlice(b[:n])
		a.ip = a.ip.Unmap()
	}
	return a, nil
}

// relayAddr is where the relay's datagrams go: the endpoint's own address
// when it answered 0.0.0.0 or :: (as common servers do), a name resolved
// by the node, and in every case an address the dial check passes.
func (d *Dialer) relayAddr(ctx context.Context, bnd socksAddr, endpoint netip.AddrPort) (netip.AddrPort, error) {
	addrs := []netip.Addr{bnd.ip}
	switch {
	case bnd.name != "":
		found, err := d.cfg.Lookup(ctx, "ip", bnd.name)
		if err != nil || len(found) == 0 {
			return netip.AddrPort{}, fault(UDPAssociationFailed, fmt.Errorf("resolve the UDP relay %q: %v", bnd.name, err))
		}
		addrs = found
	case bnd.ip.IsUnspecified():
		addrs = []netip.Addr{endpoint.Addr()}
	}
	var errs []error
	for _, a := range addrs {
		a = a.Unmap()
		if err := d.cfg.Check(a); err != nil {
			errs = append(errs, fmt.Errorf("UDP relay %s removed by the dial check: %w", a, err))
			continue
		}
		return netip.AddrPortFrom(a, bnd.port), nil
	}
	return netip.AddrPort{}, fault(UDPAssociationFailed, errors.Join(errs...))
}

// appendUDPHeader is RFC 1928 section 7's request header for dst, no
// fragment.
func appendUDPHeader(b []byte, dst netip.AddrPort) []byte {
	b = append(b, 0, 0, 0)
	if dst.Addr().Is4() {
		b = append(b, atypIPv4)
	} else {
		b = append(b, atypIPv6)
	}
	b = append(b, dst.Addr().AsSlice()...)
	return binary.BigEndian.AppendUint16(b, dst.Port())
}

// parseUDPHeader splits a datagram from the relay into its source and
// payload; ok is false for one RFC 1928 does not allow (reserved bytes
// set, a bad address type, too short), for a fragment (FRAG is not 0: the
// node does not reassemble, which the RFC allows by dropping), and for a
// source given as a name (the node asked for an address).
func parseUDPHeader(b []byte) (src netip.AddrPort, payload []byte, ok bool) {
	if len(b) < 4 || b[0] != 0 || b[1] != 0 || b[2] != 0 {
		return netip.AddrPort{}, nil, false
	}
	var n int
	switch b[3] {
	case atypIPv4:
		n = 4
	case atypIPv6:
		n = 16
	default:
		return netip.AddrPort{}, nil, false
	}
	if len(b) < 4+n+2 {
		return netip.AddrPort{}, nil, false
	}
	ip, _ := netip.AddrFromSlice(b[4 : 4+n])
	port := binary.BigEndian.Uint16(b[4+n:])
	return netip.AddrPortFrom(ip.Unmap(), port), b[4+n+2:], true
}

// udpConn is one association: datagrams to and from dst through the relay,
// for as long as the control connection lasts.
type udpConn struct {
	net.Conn // the datagram socket to the relay
	ctrl     net.Conn
	dst      netip.AddrPort
	header   []byte

	closeOnce sync.Once
	mu        sync.Mutex
	ended     bool // the control connection ended
}

func newUDPConn(ctrl, dc net.Conn, dst netip.AddrPort) *udpConn {
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	c := &udpConn{Conn: dc, ctrl: ctrl, dst: dst, header: appendUDPHeader(nil, dst)}
	go c.watch()
	return c
}

// watch ends the association when the control connection ends: RFC 1928
// section 6 ties the relay's life to it. Nothing is expected on it.
func (c *udpConn) watch() {
	_, _ = io.Copy(io.Discard, c.ctrl)
	c.mu.Lock()
	c.ended = true
	c.mu.Unlock()
	_ = c.Close()
}

// Write sends p to dst as one datagram.
func (c *udpConn) Write(p []byte) (int, error) {
	b := make([]byte, 0, len(c.header)+len(p))
	b = append(append(b, c.header...), p...)
	if _, err := c.Conn.Write(b); err != nil {
		return 0, c.fault(err)
	}
	return len(p), nil
}

// Read returns the payload of the next datagram from dst; datagrams from
// other sources, fragments and malformed ones are dropped.
func (c *udpConn) Read(p []byte) (int, error) {
	b := make([]byte, len(p)+maxUDPHeaderSize)
	for {
		n, err := c.Conn.Read(b)
		if err != nil {
			return 0, c.fault(err)
		}
		src, payload, ok := parseUDPHeader(b[:n])
		if ok && src == c.dst {
			return copy(p, payload), nil
		}
	}
}

// fault: a relay the socket reports unreachable (ICMP port unreachable on
// the connected socket) is the Egress's; a socket closed because the
// control connection ended says so.
func (c *udpConn) fault(err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fault(UDPAssociationFailed, fmt.Errorf("the UDP relay is unreachable: %w", err))
	}
	c.mu.Lock()
	ended := c.ended
	c.mu.Unlock()
	if ended {
		return fmt.Errorf("egress: the UDP association ended with its control connection: %w", err)
	}
	return err
}

// RemoteAddr is dst, the far end of the datagrams.
func (c *udpConn) RemoteAddr() net.Addr { return net.UDPAddrFromAddrPort(c.dst) }

// Close closes the datagram socket and the control connection, which ends
// the association.
func (c *udpConn) Close() error {
	var err error
	c.closeOnce.Do(func() { err = errors.Join(c.Conn.Close(), c.ctrl.Close()) })
	return err
}
