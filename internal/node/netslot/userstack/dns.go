package userstack

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"

	"github.com/kibotos/kibotos/internal/node/netslot/policy"
)

// The link DNS service: port 53 on the gateway addresses, over UDP and
// TCP (handleTCP gives the slot a TCP flow to it the policy admits).
const (
	dnsPort = 53
	// maxQueries bounds the guest's queries in flight; more wait.
	maxQueries = 64
	// queryTimeout bounds one query to the deployment resolver: a query
	// it leaves unanswered is SERVFAIL to the guest, never retried
	// elsewhere.
	queryTimeout = 5 * time.Second
	// tcpDNSIdle is how long a guest's TCP DNS connection may wait
	// between queries before the slot closes it (RFC 7766 6.2.3).
	tcpDNSIdle = 30 * time.Second
)

// serveDNS listens on the gateway addresses' port 53 inside the stack.
func (s *Slot) serveDNS() error {
	for _, gw := range []netip.Addr{GatewayV4, GatewayV6} {
		conn, err := gonet.DialUDP(s.stack, &tcpip.FullAddress{NIC: nicID, Addr: tcpAddr(gw), Port: dnsPort}, nil, protocolOf(gw))
		if err != nil {
			return fmt.Errorf("userstack: link DNS on %s: %w", gw, err)
		}
		s.flows.add(conn)
		if !s.goRun(func() { s.answerQueries(gw, conn) }) {
			_ = conn.Close()
		}
	}
	return nil
}

// answerQueries answers the guest's queries to gw until the slot closes.
func (s *Slot) answerQueries(gw netip.Addr, conn *gonet.UDPConn) {
	inflight := make(chan struct{}, maxQueries)
	buf := make([]byte, dns.MaxMsgSize)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return
		}
		q := new(dns.Msg)
		if q.Unpack(buf[:n]) != nil || q.Response {
			continue // not a query: dropped
		}
		inflight <- struct{}{}
		if !s.goRun(func() {
			defer func() { <-inflight }()
			answer := s.answer(gw, q, false)
			if b, err := answer.Pack(); err == nil {
				_, _ = conn.WriteTo(b, from)
			}
		}) {
			return // the slot is closing
		}
	}
}

// serveTCPDNS answers the length-prefixed queries of one guest TCP
// connection to gw, each in turn, until the guest closes it, sends what
// is not a query, or idles; the slot closing closes it.
func (s *Slot) serveTCPDNS(gw netip.Addr, c net.Conn) {
	stop := context.AfterFunc(s.ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	conn := &dns.Conn{Conn: c}
	for {
		_ = c.SetReadDeadline(time.Now().Add(tcpDNSIdle))
		q, err := conn.ReadMsg()
		if err != nil || q.Response {
			return
		}
		_ = c.SetWriteDeadline(time.Now().Add(queryTimeout))
		if conn.WriteMsg(s.answer(gw, q, true)) != nil {
			return
		}
	}
}

// answer is the reply to q, sent to the link address gw (over TCP when
// overTCP): REFUSED when the policy refuses it (DENY_ALL); else the
// policy's Resolver's answer when it has one, or SERVFAIL when that fails;
// else the first deployment resolver of gw's family's answer, or SERVFAIL
// when there is none or it does not answer.
func (s *Slot) answer(gw netip.Addr, q *dns.Msg, overTCP bool) *dns.Msg {
	for {
		rev := s.policy.Load()
		d := rev.Decide(policy.Flow{Proto: policy.UDP, Dst: gw, Port: dnsPort})
		if d.Kind != policy.LinkDNS {
			return new(dns.Msg).SetRcode(q, dns.RcodeRefused)
		}
		if rev.dns == nil {
			return s.askDeployment(gw, q, overTCP)
		}
		if rev.dns.acquire() {
			defer rev.dns.release()
			return s.askResolver(rev.dns, q)
		}
		// Its revision was replaced meanwhile: the new one answers.
	}
}

// askDeployment is the first deployment resolver of gw's family's answer
// to q, asked over TCP when the guest asked over TCP (a UDP answer may be
// truncated), or SERVFAIL.
func (s *Slot) askDeployment(gw netip.Addr, q *dns.Msg, overTCP bool) *dns.Msg {
	resolver, ok := s.resolverFor(gw)
	if !ok {
		return new(dns.Msg).SetRcode(q, dns.RcodeServerFailure)
	}
	ctx, cancel := context.WithTimeout(s.ctx, queryTimeout)
	defer cancel()
	exchange := s.exchange
	if overTCP {
		exchange = s.exchangeTCP
	}
	reply, err := exchange(ctx, resolver, q)
	if err != nil {
		s.log.Debug("link DNS: resolver failed", "resolver", resolver, "err", err)
		return new(dns.Msg).SetRcode(q, dns.RcodeServerFailure)
	}
	return reply
}

// exchangeTCP asks resolver q over a TCP connection of its own.
func (s *Slot) exchangeTCP(ctx context.Context, resolver netip.AddrPort, q *dns.Msg) (*dns.Msg, error) {
	c, err := s.uplink.DialTCP(ctx, resolver)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(deadline)
	}
	reply, _, err := (&dns.Client{Net: "tcp"}).ExchangeWithConnContext(ctx, q, &dns.Conn{Conn: c})
	return reply, err
}

// exchange sends q to resolver over the uplink and reads its reply, on a
// socket kept from an earlier query when there is one (a new socket per
// query was a fifth of the slot's cost of a query, bench/netslot).
func (s *Slot) exchange(ctx context.Context, resolver netip.AddrPort, q *dns.Msg) (*dns.Msg, error) {
	c := s.dnsConns.get(resolver)
	if c == nil {
		var err error
		if c, err = s.uplink.DialUDP(ctx, resolver); err != nil {
			return nil, err
		}
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(deadline)
	}
	client := &dns.Client{Net: "udp", UDPSize: dns.MaxMsgSize}
	reply, _, err := client.ExchangeWithConnContext(ctx, q, &dns.Conn{Conn: c})
	if err != nil {
		// A socket whose query failed may yet get that query's late reply:
		// it is not used again.
		_ = c.Close()
		return nil, err
	}
	s.dnsConns.put(resolver, c)
	return reply, nil
}

// maxIdleDNSConns bounds the sockets kept for each resolver.
const maxIdleDNSConns = 8

// dnsConns are the idle sockets to the deployment resolvers.
type dnsConns struct {
	mu     sync.Mutex
	closed bool
	idle   map[netip.AddrPort][]net.Conn
}

func (d *dnsConns) get(r netip.AddrPort) net.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	cs := d.idle[r]
	if len(cs) == 0 {
		return nil
	}
	c := cs[len(cs)-1]
	d.idle[r] = cs[:len(cs)-1]
	return c
}

func (d *dnsConns) put(r netip.AddrPort, c net.Conn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || len(d.idle[r]) >= maxIdleDNSConns {
		_ = c.Close()
		return
	}
	if d.idle == nil {
		d.idle = map[netip.AddrPort][]net.Conn{}
	}
	d.idle[r] = append(d.idle[r], c)
}

func (d *dnsConns) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, cs := range d.idle {
		for _, c := range cs {
			_ = c.Close()
		}
	}
	clear(d.idle)
}
