package userstack

import (
	"context"
	"encoding/binary"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/kibotos/kibotos/internal/node/netslot/policy"
)

// echoTimeout is how long the slot waits for the reply to an echo it sent
// on the guest's behalf (ping's default interval is one second; a reply
// later than this is lost, as on a slow path).
const echoTimeout = 10 * time.Second

var (
	broadcastV4       = netip.MustParseAddr("255.255.255.255")
	subnetBroadcastV4 = netip.MustParseAddr("10.0.2.255")
)

// packet is a guest IP packet the slot looked into.
type packet struct {
	eth       header.Ethernet
	v4        bool
	ip        []byte // the IP packet, header included
	src, dst  netip.Addr
	proto     uint8
	transport []byte // nil for a fragment that is not the first
}

// intercept takes the guest's frames for the world that are not TCP: an
// ICMP echo request is decided and sent from the host, anything else is
// refused as administratively prohibited. It returns false for what the
// stack handles: ARP, neighbour discovery and multicast, what is addressed
// to the gateway (the link DNS service included), and TCP, whose SYNs the
// forwarder decides.
func (s *Slot) intercept(frame []byte) bool {
	p, ok := parse(frame)
	if !ok {
		return false
	}
	if p.dst == GatewayV4 || p.dst == GatewayV6 || p.dst.IsMulticast() || p.dst == broadcastV4 || p.dst == subnetBroadcastV4 {
		return false // the link's own
	}
	if p.proto == uint8(header.TCPProtocolNumber) {
		return false
	}
	if isEchoRequest(p) {
		s.echo(p)
		return true
	}
	s.log.Debug("refused", "proto", p.proto, "dst", p.dst)
	s.toGuest(prohibited(p))
	return true
}

// echo decides one echo request and, when it may leave, sends it from the
// host and answers the guest once the destination replied.
func (s *Slot) echo(p packet) {
	d := s.policy.Load().Decide(policy.Flow{Proto: policy.ICMPEcho, Dst: p.dst})
	if d.Kind != policy.Direct {
		s.log.Debug("echo refused", "dst", p.dst, "decision", d.String())
		s.toGuest(prohibited(p))
		return
	}
	select {
	case s.echoes <- struct{}{}:
	default:
		return // too many waiting: dropped
	}
	reply := echoReply(p)
	data := append([]byte(nil), p.transport[8:]...)
	started := s.goRun(func() {
		defer func() { <-s.echoes }()
		ctx, cancel := context.WithTimeout(s.ctx, echoTimeout)
		defer cancel()
		if err := s.uplink.Echo(ctx, p.dst, data); err != nil {
			s.log.Debug("echo unanswered", "dst", p.dst, "err", err)
			return
		}
		s.toGuest(reply)
	})
	if !started {
		<-s.echoes // the slot is closing
	}
}

// parse reads the Ethernet and IP headers of a guest frame.
func parse(frame []byte) (packet, bool) {
	p := packet{eth: header.Ethernet(frame)}
	body := frame[header.EthernetMinimumSize:]
	switch p.eth.Type() {
	case header.IPv4ProtocolNumber:
		ip := header.IPv4(body)
		if !ip.IsValid(len(body)) {
			return p, false
		}
		p.v4, p.ip, p.proto = true, body[:ip.TotalLength()], ip.Protocol()
		p.src, p.dst = netipAddr(ip.SourceAddress()), netipAddr(ip.DestinationAddress())
		if ip.FragmentOffset() == 0 {
			p.transport = ip.Payload()
		}
	case header.IPv6ProtocolNumber:
		ip := header.IPv6(body)
		if !ip.IsValid(len(body)) {
			return p, false
		}
		p.ip, p.proto = body[:header.IPv6MinimumSize+int(ip.PayloadLength())], ip.NextHeader()
		p.src, p.dst = netipAddr(ip.SourceAddress()), netipAddr(ip.DestinationAddress())
		p.transport = ip.Payload() // an extension header is judged as its own protocol: refused
	default:
		return p, false
	}
	return p, true
}

