package userstack

import (
	"context"
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
// reset at once; admitted, the slot dials the destination first and
// completes the guest's handshake only once that dial succeeded, so a
// destination that refuses is a reset to the guest too.
func (s *Slot) handleTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := netip.AddrPortFrom(netipAddr(id.LocalAddress), id.LocalPort)
	flow := policy.Flow{Proto: policy.TCP, Dst: dst.Addr(), Port: dst.Port()}
	rev := s.policy.Load()
	d := rev.Decide(flow)
	target := dst
	switch d.Kind {
	case policy.Direct:
	case policy.LinkDNS:
		resolver, ok := s.resolverFor(dst.Addr())
		if !ok {
			r.Complete(true)
			return
		}
		target = resolver
	default:
		s.log.Debug("tcp refused", "dst", dst, "decision", d.String())
		r.Complete(true)
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, dialTimeout)
	out, err := s.uplink.DialTCP(ctx, target)
	cancel()
	if err != nil {
		s.log.Debug("tcp dial failed", "dst", target, "err", err)
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
	t := &tcpFlow{flow: flow, revision: rev.n, guest: gonet.NewTCPConn(&wq, ep), world: out, endpoint: ep}
	s.goRun(func() { s.splice(t) })
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
