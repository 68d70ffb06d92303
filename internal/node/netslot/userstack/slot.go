// Package userstack is the node's network slot: a user-space TCP/IP stack
// (gVisor's netstack) per execution, fed the guest's Ethernet frames over
// QEMU's `-netdev stream` socket. Every guest flow ends here. The slot asks
// the policy engine on every new flow (a TCP SYN, an ICMP echo request, a
// UDP datagram) and re-originates what it admits through its Uplink, the
// host's own sockets; what it refuses is reset (TCP) or answered with
// "administratively prohibited" (ICMP echo, UDP). Nothing reaches the
// stack's own transport layer for an address other than the gateway's, so
// the stack never answers in a destination's name: an echo reply or a TCP
// handshake the guest sees comes from the real destination or not at all.
//
// Its layout (Layout) is fixed: each slot is its own stack, so every guest
// can have the same addresses.
package userstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/policy"
	"github.com/kibotos/kibotos/internal/node/netslot/qemustream"
)

// The guest's network inside every slot.
var (
	GuestV4   = netip.MustParsePrefix("10.0.2.15/24")
	GatewayV4 = netip.MustParseAddr("10.0.2.2")
	// GuestV6 is a unique local address: the guest's source address is
	// never seen outside the slot (the node re-originates every flow).
	GuestV6   = netip.MustParsePrefix("fd6b:6962:6f74::15/64")
	GatewayV6 = netip.MustParseAddr("fe80::1")
	// GatewayMAC is the slot's side of the link (locally administered).
	GatewayMAC = net.HardwareAddr{0x02, 0x6b, 0x62, 0x00, 0x00, 0x01}
)

// frameMTU is the largest Ethernet frame the slot sends or takes: a 1500-byte
// IP packet and its Ethernet header, as the guest's virtio-net uses.
const frameMTU = 1500 + header.EthernetMinimumSize

const nicID = 1

