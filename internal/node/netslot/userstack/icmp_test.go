package userstack_test

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot/qemustream"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
)

// rawGuest writes hand-made frames on the stream and reads the slot's.
type rawGuest struct {
	w *qemustream.Writer
	r *qemustream.Reader
	c net.Conn
}

func newRawGuest(conn net.Conn) *rawGuest {
	return &rawGuest{w: qemustream.NewWriter(conn), r: qemustream.NewReader(conn), c: conn}
}

// frame builds an Ethernet frame from the guest to the gateway holding an
// IP packet of proto carrying payload.
func frame(src, dst netip.Addr, proto uint8, payload []byte) []byte {
	hdr, typ := header.IPv4MinimumSize, header.IPv4ProtocolNumber
	if src.Is6() {
		hdr, typ = header.IPv6MinimumSize, header.IPv6ProtocolNumber
	}
	f := make([]byte, header.EthernetMinimumSize+hdr+len(payload))
	header.Ethernet(f).Encode(&header.EthernetFields{SrcAddr: tcpip.LinkAddress(guestMAC), DstAddr: tcpip.LinkAddress(userstack.GatewayMAC), Type: typ})
	body := f[header.EthernetMinimumSize:]
	copy(body[hdr:], payload)
	if src.Is4() {
		ip := header.IPv4(body)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(body)), TTL: 64, Protocol: proto, SrcAddr: addr(src), DstAddr: addr(dst)})
		ip.SetChecksum(^ip.CalculateChecksum())
	} else {
		header.IPv6(body).Encode(&header.IPv6Fields{PayloadLength: uint16(len(payload)), TransportProtocol: tcpip.TransportProtocolNumber(proto), HopLimit: 64, SrcAddr: addr(src), DstAddr: addr(dst)})
	}
	return f
}

// echoRequest is an ICMP (or ICMPv6) echo request with identifier 7,
// sequence 9 and data "kibotos".
func echoRequest(src, dst netip.Addr) []byte {
	msg := append([]byte{0, 0, 0, 0, 0, 7, 0, 9}, "kibotos"...)
	if src.Is4() {
		msg[0] = byte(header.ICMPv4Echo)
		header.ICMPv4(msg).SetChecksum(^checksum.Checksum(msg, 0))
		return frame(src, dst, uint8(header.ICMPv4ProtocolNumber), msg)
	}
	msg[0] = byte(header.ICMPv6EchoRequest)
	h := header.ICMPv6(msg)
	h.SetChecksum(header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: h[:8], Src: addr(src), Dst: addr(dst), PayloadCsum: checksum.Checksum(h[8:], 0), PayloadLen: len(h) - 8}))
	return frame(src, dst, uint8(header.ICMPv6ProtocolNumber), msg)
}

// icmpFrom waits for the next ICMP message to the guest whose type is not
// neighbour discovery, and returns its source and the message.
func (g *rawGuest) icmpFrom(t *testing.T) (netip.Addr, []byte) {
	t.Helper()
	_ = g.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		f, err := g.r.ReadFrame(nil)
		if err != nil {
			t.Fatalf("waiting for an ICMP message: %v", err)
		}
		body := f[header.EthernetMinimumSize:]
		switch header.Ethernet(f).Type() {
		case header.IPv4ProtocolNumber:
			ip := header.IPv4(body)
			if ip.Protocol() == uint8(header.ICMPv4ProtocolNumber) {
				if ^checksum.Checksum(ip.Payload(), 0) != 0 {
					t.Errorf("ICMP checksum wrong: % x", ip.Payload())
				}
				return netip.AddrFrom4(ip.SourceAddress().As4()), ip.Payload()
			}
		case header.IPv6ProtocolNumber:
			ip := header.IPv6(body)
			if ip.NextHeader() == uint8(header.ICMPv6ProtocolNumber) {
				m := header.ICMPv6(ip.Payload())
				if m.Type() >= header.ICMPv6RouterSolicit && m.Type() <= header.ICMPv6RedirectMsg || m.Type() >= 130 && m.Type() <= 143 {
					continue // neighbour discovery, MLD
				}
				return netip.AddrFrom16(ip.SourceAddress().As16()), m
			}
		}
	}
}

