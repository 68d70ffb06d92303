package userstack_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot/policy"
	"github.com/kibotos/kibotos/internal/node/netslot/qemustream"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
)

// fakeUplink is the world the slot's tests reach: "public" addresses that
// lead to listeners on loopback, and nothing else. It never dials any
// address it was not given, and records every dial it was asked for.
type fakeUplink struct {
	tcp    map[netip.AddrPort]string // public address → a loopback listener
	udp    map[netip.AddrPort]string
	echoes map[netip.Addr]bool // the addresses that answer an echo

	mu     sync.Mutex
	dialed []netip.AddrPort
	pinged []netip.Addr
}

func (u *fakeUplink) DialTCP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	u.record(dst)
	to, ok := u.tcp[dst]
	if !ok {
		return nil, syscall.ECONNREFUSED
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", to)
}

func (u *fakeUplink) DialUDP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	u.record(dst)
	to, ok := u.udp[dst]
	if !ok {
		return nil, syscall.ENETUNREACH
	}
	var d net.Dialer
	return d.DialContext(ctx, "udp", to)
}

func (u *fakeUplink) Echo(ctx context.Context, dst netip.Addr, _ []byte) error {
	u.mu.Lock()
	u.pinged = append(u.pinged, dst)
	u.mu.Unlock()
	if u.echoes[dst] {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (u *fakeUplink) record(dst netip.AddrPort) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.dialed = append(u.dialed, dst)
}

func (u *fakeUplink) pings() []netip.Addr {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]netip.Addr(nil), u.pinged...)
}

func (u *fakeUplink) dials() []netip.AddrPort {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]netip.AddrPort(nil), u.dialed...)
}

func compile(t *testing.T, p *ctrlv1.NetworkPolicy) *policy.Policy {
	t.Helper()
	c, err := policy.Compile(p, policy.Context{LinkDNS: []netip.Addr{userstack.GatewayV4, userstack.GatewayV6}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var public = &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET}

// startSlot serves a slot on one end of a Unix socket pair, as QEMU's
// stream would, and returns the other end.
func startSlot(t *testing.T, p *policy.Policy, up userstack.Uplink, resolvers ...netip.AddrPort) (*userstack.Slot, net.Conn) {
	t.Helper()
	return serveSlot(t, userstack.Config{Policy: p, Revision: 1, Uplink: up, Resolvers: resolvers})
}

// serveSlot is startSlot for a slot made with cfg.
func serveSlot(t *testing.T, cfg userstack.Config) (*userstack.Slot, net.Conn) {
	t.Helper()
	s, err := userstack.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	slotEnd, guestEnd := socketPair(t)
	served := make(chan error, 1)
	go func() { served <- s.Serve(slotEnd) }()
	t.Cleanup(func() {
		_ = guestEnd.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		_ = s.Close()
	})
	return s, guestEnd
}

func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "stream")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return conn(fds[0]), conn(fds[1])
}

// guestStack is a guest's TCP/IP stack on the stream (gVisor's too: a
// real TCP, UDP and neighbour discovery to talk to the slot), addressed
// and routed as a Workspace's guest is.
func guestStack(t *testing.T, conn net.Conn) *stack.Stack {
	t.Helper()
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	ep := channel.New(256, 1514, tcpip.LinkAddress(guestMAC))
	if err := s.CreateNIC(1, ethernet.New(ep)); err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.Prefix{userstack.GuestV4, userstack.GuestV6} {
		proto := ipv4.ProtocolNumber
		if a.Addr().Is6() {
			proto = ipv6.ProtocolNumber
		}
		if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: proto, AddressWithPrefix: tcpip.AddressWithPrefix{Address: addr(a.Addr()), PrefixLen: a.Bits()}}, stack.AddressProperties{}); err != nil {
			t.Fatal(err)
		}
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, Gateway: addr(userstack.GatewayV4), NIC: 1},
		{Destination: header.IPv6EmptySubnet, Gateway: addr(userstack.GatewayV6), NIC: 1},
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); s.Close() })
	go func() {
		r := qemustream.NewReader(conn)
		for {
			f, err := r.ReadFrame(nil)
			if err != nil {
				return
			}
			pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(f)})
			ep.InjectInbound(0, pkt)
			pkt.DecRef()
		}
	}()
	go func() {
		w := qemustream.NewWriter(conn)
		for {
			pkt := ep.ReadContext(ctx)
			if pkt == nil {
				return
			}
			err := w.WriteFrame(pkt.ToView().AsSlice())
			pkt.DecRef()
			if err != nil {
				return
			}
		}
	}()
	return s
}

var guestMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}

func addr(a netip.Addr) tcpip.Address {
	if a.Is4() {
		return tcpip.AddrFrom4(a.As4())
	}
	return tcpip.AddrFrom16(a.As16())
}

func dial(ctx context.Context, s *stack.Stack, dst netip.AddrPort) (net.Conn, error) {
	proto := ipv4.ProtocolNumber
	if dst.Addr().Is6() {
		proto = ipv6.ProtocolNumber
	}
	return gonet.DialContextTCP(ctx, s, tcpip.FullAddress{NIC: 1, Addr: addr(dst.Addr()), Port: dst.Port()}, proto)
}

// loopbackServer serves each connection to a listener on loopback with
// handle (which closes it): a "public" host's service.
func loopbackServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln.Addr().String()
}

// echoServer is a TCP echo server on loopback.
func echoServer(t *testing.T) string {
	return loopbackServer(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.Copy(c, c)
	})
}

var (
	publicV4 = netip.MustParseAddrPort("8.8.4.4:80")
	publicV6 = netip.MustParseAddrPort("[2606:4700::1111]:80")
)

func withTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Under PUBLIC_INTERNET a guest's TCP connection to a public address, in
// either family, reaches it and carries bytes both ways (the slot spliced
// the guest's connection to the one it dialled).
func TestPublicTCPReachesItsDestinationInBothFamilies(t *testing.T) {
	srv := echoServer(t)
	up := &fakeUplink{tcp: map[netip.AddrPort]string{publicV4: srv, publicV6: srv}}
	_, conn := startSlot(t, compile(t, public), up)
	g := guestStack(t, conn)
	for _, dst := range []netip.AddrPort{publicV4, publicV6} {
		c, err := dial(withTimeout(t), g, dst)
		if err != nil {
			t.Fatalf("dial %s: %v", dst, err)
		}
		if _, err := c.Write([]byte("ping " + dst.String())); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len("ping "+dst.String()))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping "+dst.String() {
			t.Errorf("echo through %s: %q %v", dst, got, err)
		}
		_ = c.Close()
	}
}

// A refused connection is reset at once and never dialled: the hard deny
// (private, loopback, metadata, the gateway itself), a deny entry, and
// everything under DENY_ALL. A destination that refuses the slot's dial
// is a reset to the guest too.
func TestRefusedTCPIsResetAndNeverDialled(t *testing.T) {
	srv := echoServer(t)
	cases := []struct {
		name   string
		policy *ctrlv1.NetworkPolicy
		dst    netip.AddrPort
		dialed bool
	}{
		{"private", public, netip.MustParseAddrPort("10.1.2.3:80"), false},
		{"metadata", public, netip.MustParseAddrPort("169.254.169.254:80"), false},
		{"the gateway", public, netip.MustParseAddrPort("10.0.2.2:22"), false},
		{"unique local v6", public, netip.MustParseAddrPort("[fd00::1]:80"), false},
		{"deny entry", &ctrlv1.NetworkPolicy{Mode: public.Mode, Deny: []string{"8.8.4.0/24"}}, publicV4, false},
		{"deny-all", &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL}, publicV4, false},
		{"destination refuses", public, netip.MustParseAddrPort("8.8.8.8:81"), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := &fakeUplink{tcp: map[netip.AddrPort]string{publicV4: srv}}
			_, conn := startSlot(t, compile(t, c.policy), up)
			g := guestStack(t, conn)
			_, err := dial(withTimeout(t), g, c.dst)
			if err == nil || !strings.HasSuffix(err.Error(), (&tcpip.ErrConnectionRefused{}).String()) {
				t.Errorf("dial %s: %v, want connection refused", c.dst, err)
			}
			if got := len(up.dials()) > 0; got != c.dialed {
				t.Errorf("dial %s: the uplink was dialled: %v (%v)", c.dst, got, up.dials())
			}
		})
	}
}

