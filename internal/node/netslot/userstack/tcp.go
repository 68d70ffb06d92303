package userstack

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/kibotos/kibotos/internal/node/netslot/policy"
)

// dialTimeout bounds a dial on the guest's behalf; the guest's own SYN
// retries run meanwhile and are one request to the forwarder.
const dialTimeout = 20 * time.Second

// handleTCP decides a guest's new TCP connection (its SYN): refused, it is
// reset at once; admitted, the slot dials the destination (directly, or
// through the Egress a Forward decision names) first and completes the
// guest's handshake only once that dial succeeded, so a destination that
// refuses, or forwarding that fails, is a reset to the guest too.
func (s *Slot) handleTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := netip.AddrPortFrom(netipAddr(id.LocalAddress), id.LocalPort)
	flow := policy.Flow{Proto: policy.TCP, Dst: dst.Addr(), Port: dst.Port()}
	rev := s.policy.Load()
	d := rev.Decide(flow)
	if d.Kind == policy.Refuse {
		s.log.Debug("tcp refused", "dst", dst, "decision", d.String())
		r.Complete(true)
		return
	}
	if d.Kind == policy.LinkDNS {
		s.acceptTCPDNS(r, dst.Addr())
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, dialTimeout)
	out, err := s.dial(ctx, rev, d, dst)
	cancel()
	if err != nil {
		s.log.Debug("tcp dial failed", "dst", dst, "decision", d.String(), "err", err)
		r.Complete(true)
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		_ = out.Close()
		r.Complete(true)
		return
	}
	r.Complete(false)
	t := &tcpFlow{flow: flow, decision: d, admittedBy: rev, guest: gonet.NewTCPConn(&wq, ep), world: out, endpoint: ep}
	if !s.goRun(func() { s.splice(t) }) {
		_ = t.guest.Close()
		_ = out.Close()
	}
}

// acceptTCPDNS completes a guest's TCP connection to the link DNS address
// gw and answers its queries in the slot, as it answers them over UDP: so
// they reach the policy's Resolver too, never a deployment resolver in its
// place.
func (s *Slot) acceptTCPDNS(r *tcp.ForwarderRequest, gw netip.Addr) {
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		r.Complete(true)
		return
	}
	r.Complete(false)
	c := gonet.NewTCPConn(&wq, ep)
	if !s.goRun(func() { s.serveTCPDNS(gw, c) }) {
		_ = c.Close()
	}
}

// dial connects an admitted flow to dst the way d (rev's decision) says. A
// forwarded flow goes through its Egress or nowhere: it never falls back to
// the uplink.
func (s *Slot) dial(ctx context.Context, rev *revision, d policy.Decision, dst netip.AddrPort) (net.Conn, error) {
	switch d.Kind {
	case policy.Direct:
		return s.uplink.DialTCP(ctx, dst)
	case policy.Forward:
		return s.forward(ctx, rev, d.Egress, dst)
	}
	return nil, fmt.Errorf("decision %v dials nothing", d)
}

// forward dials dst through rev's dialer of the Egress named egressID and
// reports the result.
func (s *Slot) forward(ctx context.Context, rev *revision, egressID string, dst netip.AddrPort) (net.Conn, error) {
	dialer, ok := rev.dialers[egressID]
	if !ok {
		return nil, fmt.Errorf("egress %q has no dialer in this slot", egressID)
	}
	c, err := dialer.DialContext(ctx, dst)
	if s.onEgress != nil {
		s.onEgress(egressID, err)
	}
	return c, err
}

// splice copies both ways until both sides are done, passing each half
// close on, then closes both.
func (s *Slot) splice(t *tcpFlow) {
	if !s.flows.addTCP(t) {
		return
	}
	defer func() {
		s.flows.removeTCP(t)
		t.close()
	}()
	guest, world := t.guest, t.world
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		closeWrite(dst)
		done <- struct{}{}
	}
	go pipe(world, guest)
	go pipe(guest, world)
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// resolverFor is the deployment resolver a query to the link DNS address
// dst goes to: the first of dst's family.
func (s *Slot) resolverFor(dst netip.Addr) (netip.AddrPort, bool) {
	for _, r := range s.resolvers {
		if r.Addr().Unmap().Is4() == dst.Is4() {
			return r, true
		}
	}
	return netip.AddrPort{}, false
}

func bufferOf(b []byte) buffer.Buffer { return buffer.MakeWithData(b) }