// Uplink is how admitted flows leave the node. HostUplink is the host's
// own sockets; tests give a fake that never leaves the machine.
type Uplink interface {
	// DialTCP connects to dst from the host.
	DialTCP(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
	// Echo sends one ICMP (or ICMPv6) echo request with payload to dst and
	// returns once its reply came, or with an error when none came by
	// ctx's end.
	Echo(ctx context.Context, dst netip.Addr, payload []byte) error
	// DialUDP opens a datagram socket to dst (a deployment resolver).
	DialUDP(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
}

// Config is what a Slot is made with.
type Config struct {
	// Policy is the first policy in force, Revision its number; SetPolicy
	// replaces them.
	Policy   *policy.Policy
	Revision uint64
	Uplink   Uplink
	// Resolvers are the deployment resolvers, in order: a query to the
	// link DNS address goes to the first of its family.
	Resolvers []netip.AddrPort
	// Egresses dial through the Egresses the policy forwards to, by
	// egress_id; SetEgresses replaces them for the next SetPolicy. A
	// Forward decision naming one that is missing here resets the guest's
	// connection.
	Egresses map[string]EgressDialer
	// EgressResult, when set, is told the result of every dial through an
	// Egress (a nil error when it connected): what egress observations
	// will be made of.
	EgressResult func(egressID string, err error)
	// Resolver, when set, is the policy's Resolver: the link DNS address
	// forwards to it instead of the deployment resolvers. SetPolicyWith
	// replaces it with the policy.
	Resolver *Resolver
	// ResolverResult, when set, is told the result of every query asked
	// of the Resolver: what resolver observations are made of.
	ResolverResult func(r *Resolver, err error)
	Log            *slog.Logger
}

// EgressDialer connects to a destination through one Egress
// (*egress.Dialer): TCP, and datagrams for a udp Resolver behind it (a
// SOCKS5 UDP association). It never leaves directly.
type EgressDialer interface {
	DialContext(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
	DialUDP(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
}

// Slot is one execution's network stack.
type Slot struct {
	stack     *stack.Stack
	link      *channel.Endpoint
	uplink    Uplink
	resolvers []netip.AddrPort
	log       *slog.Logger
	policy    atomic.Pointer[revision]
	egresses  atomic.Pointer[map[string]EgressDialer] // for the next SetPolicy
	revisions atomic.Uint64                           // how many SetPolicy made
	onEgress  func(egressID string, err error)
	// onResolver is Config.ResolverResult.
	onResolver func(r *Resolver, err error)

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	// wg counts the goroutines goRun started, which Close waits for;
	// closing (under goMu) says Close began: goRun starts none after, as
	// a WaitGroup must not be added to while it is waited for (gVisor's
	// forwarder hands the slot a guest's new connection in a goroutine of
	// its own, at any time, Close or not).
	wg      sync.WaitGroup
	goMu    sync.Mutex
	closing bool
	flows   flowSet
	// dnsConns are idle sockets to the deployment resolvers.
	dnsConns dnsConns
	echoes   chan struct{} // bounds the echoes waiting for a reply
	// received and sent count the bytes of the frames the guest received
	// from the slot and sent to it, across every stream the slot served.
	received, sent atomic.Uint64
}

// maxEchoes is how many guest echo requests may wait for their reply at
// once; more are dropped, as a congested router would.
const maxEchoes = 64

// New makes a slot with the link's stack and its services; Serve runs it on
// a stream.
func New(cfg Config) (*Slot, error) {
	if cfg.Policy == nil || cfg.Uplink == nil {
		return nil, errors.New("userstack: a slot needs a policy and an uplink")
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Slot{
		stack: stack.New(stack.Options{
			NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
			TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4, icmp.NewProtocol6},
		}),
		link:       channel.New(512, frameMTU, tcpip.LinkAddress(GatewayMAC)),
		uplink:     cfg.Uplink,
		resolvers:  cfg.Resolvers,
		log:        log,
		onEgress:   cfg.EgressResult,
		onResolver: cfg.ResolverResult,
		echoes:     make(chan struct{}, maxEchoes),
	}
	s.SetEgresses(cfg.Egresses)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.policy.Store(s.revision(cfg.Policy, cfg.Revision, cfg.Resolver))
	if err := s.configure(); err != nil {
		s.stack.Destroy()
		return nil, err
	}
	return s, nil
}

// configure gives the stack its one NIC, the gateway addresses, and the
// handlers that see every guest flow.
func (s *Slot) configure() error {
	if err := s.stack.CreateNIC(nicID, ethernet.New(s.link)); err != nil {
		return fmt.Errorf("userstack: create NIC: %s", err)
	}
	for _, a := range []netip.Prefix{netip.PrefixFrom(GatewayV4, GuestV4.Bits()), netip.PrefixFrom(GatewayV6, 64)} {
		pa := tcpip.ProtocolAddress{Protocol: protocolOf(a.Addr()), AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpAddr(a.Addr()), PrefixLen: a.Bits()}}
		if err := s.stack.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); err != nil {
			return fmt.Errorf("userstack: add %s: %s", a, err)
		}
	}
	// Promiscuous: the stack takes packets to any address (the guest's
	// flows to the world); spoofing: it answers from that address.
	if err := s.stack.SetPromiscuousMode(nicID, true); err != nil {
		return fmt.Errorf("userstack: promiscuous mode: %s", err)
	}
	if err := s.stack.SetSpoofing(nicID, true); err != nil {
		return fmt.Errorf("userstack: spoofing: %s", err)
	}
	s.stack.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: nicID},
		{Destination: header.IPv6EmptySubnet, NIC: nicID},
	})
	// A short TIME_WAIT: gVisor gives a SYN that arrives for a connection
	// in TIME_WAIT only to a listener, and the slot has a forwarder, so
	// a guest reusing the port of a connection the world closed first
	// would stall for the 60 s default. The guest's own kernel keeps the
	// TIME_WAIT that protects it.
	tw := tcpip.TCPTimeWaitTimeoutOption(time.Second)
	if err := s.stack.SetTransportProtocolOption(tcp.ProtocolNumber, &tw); err != nil {
		return fmt.Errorf("userstack: TIME_WAIT: %s", err)
	}
	fwd := tcp.NewForwarder(s.stack, 0, 1024, s.handleTCP)
	s.stack.SetTransportProtocolHandler(tcp.ProtocolNumber, fwd.HandlePacket)
	return s.serveDNS()
}

// revision is a policy in force, its number, the Egress dialers its
// Forward decisions use, and the Resolver it forwards the link DNS
// address's queries to (nil: the deployment resolvers): one value, so a new
// flow is never decided by one revision of an Egress and dialled through
// another, and a query sees a policy and its Resolver together.
type revision struct {
	*policy.Policy
	n       uint64
	dialers map[string]EgressDialer
	seq     uint64 // orders the revisions this slot put in force
	dns     *heldResolver
}

// revision is p, number n, forwarding to r, with the dialers SetEgresses
// gave last.
func (s *Slot) revision(p *policy.Policy, n uint64, r *Resolver) *revision {
	return &revision{Policy: p, n: n, dialers: *s.egresses.Load(), seq: s.revisions.Add(1), dns: hold(r)}
}

// SetPolicy puts revision n of the policy in force, with the dialers
// SetEgresses gave last: new flows follow it at once, and an open
// connection it refuses, or moves to another path (another Egress, or
// another revision of its Egress), keeps its path and is reset after drain
// (at once when zero). One a later revision admits again is kept. The link
// DNS address forwards to the deployment resolvers under it.
func (s *Slot) SetPolicy(p *policy.Policy, n uint64, drain time.Duration) {
	s.SetPolicyWith(p, n, nil, drain)
}