// SetPolicy changes what a new connection of a running slot reaches.
func TestANewPolicyActsOnTheNextConnection(t *testing.T) {
	srv := echoServer(t)
	up := &fakeUplink{tcp: map[netip.AddrPort]string{publicV4: srv}}
	s, conn := startSlot(t, compile(t, public), up)
	g := guestStack(t, conn)
	c, err := dial(withTimeout(t), g, publicV4)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	s.SetPolicy(compile(t, &ctrlv1.NetworkPolicy{Mode: public.Mode, Deny: []string{"0.0.0.0/0"}}), 2, 0)
	if _, err := dial(withTimeout(t), g, publicV4); err == nil {
		t.Error("a connection after deny 0.0.0.0/0 was put in force was admitted")
	}
}

func query(t *testing.T, g *stack.Stack, server netip.Addr, name string) *dns.Msg {
	t.Helper()
	proto := ipv4.ProtocolNumber
	if server.Is6() {
		proto = ipv6.ProtocolNumber
	}
	pc, err := gonet.DialUDP(g, nil, &tcpip.FullAddress{NIC: 1, Addr: addr(server), Port: 53}, proto)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	_ = pc.SetDeadline(time.Now().Add(20 * time.Second))
	q := new(dns.Msg).SetQuestion(name, dns.TypeA)
	reply, _, err := (&dns.Client{Net: "udp"}).ExchangeWithConn(q, &dns.Conn{Conn: pc})
	if err != nil {
		t.Fatalf("query %s at %s: %v", name, server, err)
	}
	return reply
}

