package egresstest

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	socks5 "github.com/armon/go-socks5"
)

// Netns is where a test endpoint's sockets are made: a test internet's
// namespace (testnet.Internet), whose Run runs fn on a thread inside it.
type Netns interface {
	Run(fn func() error) error
}

// UDPOptions shape a SOCKS5UDP server's answer to UDP ASSOCIATE.
type UDPOptions struct {
	// Refuse answers "not allowed by ruleset".
	Refuse bool
	// Unspecified answers the relay as 0.0.0.0 (:: for IPv6) and its
	// port, as common servers do: the relay is at the endpoint's address.
	Unspecified bool
	// Relay, when valid, is answered in place of the relay's address (a
	// relay the dial check removes, or one nobody listens on).
	Relay netip.AddrPort
	// Allow says which destinations the relay sends to; nil is any.
	Allow func(netip.AddrPort) bool
}

// UDPServer is a running SOCKS5 server with UDP ASSOCIATE.
type UDPServer struct {
	Addr netip.AddrPort

	mu    sync.Mutex
	ctrls map[string]net.Conn // control connections by the client's address
	ln    net.Listener
}

// EndAssociations closes every control connection, which ends their
// associations (RFC 1928 section 6).
func (s *UDPServer) EndAssociations() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.ctrls {
		_ = c.Close()
	}
}

// SOCKS5UDP starts a SOCKS5 server in ns on addr (port 0 picks one),
// taking User and Password, serving CONNECT through dial and UDP
// ASSOCIATE with a relay in ns. github.com/armon/go-socks5 runs the
// negotiation, authentication and request parsing; it answers ASSOCIATE
// "not supported", so its rule hook, which it asks before that answer,
// serves the association on the request's connection here.
func SOCKS5UDP(t testing.TB, ns Netns, addr netip.AddrPort, cert *tls.Certificate, dial Dial, opt UDPOptions) *UDPServer {
	t.Helper()
	s, err := OpenSOCKS5UDP(ns, addr, cert, dial, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// OpenSOCKS5UDP is SOCKS5UDP for a program (a benchmark): a failure is its
// error, and Close stops the server.
func OpenSOCKS5UDP(ns Netns, addr netip.AddrPort, cert *tls.Certificate, dial Dial, opt UDPOptions) (*UDPServer, error) {
	var l net.Listener
	if err := ns.Run(func() (err error) { l, err = net.Listen("tcp", addr.String()); return err }); err != nil {
		return nil, fmt.Errorf("SOCKS5 server on %s: %w", addr, err)
	}
	s := &UDPServer{Addr: netip.MustParseAddrPort(l.Addr().String()), ctrls: map[string]net.Conn{}, ln: l}
	if cert != nil {
		l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{*cert}})
	}
	srv, err := socks5.New(&socks5.Config{
		Credentials: socks5.StaticCredentials{User: Password},
		Dial:        dial,
		Resolver:    noResolver{},
		Rules:       &associateRule{s: s, ns: ns, opt: opt},
		Logger:      log.New(io.Discard, "", 0),
	})
	if err != nil {
		_ = l.Close()
		return nil, fmt.Errorf("SOCKS5 server on %s: %w", addr, err)
	}
	go s.serve(l, srv)
	return s, nil
}

// Close stops accepting and ends the associations.
func (s *UDPServer) Close() error {
	err := s.ln.Close()
	s.EndAssociations()
	return err
}

func (s *UDPServer) serve(l net.Listener, srv *socks5.Server) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		key := c.RemoteAddr().String()
		s.mu.Lock()
		s.ctrls[key] = c
		s.mu.Unlock()
		go func() {
			_ = srv.ServeConn(c)
			s.mu.Lock()
			delete(s.ctrls, key)
			s.mu.Unlock()
		}()
	}
}

func (s *UDPServer) ctrl(client net.Addr) net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctrls[client.String()]
}

// noResolver: a test endpoint resolves no names (a lookup could leave the
// machine).
type noResolver struct{}

func (noResolver) Resolve(ctx context.Context, name string) (context.Context, net.IP, error) {
	return ctx, nil, errors.New("test endpoint resolves no names")
}

type associateRule struct {
	s   *UDPServer
	ns  Netns
	opt UDPOptions
}