// SetPolicyWith is SetPolicy for a policy whose link DNS address forwards
// to r (nil: the deployment resolvers). A query after it returned asks r;
// the Resolver it replaces is closed once no query uses it.
func (s *Slot) SetPolicyWith(p *policy.Policy, n uint64, r *Resolver, drain time.Duration) {
	rev := s.revision(p, n, r)
	s.policy.Swap(rev).dns.retire()
	s.flows.redecide(rev, drain)
}

// SetEgresses replaces the Egress dialers new forwarded flows use from the
// next SetPolicy on; open ones keep theirs. Give the dialers a policy names
// before the policy.
func (s *Slot) SetEgresses(m map[string]EgressDialer) {
	m = maps.Clone(m)
	s.egresses.Store(&m)
}

// Draining is the earliest policy revision whose connections are still
// open though a later one refused them; zero when there are none.
func (s *Slot) Draining() uint64 { return s.flows.draining() }

// EgressDraining is, by egress_id, the earliest revision of each Egress
// whose connections are still open though the Egress moved to a later
// revision; an Egress with none is absent.
func (s *Slot) EgressDraining() map[string]uint64 { return s.flows.egressDraining() }

// Serve carries frames between the stack and conn (QEMU's end of the
// stream) until either ends: it returns nil when conn reached its end or
// the slot was closed, else the error that ended it. A slot serves one
// stream at a time; after Serve returns it may serve the next (QEMU's
// stream server takes a new connection after a node agent restart).
// Closing the slot closes conn.
func (s *Slot) Serve(conn io.ReadWriteCloser) error {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	closeOnEnd := context.AfterFunc(s.ctx, func() { _ = conn.Close() })
	defer closeOnEnd()
	w := qemustream.NewWriter(conn)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.sendFrames(ctx, w)
	}()
	err := s.receiveFrames(qemustream.NewReader(conn))
	cancel()
	<-done
	// The VMM going away (or the slot closing) ends the stream however
	// the read saw it: at a frame boundary, with a reset, or closed.
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || s.ctx.Err() != nil {
		return nil
	}
	return err
}

// receiveFrames reads the guest's frames: those for the world that are not
// TCP are handled here (echo, refusals), the rest go to the stack.
func (s *Slot) receiveFrames(r *qemustream.Reader) error {
	var buf []byte
	for {
		frame, err := r.ReadFrame(buf)
		if err != nil {
			return err
		}
		buf = frame[:cap(frame)]
		s.sent.Add(uint64(len(frame)))
		if len(frame) < header.EthernetMinimumSize || len(frame) > frameMTU {
			continue
		}
		if s.intercept(frame) {
			continue
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: bufferOf(frame)})
		s.link.InjectInbound(0, pkt)
		pkt.DecRef()
	}
}

// sendFrames writes what the stack sends to the guest until ctx ends.
func (s *Slot) sendFrames(ctx context.Context, w *qemustream.Writer) {
	for {
		pkt := s.link.ReadContext(ctx)
		if pkt == nil {
			return
		}
		frame := pkt.ToView().AsSlice()
		err := w.WriteFrame(frame)
		pkt.DecRef()
		if err != nil {
			return
		}
		s.received.Add(uint64(len(frame)))
	}
}

// Counters are the bytes of the frames the guest received from the slot
// and sent to it: every frame on the stream, those the slot refused or
// dropped too, as the guest's interface counts them.
func (s *Slot) Counters() netslot.Counters {
	return netslot.Counters{Received: s.received.Load(), Sent: s.sent.Load()}
}

// toGuest sends a frame the slot made itself (ICMP answers).
func (s *Slot) toGuest(frame []byte) {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: bufferOf(frame)})
	defer pkt.DecRef()
	var l stack.PacketBufferList
	l.PushBack(pkt.IncRef())
	_, _ = s.link.WritePackets(l)
	l.DecRef()
}

// Close ends the slot: every flow it carries is closed and its stack
// destroyed. It is idempotent.
func (s *Slot) Close() error {
	s.cancel()
	s.goMu.Lock()
	s.closing = true
	s.goMu.Unlock()
	s.flows.closeAll()
	s.dnsConns.close()
	s.policy.Load().dns.retire()
	s.link.Close()
	s.stack.Close()
	s.wg.Wait()
	s.stack.Wait()
	return nil
}

// goRun runs fn in a goroutine of its own, which Close waits for, and
// reports whether it did: once Close began it runs nothing, and the
// caller lets go of what fn would have used.
func (s *Slot) goRun(fn func()) bool {
	s.goMu.Lock()
	defer s.goMu.Unlock()
	if s.closing {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn()
	}()
	return true
}

func protocolOf(a netip.Addr) tcpip.NetworkProtocolNumber {
	if a.Is4() {
		return ipv4.ProtocolNumber
	}
	return ipv6.ProtocolNumber
}

func tcpAddr(a netip.Addr) tcpip.Address {
	if a.Is4() {
		return tcpip.AddrFrom4(a.As4())
	}
	return tcpip.AddrFrom16(a.As16())
}

func netipAddr(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip.Unmap()
}