func isEchoRequest(p packet) bool {
	if len(p.transport) < header.ICMPv4MinimumSize {
		return false
	}
	if p.v4 {
		return p.proto == uint8(header.ICMPv4ProtocolNumber) && header.ICMPv4(p.transport).Type() == header.ICMPv4Echo
	}
	return p.proto == uint8(header.ICMPv6ProtocolNumber) && header.ICMPv6(p.transport).Type() == header.ICMPv6EchoRequest
}

// echoReply is the reply the destination of echo request p sends: same
// identifier, sequence and data, from p's destination.
func echoReply(p packet) []byte {
	msg := append([]byte(nil), p.transport...)
	if p.v4 {
		msg[0] = byte(header.ICMPv4EchoReply)
	} else {
		msg[0] = byte(header.ICMPv6EchoReply)
	}
	msg[1] = 0
	return s4or6(p, p.dst, p.src, msg)
}

// prohibited is the gateway's "communication administratively prohibited"
// about p (ICMP destination unreachable, code 13; ICMPv6 code 1), quoting
// as much of p as an ICMP error may.
func prohibited(p packet) []byte {
	if p.v4 {
		quote := p.ip[:min(len(p.ip), 548)] // RFC 1812 4.3.2.3: at most 576 bytes in all
		msg := make([]byte, header.ICMPv4MinimumSize+len(quote))
		msg[0], msg[1] = byte(header.ICMPv4DstUnreachable), byte(header.ICMPv4AdminProhibited)
		copy(msg[header.ICMPv4MinimumSize:], quote)
		return s4or6(p, GatewayV4, p.src, msg)
	}
	quote := p.ip[:min(len(p.ip), 1280-header.IPv6MinimumSize-header.ICMPv6MinimumSize)] // RFC 4443 2.4(c)
	msg := make([]byte, header.ICMPv6MinimumSize+len(quote))
	msg[0], msg[1] = byte(header.ICMPv6DstUnreachable), byte(header.ICMPv6Prohibited)
	copy(msg[header.ICMPv6MinimumSize:], quote)
	return s4or6(p, GatewayV6, p.src, msg)
}

// s4or6 frames the ICMP message msg from src to dst in p's family, back to
// the guest's link address, and sets its checksums.
func s4or6(p packet, src, dst netip.Addr, msg []byte) []byte {
	hdr := header.IPv6MinimumSize
	if p.v4 {
		hdr = header.IPv4MinimumSize
	}
	frame := make([]byte, header.EthernetMinimumSize+hdr+len(msg))
	eth := header.Ethernet(frame)
	eth.Encode(&header.EthernetFields{SrcAddr: tcpip.LinkAddress(GatewayMAC), DstAddr: p.eth.SourceAddress(), Type: p.eth.Type()})
	body := frame[header.EthernetMinimumSize:]
	copy(body[hdr:], msg)
	icmpMsg := body[hdr:]
	binary.BigEndian.PutUint16(icmpMsg[2:], 0)
	if p.v4 {
		ip := header.IPv4(body)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(body)), TTL: 64, Protocol: uint8(header.ICMPv4ProtocolNumber),
			SrcAddr: tcpAddr(src), DstAddr: tcpAddr(dst)})
		ip.SetChecksum(^ip.CalculateChecksum())
		header.ICMPv4(icmpMsg).SetChecksum(^checksum.Checksum(icmpMsg, 0))
		return frame
	}
	ip := header.IPv6(body)
	ip.Encode(&header.IPv6Fields{PayloadLength: uint16(len(msg)), TransportProtocol: header.ICMPv6ProtocolNumber, HopLimit: 64,
		SrcAddr: tcpAddr(src), DstAddr: tcpAddr(dst)})
	h := header.ICMPv6(icmpMsg)
	h.SetChecksum(header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: h[:header.ICMPv6MinimumSize], Src: tcpAddr(src), Dst: tcpAddr(dst),
		PayloadCsum: checksum.Checksum(h[header.ICMPv6MinimumSize:], 0), PayloadLen: len(h) - header.ICMPv6MinimumSize}))
	return frame
}
