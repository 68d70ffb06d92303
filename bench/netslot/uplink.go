package main

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
)

// timedUplink is the slot's uplink with the time of its own steps kept,
// to say where the slot's time goes: each TCP dial (the upstream connect
// inside the guest's connect), each UDP dial (a socket in the namespace
// per DNS query), and each resolver round trip (the query written to the
// first read of its answer returning).
type timedUplink struct {
	*userstack.HostUplink

	mu                        sync.Mutex
	tcpDial, udpDial, resolve []time.Duration
}

func (u *timedUplink) DialTCP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	t0 := time.Now()
	c, err := u.HostUplink.DialTCP(ctx, dst)
	u.keep(&u.tcpDial, time.Since(t0))

	return c, err
}

func (u *timedUplink) DialUDP(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	t0 := time.Now()
	c, err := u.HostUplink.DialUDP(ctx, dst)
	u.keep(&u.udpDial, time.Since(t0))
	if err != nil {
		return nil, err
	}
	pc, ok := c.(net.PacketConn)
	if !ok {
		return c, nil
	}
	return &timedConn{Conn: c, PacketConn: pc, u: u}, nil
}

func (u *timedUplink) keep(to *[]time.Duration, d time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	*to = append(*to, d)
}

// take returns what was kept since the last take, and forgets it.
func (u *timedUplink) take() (tcpDial, udpDial, resolve []time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	tcpDial, udpDial, resolve = u.tcpDial, u.udpDial, u.resolve
	u.tcpDial, u.udpDial, u.resolve = nil, nil, nil
	return tcpDial, udpDial, resolve
}

// timedConn times a query's write to its answer's read. It is a
// net.PacketConn too, as the UDP socket it wraps, because the slot's DNS
// client frames messages by that (a stream would get length prefixes).
type timedConn struct {
	net.Conn
	net.PacketConn
	u       *timedUplink
	written time.Time
}

func (c *timedConn) Write(b []byte) (int, error) {
	c.written = time.Now()
	return c.Conn.Write(b)
}

func (c *timedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err == nil && !c.written.IsZero() {
		c.u.keep(&c.u.resolve, time.Since(c.written))
		c.written = time.Time{}
	}
	return n, err
}

// The methods both embedded interfaces have are the socket's own.
func (c *timedConn) Close() error                       { return c.Conn.Close() }
func (c *timedConn) LocalAddr() net.Addr                { return c.Conn.LocalAddr() }
func (c *timedConn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(t) }
func (c *timedConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(t) }
func (c *timedConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(t) }
