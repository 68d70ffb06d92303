package egress_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot/egress"
	"github.com/kibotos/kibotos/internal/node/netslot/egress/egresstest"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
	"github.com/kibotos/kibotos/internal/testenv/testnet"
)

var (
	proxyIP = netip.MustParseAddr("198.51.100.1")
	dstIP   = netip.MustParseAddr("203.0.113.7")
	otherIP = netip.MustParseAddr("192.0.2.9") // a relay address the dial check removes
)

// udpNet is a test internet with a UDP echo destination and the node's
// uplink in it.
type udpNet struct {
	inet *testnet.Internet
	up   *userstack.HostUplink
	dst  netip.AddrPort
}

func newUDPNet(t *testing.T) *udpNet {
	inet := testnet.New(t, proxyIP, dstIP, otherIP)
	return &udpNet{inet: inet, up: inet.Uplink(), dst: egresstest.UDPEcho(t, inet, netip.AddrPortFrom(dstIP, 7))}
}

// proxy starts a SOCKS5 server with UDP ASSOCIATE in the test internet and
// returns the spec that reaches it.
func (n *udpNet) proxy(t *testing.T, cert *tls.Certificate, opt egresstest.UDPOptions) (*egresstest.UDPServer, *ctrlv1.EgressSpec) {
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, err
		}
		return n.up.DialTCP(ctx, ap)
	}
	s := egresstest.SOCKS5UDP(t, n.inet, netip.AddrPortFrom(proxyIP, 0), cert, dial, opt)
	return s, &ctrlv1.EgressSpec{Protocol: socks5, Endpoint: s.Addr.String(), UdpEnabled: true,
		Username: egresstest.User, Password: egresstest.Password, Tls: cert != nil, ServerName: serverName}
}

func (n *udpNet) dialer(t *testing.T, spec *ctrlv1.EgressSpec, ca *egresstest.CA, check func(netip.Addr) error) *egress.Dialer {
	t.Helper()
	cfg := egress.Config{Spec: spec, Lookup: noLookup, Check: check, Dial: n.up.DialTCP, DialUDP: n.up.DialUDP}
	if ca != nil {
		cfg.RootCAs = ca.Pool
	}
	d, err := egress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func dialUDP(d *egress.Dialer, dst netip.AddrPort) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.DialUDP(ctx, dst)
}

// roundTrip sends one datagram and reads the answer.
func roundTrip(c net.Conn, msg string) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// TestUDPAssociate: through a SOCKS5 Egress with udp_enabled, plain and
// behind TLS, and with a relay answered as 0.0.0.0, datagrams reach the
// destination and its answers come back; the destination's other port's
// datagram (noise) is dropped.
func TestUDPAssociate(t *testing.T) {
	n := newUDPNet(t)
	ca := egresstest.NewCA(t)
	cert := ca.Server(t, serverName)
	for _, tc := range []struct {
		name string
		cert *tls.Certificate
		opt  egresstest.UDPOptions
	}{
		{"plain", nil, egresstest.UDPOptions{}},
		{"tls", &cert, egresstest.UDPOptions{}},
		{"unspecified relay", nil, egresstest.UDPOptions{Unspecified: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, spec := n.proxy(t, tc.cert, tc.opt)
			c, err := dialUDP(n.dialer(t, spec, ca, allowAll), n.dst)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, msg := range []string{"first datagram", "second datagram"} {
				got, err := roundTrip(c, msg)
				if err != nil || got != map[string]string{"first datagram": "FIRST DATAGRAM", "second datagram": "SECOND DATAGRAM"}[msg] {
					t.Fatalf("round trip %q: %q, %v", msg, got, err)
				}
			}
			if c.RemoteAddr().String() != n.dst.String() {
				t.Errorf("RemoteAddr %v; want %v", c.RemoteAddr(), n.dst)
			}
		})
	}
}