// Under PUBLIC_INTERNET an echo to a public address leaves from the host
// and, once that host replied, the guest gets the reply in the host's
// name with its own identifier, sequence and data; in both families.
func TestPublicEchoIsAnsweredByItsDestination(t *testing.T) {
	v4, v6 := netip.MustParseAddr("8.8.4.4"), netip.MustParseAddr("2606:4700::1111")
	up := &fakeUplink{echoes: map[netip.Addr]bool{v4: true, v6: true}}
	_, conn := startSlot(t, compile(t, public), up)
	g := newRawGuest(conn)
	for _, c := range []struct {
		src, dst netip.Addr
		reply    byte
	}{{userstack.GuestV4.Addr(), v4, byte(header.ICMPv4EchoReply)}, {userstack.GuestV6.Addr(), v6, byte(header.ICMPv6EchoReply)}} {
		if err := g.w.WriteFrame(echoRequest(c.src, c.dst)); err != nil {
			t.Fatal(err)
		}
		from, msg := g.icmpFrom(t)
		if from != c.dst || msg[0] != c.reply || msg[1] != 0 || !bytes.Equal(msg[4:], append([]byte{0, 7, 0, 9}, "kibotos"...)) {
			t.Errorf("echo to %s: from %s % x", c.dst, from, msg)
		}
	}
	if len(up.pings()) != 2 {
		t.Errorf("the uplink sent %v", up.pings())
	}
}

// A refused echo (a hard-denied address, DENY_ALL) and any UDP that is not
// a link DNS query are answered at once by the gateway with "communication
// administratively prohibited", quoting the packet; nothing is sent out.
func TestRefusedEchoAndUDPAreAdministrativelyProhibited(t *testing.T) {
	deny := &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL}
	udp := []byte{0x30, 0x39, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, 'h', 'e', 'y', '!'}
	cases := []struct {
		name   string
		policy *ctrlv1.NetworkPolicy
		frame  []byte
	}{
		{"echo to a private address", public, echoRequest(userstack.GuestV4.Addr(), netip.MustParseAddr("192.168.1.1"))},
		{"echo to loopback", public, echoRequest(userstack.GuestV4.Addr(), netip.MustParseAddr("127.0.0.1"))},
		{"echo to the metadata address", public, echoRequest(userstack.GuestV4.Addr(), netip.MustParseAddr("169.254.169.254"))},
		{"echo to ULA", public, echoRequest(userstack.GuestV6.Addr(), netip.MustParseAddr("fd00::1"))},
		{"echo under DENY_ALL", deny, echoRequest(userstack.GuestV4.Addr(), netip.MustParseAddr("8.8.4.4"))},
		{"echo under DENY_ALL v6", deny, echoRequest(userstack.GuestV6.Addr(), netip.MustParseAddr("2606:4700::1111"))},
		{"UDP to a public resolver", public, frame(userstack.GuestV4.Addr(), netip.MustParseAddr("8.8.8.8"), uint8(header.UDPProtocolNumber), udp)},
		{"UDP v6", public, frame(userstack.GuestV6.Addr(), netip.MustParseAddr("2606:4700::1111"), uint8(header.UDPProtocolNumber), udp)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			up := &fakeUplink{echoes: map[netip.Addr]bool{netip.MustParseAddr("8.8.4.4"): true}}
			_, conn := startSlot(t, compile(t, c.policy), up)
			g := newRawGuest(conn)
			if err := g.w.WriteFrame(c.frame); err != nil {
				t.Fatal(err)
			}
			from, msg := g.icmpFrom(t)
			sent := c.frame[header.EthernetMinimumSize:]
			if header.Ethernet(c.frame).Type() == header.IPv4ProtocolNumber {
				if from != userstack.GatewayV4 || msg[0] != byte(header.ICMPv4DstUnreachable) || msg[1] != byte(header.ICMPv4AdminProhibited) || !bytes.Equal(msg[8:], sent) {
					t.Errorf("from %s: % x", from, msg)
				}
			} else if from != userstack.GatewayV6 || msg[0] != byte(header.ICMPv6DstUnreachable) || msg[1] != byte(header.ICMPv6Prohibited) || !bytes.Equal(msg[8:], sent) {
				t.Errorf("from %s: % x", from, msg)
			}
			if len(up.pings())+len(up.dials()) != 0 {
				t.Errorf("the uplink was used: %v %v", up.pings(), up.dials())
			}
		})
	}
}
