package userstack

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// HostUplink re-originates admitted flows from the host's own sockets, so
// they leave from its uplink address like any of its connections.
type HostUplink struct {
	Dialer net.Dialer
	// Netns, when set, is a network namespace (an open /proc/…/ns/net or
	// /run/netns file) every socket of the uplink is made in: the flows
	// leave by that namespace's routes instead of the node's. Tests give
	// one whose only routes lead to their own test hosts.
	Netns *os.File
}

// DialTCP implements Uplink.
func (u *HostUplink) DialTCP(ctx context.Context, dst netip.AddrPort) (c net.Conn, err error) {
	err = InNetns(u.Netns, func() error {
		c, err = u.Dialer.DialContext(ctx, "tcp", dst.String())
		return err
	})
	return c, err
}

// DialUDP implements Uplink.
func (u *HostUplink) DialUDP(ctx context.Context, dst netip.AddrPort) (c net.Conn, err error) {
	err = InNetns(u.Netns, func() error {
		c, err = u.Dialer.DialContext(ctx, "udp", dst.String())
		return err
	})
	return c, err
}

// InNetns runs fn on an OS thread in network namespace ns (nil: this
// process's own, on the caller's goroutine). A socket fn makes stays in
// that namespace for its life. The thread is given back only once it is in
// its own namespace again, and discarded when that fails.
func InNetns(ns *os.File, fn func() error) error {
	if ns == nil {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer own.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s: %w", ns.Name(), err)
			return
		}
		errc <- fn()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else the locked thread ends with this goroutine
	}()
	return <-errc
}

// Echo implements Uplink with an unprivileged ICMP socket (Linux's ping
// socket, which net.ipv4.ping_group_range must admit the node's group to),
// else a raw one (root or CAP_NET_RAW).
func (u *HostUplink) Echo(ctx context.Context, dst netip.Addr, payload []byte) error {
	var conn *icmp.PacketConn
	var unprivileged bool
	err := InNetns(u.Netns, func() (err error) {
		conn, unprivileged, err = listenICMP(dst.Is4())
		return err
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()

	id, seq := rand.N(1<<16), rand.N(1<<16)
	var typ, replyType icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	proto := 1
	if !dst.Is4() {
		typ, replyType, proto = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply, 58
	}
	msg, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: payload}}).Marshal(nil)
	if err != nil {
		return err
	}
	var to net.Addr = &net.IPAddr{IP: dst.AsSlice()}
	if unprivileged {
		to = &net.UDPAddr{IP: dst.AsSlice()}
	}
	if _, err := conn.WriteTo(msg, to); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return err
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || m.Type != replyType || !sameHost(from, dst) {
			continue
		}
		// A ping socket rewrites the identifier and filters by it.
		if e, ok := m.Body.(*icmp.Echo); ok && e.Seq == seq && (unprivileged || e.ID == id) {
			return nil
		}
	}
}

func listenICMP(v4 bool) (*icmp.PacketConn, bool, error) {
	udp, raw, any := "udp6", "ip6:ipv6-icmp", "::"
	if v4 {
		udp, raw, any = "udp4", "ip4:icmp", "0.0.0.0"
	}
	if c, err := icmp.ListenPacket(udp, any); err == nil {
		return c, true, nil
	}
	c, err := icmp.ListenPacket(raw, any)
	if err != nil {
		return nil, false, errors.Join(errors.New("userstack: no ICMP socket (neither a ping socket nor a raw one is permitted)"), err)
	}
	return c, false, nil
}

func sameHost(from net.Addr, dst netip.Addr) bool {
	var ip net.IP
	switch a := from.(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.IPAddr:
		ip = a.IP
	}
	got, ok := netip.AddrFromSlice(ip)
	return ok && got.Unmap() == dst.Unmap()
}