// resolver is a DNS server on loopback answering every A query with
// 192.0.2.7: the deployment resolver.
func resolver(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg).SetReply(q)
		rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A 192.0.2.7")
		m.Answer = append(m.Answer, rr)
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// The link DNS address: REFUSED at once under DENY_ALL; under
// PUBLIC_INTERNET the first deployment resolver of its family answers, and
// a family with no resolver, or a resolver that does not answer, is
// SERVFAIL (no fallback to anything else).
func TestLinkDNS(t *testing.T) {
	up := &fakeUplink{udp: map[netip.AddrPort]string{netip.MustParseAddrPort("9.9.9.9:53"): resolver(t)}}
	resolvers := []netip.AddrPort{netip.MustParseAddrPort("9.9.9.9:53")}

	_, conn := startSlot(t, compile(t, &ctrlv1.NetworkPolicy{}), up, resolvers...)
	if r := query(t, guestStack(t, conn), userstack.GatewayV4, "example.com."); r.Rcode != dns.RcodeRefused {
		t.Errorf("a query under DENY_ALL: %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	if len(up.dials()) != 0 {
		t.Errorf("a query under DENY_ALL reached the uplink: %v", up.dials())
	}

	_, conn = startSlot(t, compile(t, public), up, resolvers...)
	g := guestStack(t, conn)
	r := query(t, g, userstack.GatewayV4, "example.com.")
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.7" {
		t.Errorf("a query under PUBLIC_INTERNET: %v", r)
	}
	if r := query(t, g, userstack.GatewayV6, "example.com."); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("a query to fe80::1 with no IPv6 resolver: %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}

	_, conn = startSlot(t, compile(t, public), up, netip.MustParseAddrPort("9.9.9.10:53"))
	if r := query(t, guestStack(t, conn), userstack.GatewayV4, "example.com."); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("a query whose resolver cannot be reached: %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
}

// A change that refuses an open connection keeps it for the change's drain,
// reporting the revision that admitted it as draining, then closes it; a
// later revision that admits it again keeps it open.
func TestARefusedConnectionDrains(t *testing.T) {
	srv := echoServer(t)
	up := &fakeUplink{tcp: map[netip.AddrPort]string{publicV4: srv}}
	p1 := compile(t, public)
	denyAll := compile(t, &ctrlv1.NetworkPolicy{Mode: public.Mode, Deny: []string{"0.0.0.0/0"}})
	s, conn := startSlot(t, p1, up)
	g := guestStack(t, conn)
	echo := func(c net.Conn, msg string) error {
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		got := make([]byte, len(msg))
		_, err := io.ReadFull(c, got)
		return err
	}

	kept, err := dial(withTimeout(t), g, publicV4)
	if err != nil {
		t.Fatal(err)
	}
	s.SetPolicy(denyAll, 2, time.Hour)
	s.SetPolicy(p1, 3, 0)
	if err := echo(kept, "still admitted"); err != nil || s.Draining() != 0 {
		t.Errorf("a connection revision 3 admits again: %v, draining %d", err, s.Draining())
	}

	s.SetPolicy(denyAll, 4, 300*time.Millisecond)
	if got := s.Draining(); got != 1 {
		t.Errorf("draining %d right after revision 4 refused a connection of revision 1, want 1", got)
	}
	if err := echo(kept, "during the drain"); err != nil {
		t.Errorf("the refused connection during its drain: %v", err)
	}
	_ = kept.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := kept.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the refused connection after its drain: %v, want it closed", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.Draining() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling a condition, not waiting for readiness
	}
	if got := s.Draining(); got != 0 {
		t.Errorf("draining %d once the connection closed, want 0", got)
	}
}

// A guest reconnecting from the port of a connection the world closed
// first is served at once: the slot's side of that connection does not sit
// in TIME_WAIT swallowing the new SYN (gVisor hands such a SYN only to a
// listener, and the slot has a forwarder), as a guest's kernel may reuse
// the port as soon as its own side closed.
func TestAReconnectFromTheSamePortIsServed(t *testing.T) {
	srv := loopbackServer(t, func(c net.Conn) {
		_, _ = c.Write([]byte("bye"))
		_ = c.Close() // the world closes first
	})
	up := &fakeUplink{tcp: map[netip.AddrPort]string{publicV4: srv}}
	_, conn := startSlot(t, compile(t, public), up)
	g := guestStack(t, conn)
	local := tcpip.FullAddress{NIC: 1, Addr: addr(userstack.GuestV4.Addr()), Port: 40000}
	remote := tcpip.FullAddress{NIC: 1, Addr: addr(publicV4.Addr()), Port: publicV4.Port()}
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := gonet.DialTCPWithBind(ctx, g, local, remote, ipv4.ProtocolNumber)
		for err != nil && strings.Contains(err.Error(), "port is in use") && ctx.Err() == nil {
			// The guest's own side is still finishing its close (LAST_ACK).
			time.Sleep(10 * time.Millisecond)
			c, err = gonet.DialTCPWithBind(ctx, g, local, remote, ipv4.ProtocolNumber)
		}
		cancel()
		if err != nil {
			t.Fatalf("connection %d from port 40000: %v", i+1, err)
		}
		if b, err := io.ReadAll(c); err != nil || string(b) != "bye" {
			t.Errorf("connection %d: %q %v", i+1, b, err)
		}
		_ = c.Close()
	}
}

// The slot counts the bytes of the frames the guest sends and receives,
// refused traffic too: a query REFUSED under DENY_ALL moves both counts by
// at least its Ethernet, IPv4 and UDP headers and its DNS message.
func TestTheSlotCountsTheGuestsFrames(t *testing.T) {
	s, conn := startSlot(t, compile(t, &ctrlv1.NetworkPolicy{}), &fakeUplink{})
	if c := s.Counters(); c.Sent != 0 || c.Received != 0 {
		t.Fatalf("counters %+v before any frame", c)
	}
	r := query(t, guestStack(t, conn), userstack.GatewayV4, "example.com.")
	packed, _ := new(dns.Msg).SetQuestion("example.com.", dns.TypeA).Pack()
	headers := uint64(header.EthernetMinimumSize + header.IPv4MinimumSize + header.UDPMinimumSize)
	reply, _ := r.Pack()
	deadline := time.Now().Add(10 * time.Second)
	for s.Counters().Received < headers+uint64(len(reply)) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the count follows the write the guest already read
	}
	if c := s.Counters(); c.Sent < headers+uint64(len(packed)) || c.Received < headers+uint64(len(reply)) {
		t.Errorf("counters %+v after a %d-byte query and a %d-byte answer", c, len(packed), len(reply))
	}
}
