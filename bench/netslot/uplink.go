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
	return &timedConn{Conn: c, u: u}, nil
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

// timedConn times a query's write to its answer's read.
type timedConn struct {
	net.Conn
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