// Allow permits CONNECT and serves ASSOCIATE until its control connection
// ends; then armon's "not supported" goes to a closed connection.
func (r *associateRule) Allow(ctx context.Context, req *socks5.Request) (context.Context, bool) {
	if req.Command != socks5.AssociateCommand {
		return ctx, true
	}
	if r.opt.Refuse || req.RemoteAddr == nil {
		return ctx, false
	}
	c := r.s.ctrl(&net.TCPAddr{IP: req.RemoteAddr.IP, Port: req.RemoteAddr.Port})
	if c == nil {
		return ctx, false
	}
	r.associate(c)
	return ctx, false
}

func (r *associateRule) associate(c net.Conn) {
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	var pc *net.UDPConn
	if err := r.ns.Run(func() (err error) {
		pc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local.Addr(), 0)))
		return err
	}); err != nil {
		return
	}
	defer pc.Close()
	relay := netip.MustParseAddrPort(pc.LocalAddr().String())
	bnd := relay
	switch {
	case r.opt.Relay.IsValid():
		bnd = r.opt.Relay
	case r.opt.Unspecified && relay.Addr().Is4():
		bnd = netip.AddrPortFrom(netip.IPv4Unspecified(), relay.Port())
	case r.opt.Unspecified:
		bnd = netip.AddrPortFrom(netip.IPv6Unspecified(), relay.Port())
	}
	if _, err := c.Write(append([]byte{5, 0, 0}, socksAddrBytes(bnd)...)); err != nil {
		return
	}
	client := netip.MustParseAddrPort(c.RemoteAddr().String())
	go r.relay(pc, client.Addr())
	_, _ = io.Copy(io.Discard, c)
}

// relay carries datagrams: the first from the client's address names the
// client; its datagrams go to their DST (headers stripped), everything
// else comes back to it with the source's header.
func (r *associateRule) relay(pc *net.UDPConn, clientIP netip.Addr) {
	var client netip.AddrPort
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		if !client.IsValid() && from.Addr() == clientIP {
			client = from
		}
		if from != client {
			if client.IsValid() {
				_, _ = pc.WriteToUDPAddrPort(append(append([]byte{0, 0, 0}, socksAddrBytes(from)...), buf[:n]...), client)
			}
			continue
		}
		dst, payload, ok := splitDatagram(buf[:n])
		if ok && (r.opt.Allow == nil || r.opt.Allow(dst)) {
			_, _ = pc.WriteToUDPAddrPort(payload, dst)
		}
	}
}

// socksAddrBytes is ATYP, the address and the port.
func socksAddrBytes(a netip.AddrPort) []byte {
	atyp := byte(1)
	if a.Addr().Is6() {
		atyp = 4
	}
	b := append([]byte{atyp}, a.Addr().AsSlice()...)
	return binary.BigEndian.AppendUint16(b, a.Port())
}

// splitDatagram reads a client's datagram header: no fragments, IP
// addresses only (what the node sends).
func splitDatagram(b []byte) (netip.AddrPort, []byte, bool) {
	if len(b) < 4 || b[0] != 0 || b[1] != 0 || b[2] != 0 {
		return netip.AddrPort{}, nil, false
	}
	n := map[byte]int{1: 4, 4: 16}[b[3]]
	if n == 0 || len(b) < 4+n+2 {
		return netip.AddrPort{}, nil, false
	}
	ip, _ := netip.AddrFromSlice(b[4 : 4+n])
	return netip.AddrPortFrom(ip, binary.BigEndian.Uint16(b[4+n:])), b[4+n+2:], true
}

// UDPEcho starts a UDP server in ns on addr that answers each datagram
// with it upper-cased; before that, from another port, it sends "noise",
// which a client that reads only its destination's datagrams drops.
func UDPEcho(t testing.TB, ns Netns, addr netip.AddrPort) netip.AddrPort {
	t.Helper()
	var pc, noise net.PacketConn
	if err := ns.Run(func() (err error) {
		if pc, err = net.ListenPacket("udp", addr.String()); err != nil {
			return err
		}
		noise, err = net.ListenPacket("udp", netip.AddrPortFrom(addr.Addr(), 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close(); _ = noise.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = noise.WriteTo([]byte("noise"), from)
			_, _ = pc.WriteTo([]byte(strings.ToUpper(string(buf[:n]))), from)
		}
	}()
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}
