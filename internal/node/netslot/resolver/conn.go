package resolver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// transport is how one query travels: a datagram, or a framed message on
// a connection (RFC 1035 section 4.2.2), plain or in TLS (RFC 7858).
type transport uint8

const (
	transportUDP transport = iota
	transportTCP
	transportTLS
)

// exchangeConn asks the upstream's addresses over tr, on an idle
// connection when one is kept, and returns the address that answered.
func (u *Upstream) exchangeConn(ctx context.Context, q *dns.Msg, tr transport) (*dns.Msg, netip.AddrPort, error) {
	addrs, err := u.addrs(ctx)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	return u.exchangeAddrs(ctx, q, tr, addrs)
}

// exchangeAt asks addr alone (the tcp retry of a truncated udp answer).
func (u *Upstream) exchangeAt(ctx context.Context, q *dns.Msg, tr transport, addr netip.AddrPort) (*dns.Msg, error) {
	reply, _, err := u.exchangeAddrs(ctx, q, tr, []netip.AddrPort{addr})
	return reply, err
}

func (u *Upstream) exchangeAddrs(ctx context.Context, q *dns.Msg, tr transport, addrs []netip.AddrPort) (*dns.Msg, netip.AddrPort, error) {
	for _, a := range addrs {
		c := u.idle.get(poolKey{tr, a})
		if c == nil {
			continue
		}
		reply, err := exchangeOn(ctx, c, q, tr)
		if err == nil {
			u.idle.put(poolKey{tr, a}, c)
			return reply, a, nil
		}
		_ = c.Close()
		if ctx.Err() != nil {
			return nil, a, exchangeFault(ctx, err)
		}
		// The upstream may have closed an idle connection: dial anew.
	}
	c, a, err := dialAny(ctx, addrs, func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
		return u.dial(ctx, tr, a)
	})
	if err != nil {
		return nil, a, err
	}
	reply, err := exchangeOn(ctx, c, q, tr)
	if err != nil {
		_ = c.Close()
		return nil, a, exchangeFault(ctx, err)
	}
	u.idle.put(poolKey{tr, a}, c)
	return reply, a, nil
}

// dial opens what tr travels on to a, through the Path.
func (u *Upstream) dial(ctx context.Context, tr transport, a netip.AddrPort) (net.Conn, error) {
	if tr == transportUDP {
		c, err := u.cfg.Path.DialUDP(ctx, a)
		if err != nil {
			return nil, err
		}
		return datagramConn{c}, nil
	}
	c, err := u.cfg.Path.DialTCP(ctx, a)
	if err != nil || tr == transportTCP {
		return c, err
	}
	tc := tls.Client(c, u.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, tlsFault(ctx, err)
	}
	return tc, nil
}

// tlsFault: a certificate not trusted or not for the host is
// TLS_VERIFICATION_FAILED; any other failed handshake is the exchange's.
func tlsFault(ctx context.Context, err error) error {
	var verr *tls.CertificateVerificationError
	if errors.As(err, &verr) {
		return fault(TLSVerificationFailed, err)
	}
	return exchangeFault(ctx, fmt.Errorf("TLS handshake: %w", err))
}

// exchangeOn writes q on c and reads its answer, bounded by ctx. A
// datagram that is not the answer (malformed, another ID, not a response)
// is dropped while the deadline runs, so a stray one cannot end the query;
// on a connection it is a broken upstream.
func exchangeOn(ctx context.Context, c net.Conn, q *dns.Msg, tr transport) (*dns.Msg, error) {
	if deadline, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	reply, err := readAnswer(c, q, tr)
	// A connection whose deadline ctx's end may yet move is not kept.
	if !stop() && err == nil {
		return nil, ctx.Err()
	}
	return reply, err
}

func readAnswer(c net.Conn, q *dns.Msg, tr transport) (*dns.Msg, error) {
	co := &dns.Conn{Conn: c, UDPSize: dns.MaxMsgSize}
	if err := co.WriteMsg(q); err != nil {
		return nil, err
	}
	buf := make([]byte, dns.MaxMsgSize)
	for {
		n, err := co.Read(buf)
		if err != nil {
			return nil, err
		}
		reply, err := answer(buf[:n], q.Id)
		if err == nil {
			return reply, nil
		}
		if tr != transportUDP {
			return nil, fault(UpstreamUnreachable, err)
		}
	}
}

// answer unpacks b as the response to the query with id.
func answer(b []byte, id uint16) (*dns.Msg, error) {
	reply := new(dns.Msg)
	if err := reply.Unpack(b); err != nil {
		return nil, fmt.Errorf("the upstream answered something that is not a DNS message: %w", err)
	}
	if !reply.Response || reply.Id != id {
		return nil, fmt.Errorf("the upstream answered a message that is not the response to query %d", id)
	}
	return reply, nil
}

// datagramConn makes a Path's datagram socket a net.PacketConn, which is
// how miekg/dns tells datagrams from a stream: each Write is one datagram
// by the Path's contract, whatever conn type carries it.
type datagramConn struct{ net.Conn }

func (d datagramConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, err := d.Read(p)
	return n, d.RemoteAddr(), err
}

func (d datagramConn) WriteTo(p []byte, _ net.Addr) (int, error) { return d.Write(p) }

// maxIdle bounds the connections kept for each address and transport.
const maxIdle = 4

type poolKey struct {
	tr   transport
	addr netip.AddrPort
}

// idlePool keeps the connections and sockets whose last query succeeded,
// as the link DNS address does for the deployment resolvers.
type idlePool struct {
	mu     sync.Mutex
	closed bool // after Close nothing is kept
	idle   map[poolKey][]net.Conn
}

func (p *idlePool) get(k poolKey) net.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.idle[k]
	if len(cs) == 0 {
		return nil
	}
	c := cs[len(cs)-1]
	p.idle[k] = cs[:len(cs)-1]
	return c
}

func (p *idlePool) put(k poolKey, c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[k]) >= maxIdle {
		_ = c.Close()
		return
	}
	if p.idle == nil {
		p.idle = map[poolKey][]net.Conn{}
	}
	p.idle[k] = append(p.idle[k], c)
}

func (p *idlePool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, cs := range p.idle {
		for _, c := range cs {
			_ = c.Close()
		}
	}
	clear(p.idle)
}