// TestUDPNotEnabled: without udp_enabled, or through HTTP CONNECT, the
// dialer refuses UDP before it dials anything.
func TestUDPNotEnabled(t *testing.T) {
	for _, s := range []*ctrlv1.EgressSpec{
		{Protocol: socks5, Endpoint: "127.0.0.1:1080"},
		{Protocol: httpConnect, Endpoint: "127.0.0.1:3128", UdpEnabled: true},
	} {
		up := &uplink{}
		d, err := egress.New(egress.Config{Spec: s, Lookup: noLookup, Check: allowAll, Dial: up.dial,
			DialUDP: func(context.Context, netip.AddrPort) (net.Conn, error) { return nil, errors.New("not to be dialled") }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dialUDP(d, netip.MustParseAddrPort("127.0.0.1:53")); !errors.Is(err, egress.ErrUDPNotEnabled) {
			t.Errorf("%v: DialUDP = %v; want ErrUDPNotEnabled", s, err)
		}
		if len(up.addrs()) != 0 {
			t.Errorf("%v: dialled %v", s, up.addrs())
		}
	}
}

// TestUDPAssociationFaults: a refused association, a relay the dial check
// removes and a relay nobody listens on are UDP_ASSOCIATION_FAILED; the
// control connection's failures keep their kinds.
func TestUDPAssociationFaults(t *testing.T) {
	n := newUDPNet(t)
	_, refusing := n.proxy(t, nil, egresstest.UDPOptions{Refuse: true})
	_, err := dialUDP(n.dialer(t, refusing, nil, allowAll), n.dst)
	expectKind(t, err, egress.UDPAssociationFailed)

	_, elsewhere := n.proxy(t, nil, egresstest.UDPOptions{Relay: netip.AddrPortFrom(otherIP, 4000)})
	denyOther := func(a netip.Addr) error {
		if a == otherIP {
			return errors.New("hard deny")
		}
		return nil
	}
	_, err = dialUDP(n.dialer(t, elsewhere, nil, denyOther), n.dst)
	expectKind(t, err, egress.UDPAssociationFailed)

	// The check is asked for the endpoint's address behind 0.0.0.0 too.
	_, unspecified := n.proxy(t, nil, egresstest.UDPOptions{Unspecified: true})
	calls := 0
	denySecond := func(netip.Addr) error {
		if calls++; calls > 1 {
			return errors.New("hard deny")
		}
		return nil
	}
	_, err = dialUDP(n.dialer(t, unspecified, nil, denySecond), n.dst)
	expectKind(t, err, egress.UDPAssociationFailed)

	_, nobody := n.proxy(t, nil, egresstest.UDPOptions{Relay: netip.AddrPortFrom(proxyIP, 9)})
	c, err := dialUDP(n.dialer(t, nobody, nil, allowAll), n.dst)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = roundTrip(c, "to nobody")
	expectKind(t, err, egress.UDPAssociationFailed)

	_, good := n.proxy(t, nil, egresstest.UDPOptions{})
	wrong := cloneSpec(good, func(s *ctrlv1.EgressSpec) { s.Password = "wrong"; s.UdpEnabled = true })
	_, err = dialUDP(n.dialer(t, wrong, nil, allowAll), n.dst)
	expectKind(t, err, egress.AuthenticationFailed)
	down := cloneSpec(good, func(s *ctrlv1.EgressSpec) { s.Endpoint = netip.AddrPortFrom(proxyIP, 9).String(); s.UdpEnabled = true })
	_, err = dialUDP(n.dialer(t, down, nil, allowAll), n.dst)
	expectKind(t, err, egress.EndpointUnreachable)
}

// TestUDPAssociationEnds: when the endpoint ends the control connection
// the association is over and reads fail, before any deadline.
func TestUDPAssociationEnds(t *testing.T) {
	n := newUDPNet(t)
	srv, spec := n.proxy(t, nil, egresstest.UDPOptions{})
	c, err := dialUDP(n.dialer(t, spec, nil, allowAll), n.dst)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, "before"); err != nil {
		t.Fatal(err)
	}
	srv.EndAssociations()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 100))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("read after the association ended: %v; want it to fail at once", err)
	}
}
