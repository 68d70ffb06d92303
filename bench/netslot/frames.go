package main

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/header"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/policy"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
)

// framedAttachment is, with -frames, the slot served as the node's
// attachment serves it (userstack.Slot.Serve on QEMU's stream socket) but
// on a connection that clocks the frames: when the guest's TCP SYN or DNS
// query arrived from QEMU and when the slot's SYN-ACK or answer left for
// it. Their difference is the slot's own time; the rest of what the guest
// measures is QEMU's stream backend and the guest. The clock costs a copy
// of each frame the slot writes (one write instead of the attachment's
// gather write), so this mode is for the breakdown, not the figures.
type framedAttachment struct {
	slot  *userstack.Slot
	clock *frameClock
	done  chan struct{}
	wg    sync.WaitGroup
}

func newFramedAttachment(uplink userstack.Uplink, resolvers []netip.AddrPort) (*framedAttachment, error) {
	// The policy as userstack.Network.Attach compiles it.
	p, err := policy.Compile(&ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET},
		policy.Context{LinkDNS: []netip.Addr{userstack.GatewayV4}})
	if err != nil {
		return nil, err
	}
	s, err := userstack.New(userstack.Config{Policy: p, Uplink: uplink, Resolvers: resolvers})
	if err != nil {
		return nil, err
	}
	return &framedAttachment{slot: s, clock: &frameClock{syn: map[uint16]time.Time{}, query: map[uint16]time.Time{}}, done: make(chan struct{})}, nil
}

func (*framedAttachment) Device() netslot.Device {
	return netslot.Device{Stream: &netslot.Stream{Name: userstack.SocketName}}
}

// Guest is the addressing userstack's attachment gives.
func (*framedAttachment) Guest() netslot.Addressing {
	g := userstack.GatewayV4
	return netslot.Addressing{Address: userstack.GuestV4, Gateway: g, Nameserver: g, AddressV6: userstack.GuestV6, GatewayV6: userstack.GatewayV6}
}

// Started connects once QEMU's socket is there and serves the slot on it.
func (a *framedAttachment) Started(runDir string) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			conn, err := net.Dial("unix", filepath.Join(runDir, userstack.SocketName))
			if err == nil {
				a.clock.conn = conn
				_ = a.slot.Serve(a.clock)
				return
			}
			select {
			case <-a.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
}

// Apply and Draining: the bench never changes a policy.
func (*framedAttachment) Apply(context.Context, netslot.Policy, time.Duration) error {
	return errors.New("bench: no policy changes")
}
func (*framedAttachment) Draining() uint64                         { return 0 }
func (*framedAttachment) EgressDraining() []netslot.EgressDraining { return nil }
func (*framedAttachment) EgressFaults() []netslot.EgressFault      { return nil }
func (*framedAttachment) ResolverFaults() []netslot.ResolverFault  { return nil }
func (a *framedAttachment) Counters() netslot.Counters             { return a.slot.Counters() }

func (a *framedAttachment) Release() error {
	close(a.done)
	err := a.slot.Close()
	a.wg.Wait()
	return err
}

// frameClock is the stream as the slot sees it, with the frames parsed on
// the way (the 4-byte big-endian length of qemustream, then the frame).
type frameClock struct {
	conn net.Conn

	in, out []byte // bytes of frames not yet whole

	mu         sync.Mutex
	syn, query map[uint16]time.Time // by the guest's port: when it arrived
	tcp, dns   []time.Duration      // the slot's own time, each
}

func (c *frameClock) Read(b []byte) (int, error) {
	n, err := c.conn.Read(b)
	if n > 0 {
		now := time.Now()
		c.in = append(c.in, b[:n]...)
		c.in = eachFrame(c.in, func(f []byte) { c.arrived(f, now) })
	}
	return n, err
}

// Write passes on whole frames only, one write each, and clocks them once
// written.
func (c *frameClock) Write(b []byte) (int, error) {
	c.out = append(c.out, b...)
	var werr error
	c.out = eachFrame(c.out, func(f []byte) {
		if werr != nil {
			return
		}
		whole := make([]byte, 4+len(f))
		binary.BigEndian.PutUint32(whole, uint32(len(f)))
		copy(whole[4:], f)
		if _, werr = c.conn.Write(whole); werr == nil {
			c.left(f, time.Now())
		}
	})
	if werr != nil {
		return 0, werr
	}
	return len(b), nil
}

func (c *frameClock) Close() error { return c.conn.Close() }

// eachFrame calls fn for each whole frame at the start of buf and returns
// what is left.
func eachFrame(buf []byte, fn func([]byte)) []byte {
	for len(buf) >= 4 {
		n := int(binary.BigEndian.Uint32(buf))
		if len(buf) < 4+n {
			break
		}
		fn(buf[4 : 4+n])
		buf = buf[4+n:]
	}
	return append([]byte(nil), buf...)
}

// ports are an IPv4 TCP or UDP frame's protocol, ports and TCP flags.
func ports(f []byte) (proto uint8, src, dst uint16, flags header.TCPFlags, ok bool) {
	if len(f) < header.EthernetMinimumSize || header.Ethernet(f).Type() != header.IPv4ProtocolNumber {
		return 0, 0, 0, 0, false
	}
	ip := header.IPv4(f[header.EthernetMinimumSize:])
	if !ip.IsValid(len(ip)) {
		return 0, 0, 0, 0, false
	}
	payload := ip.Payload()
	switch ip.Protocol() {
	case uint8(header.TCPProtocolNumber):
		if len(payload) < header.TCPMinimumSize {
			return 0, 0, 0, 0, false
		}
		t := header.TCP(payload)
		return 6, t.SourcePort(), t.DestinationPort(), t.Flags(), true
	case uint8(header.UDPProtocolNumber):
		if len(payload) < header.UDPMinimumSize {
			return 0, 0, 0, 0, false
		}
		u := header.UDP(payload)
		return 17, u.SourcePort(), u.DestinationPort(), 0, true
	}
	return 0, 0, 0, 0, false
}

// arrived clocks a guest's SYN or query.
func (c *frameClock) arrived(f []byte, at time.Time) {
	proto, src, dst, flags, ok := ports(f)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case ok && proto == 6 && flags == header.TCPFlagSyn:
		c.syn[src] = at
	case ok && proto == 17 && dst == 53:
		c.query[src] = at
	}
}

// left matches the slot's SYN-ACK or answer to what it answers.
func (c *frameClock) left(f []byte, at time.Time) {
	proto, src, dst, flags, ok := ports(f)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case ok && proto == 6 && flags == header.TCPFlagSyn|header.TCPFlagAck:
		if t, ok := c.syn[dst]; ok {
			c.tcp = append(c.tcp, at.Sub(t))
			delete(c.syn, dst)
		}
	case ok && proto == 17 && src == 53:
		if t, ok := c.query[dst]; ok {
			c.dns = append(c.dns, at.Sub(t))
			delete(c.query, dst)
		}
	}
}

// take returns the slot's own times since the last take, and forgets them.
func (c *frameClock) take() (tcp, dns []time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tcp, dns = c.tcp, c.dns
	c.tcp, c.dns = nil, nil
	return tcp, dns
}
