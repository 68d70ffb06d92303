// Command netslot measures an execution's guest network through the
// network slot (internal/node/netslot/userstack: a user-space TCP/IP stack
// in the node, fed by QEMU's -netdev stream) beside QEMU's own user-mode
// network (slirp), on two VMs of the same platform and template booted in
// one run. It prints a table.
//
//	sudo go run ./bench/netslot
//
// It needs root: the slot's uplink and its servers are in a test internet
// (internal/testenv/testnet), a network namespace whose only routes lead to
// its own hosts, so nothing leaves the machine.
//
// Each guest runs bench/netslot/probe (a static binary added to the busybox
// template) for three measures, each against the same server code:
//
//   - TCP connect latency: -connects connections, one at a time, each timed
//     in the guest from the dial to the end of the handshake (both
//     networks complete the guest's handshake only once their own connect
//     to the destination succeeded);
//   - TCP throughput guest → host: -bytes on one connection to a sink that
//     times its first to its last byte on the host's clock;
//   - DNS query latency: -queries A queries, one at a time, each timed in
//     the guest from a new UDP socket to the answer.
//
// The slot's guest reaches 8.8.4.4 (TCP) and its link DNS address, the
// gateway 10.0.2.2, which the slot answers through the deployment resolver
// 9.9.9.9, all in the test internet. In the same rounds it measures TCP
// connect and throughput again to 8.8.4.5, the same servers, which its
// policy sends through a SOCKS5 Egress at 8.8.8.8:1080 there (egress.go;
// not with -frames). The user-mode network is QEMU's
// without restrict=on, for this benchmark only (the node always restricts
// it), so that slirp forwards the gateway 10.0.2.2 to the host's
// 127.0.0.1, where the same servers listen; its DNS queries go to them as
// ordinary UDP through slirp, the path its own DNS address 10.0.2.3 takes
// to the host's resolver.
//
// After each round (with -resolvers, the default; not with -frames) the
// slot's guest measures DNS once more per Resolver protocol
// (resolvers.go): the slot's policy is given in turn (Apply, as a running
// execution's update is) a Resolver asking resolvertest's servers at
// 9.9.9.53 over udp, tcp, tls and https directly, and over udp and tcp
// through the Egress (UDP ASSOCIATE for udp), and no Resolver (the
// deployment resolver) as the baseline: -queries queries each, the order
// reversed every other round.
//
// The rounds alternate which network goes first (slot, user-mode; then
// user-mode, slot; ...), one measure at a time, so that both see the same
// machine; one warm-up round is not counted.
package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/usernet"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
	"github.com/kibotos/kibotos/internal/testenv/testnet"
)

const mib = 1 << 20

// The test internet's hosts: the servers, and the deployment resolver.
var (
	publicHost   = netip.MustParseAddr("8.8.4.4")
	resolverHost = netip.MustParseAddr("9.9.9.9")
)

type config struct {
	rounds, connects, queries, bytes int
	memoryMiB                        uint64
	accel                            string
	keep, frames, resolvers          bool
}

func main() {
	var c config
	flag.IntVar(&c.rounds, "rounds", 9, "measured rounds (each network once a round)")
	flag.IntVar(&c.connects, "connects", 100, "TCP connections a round")
	flag.IntVar(&c.queries, "queries", 100, "DNS queries a round")
	flag.IntVar(&c.bytes, "bytes", 64*mib, "bytes sent guest → host a round")
	flag.Uint64Var(&c.memoryMiB, "memory", 256, "guest memory in MiB")
	flag.StringVar(&c.accel, "accel", "auto", "auto (the node's probe), tcg or kvm")
	flag.BoolVar(&c.frames, "frames", false, "serve the slot on a stream that clocks its frames, for the slot's own time of a connect and a query (costs the slot a copy per frame)")
	flag.BoolVar(&c.resolvers, "resolvers", true, "also measure the slot's DNS per Resolver protocol (udp, tcp, tls, https; udp and tcp through an Egress) beside the deployment resolver (not with -frames)")
	flag.BoolVar(&c.keep, "keep", false, "keep the temporary directory (consoles, artifacts) at the end")
	flag.Parse()
	if c.rounds < 1 || c.connects < 1 || c.queries < 1 || c.bytes < 1 || (c.accel != "auto" && c.accel != "tcg" && c.accel != "kvm") {
		flag.Usage()
		os.Exit(2)
	}
	if tscHz == 0 {
		fmt.Fprintln(os.Stderr, "bench/netslot: no \"cpu MHz\" in /proc/cpuinfo: the rate of the TSC the guest probe reads is unknown")
		os.Exit(1)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench/netslot: needs root: the slot's uplink and servers live in a network namespace it makes (sudo go run ./bench/netslot)")
		os.Exit(1)
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "bench/netslot:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// subject is one network under test: its VM, the servers it reaches and
// their addresses as its guest dials them.
type subject struct {
	name                string
	vm                  *qemu.VM
	srv                 *servers
	connect, sink, dnsQ string
	// uplink is the slot's, timed; nil for the user-mode network.
	uplink *timedUplink
	// nsCost is what entering the test internet costs a dial or a query's
	// socket (userstack.InNetns with nothing to do), which a node whose
	// uplink has no namespace does not pay: samples of it, slot only.
	nsCost func() time.Duration
	// clock is the slot's frame clock, with -frames.
	clock *frameClock
	// egress is the path through the slot's Egress; nil for the
	// user-mode network and with -frames.
	egress *egressPath
	// resolvers are the Resolvers the slot's link DNS address is given
	// in turn on att; nil for the user-mode network, with -frames and
	// with -resolvers=false.
	resolvers *resolverBench
	att       netslot.Attachment
	samples   samples
}

// egressPath is what a guest dials through the slot's Egress: forwardedHost's
// servers.
type egressPath struct {
	srv           *servers
	connect, sink string
}

// samples are a subject's measurements over the counted rounds.
type samples struct {
	connect, dns []time.Duration
	// Per round: the sink's first to last byte, the guest's send to the
	// sink's "ok", and the CPU time QEMU and this process spent on it.
	transfer, guestSend, qemuCPU, selfCPU []time.Duration
	// failed counts the connections that failed (timed out), in every
	// round, warm-up included; their time is in connect.
	failed int
	// The slot's own steps (timedUplink), during the counted rounds.
	tcpDial, udpDial, resolve []time.Duration
	// With -frames: SYN in → SYN-ACK out, query in → answer out.
	slotTCP, slotDNS []time.Duration
	// nsCost, sampled after each round.
	nsCost []time.Duration
	// Through the Egress: connect latency, the sink's first to last
	// byte, the guest's send to the sink's "ok".
	egConnect, egTransfer, egGuestSend []time.Duration
}

func run(c config) (err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tmp, err := os.MkdirTemp("", "kibotos-bench-net")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil || c.keep {
			progress("temporary directory kept: %s", tmp)
			return
		}
		_ = os.RemoveAll(tmp)
	}()
	art, err := buildArtifacts(ctx, tmp)
	if err != nil {
		return err
	}
	accel, why := chooseAccel(ctx, art, c)
	progress("accelerator %s (%s)", accel, why)

	slot, closeSlot, err := slotSubject(ctx, art, tmp, c, accel)
	if err != nil {
		return err
	}
	defer closeSlot()
	user, closeUser, err := usernetSubject(ctx, art, tmp, c, accel)
	if err != nil {
		return err
	}
	defer closeUser()

	progress("warm-up round (not counted)")
	warm := config{connects: 5, queries: 5, bytes: min(c.bytes, 4*mib)}
	for _, s := range []*subject{slot, user} {
		if err := s.round(ctx, warm, false); err != nil {
			return fmt.Errorf("warm-up of %s: %w", s.name, err)
		}
	}
	if err := slot.resolverRound(ctx, warm, 0, false); err != nil {
		return fmt.Errorf("warm-up of the slot's Resolvers: %w", err)
	}
	for r := range c.rounds {
		order := []*subject{slot, user}
		if r%2 == 1 {
			order = []*subject{user, slot}
		}
		for _, s := range order {
			if err := s.round(ctx, c, true); err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, s.name, err)
			}
		}
		if err := slot.resolverRound(ctx, c, r, true); err != nil {
			return fmt.Errorf("round %d, the slot's Resolvers: %w", r+1, err)
		}
		progress("round %d/%d: %s", r+1, c.rounds, roundLine(c, slot, user))
		if slot.resolvers != nil {
			progress("round %d/%d: %s", r+1, c.rounds, resolverLine(c, slot.resolvers))
		}
	}
	report(os.Stdout, reportInput{cfg: c, accel: accel, why: why, kernel: art.platform.KernelVersion, slot: slot, user: user})
	return nil
}

// slotInternet is the slot's test internet and what runs in it.
type slotInternet struct {
	inet          *testnet.Internet
	srv, res, fwd *servers
	resolvers     *resolverBench // nil without -resolvers or with -frames
	rootCAs       *x509.CertPool
	closers       []func()
}

func (n *slotInternet) close() {
	for _, c := range slices.Backward(n.closers) {
		c()
	}
}

// openSlotInternet makes the test internet and starts the servers, the
// deployment resolver, the Egress and (with -resolvers) the Resolvers.
func openSlotInternet(c config) (_ *slotInternet, err error) {
	inet, err := testnet.Open(publicHost, resolverHost, egressAt.Addr(), forwardedHost, upstreamHost)
	if err != nil {
		return nil, err
	}
	n := &slotInternet{inet: inet, closers: []func(){func() { _ = inet.Close() }}}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	start := func(host netip.Addr, dnsPort uint16) (*servers, error) {
		s, err := startServers(inet.Run, host, dnsPort)
		if err == nil {
			n.closers = append(n.closers, s.close)
		}
		return s, err
	}
	if n.srv, err = start(publicHost, 0); err != nil {
		return nil, err
	}
	if n.res, err = start(resolverHost, 53); err != nil {
		return nil, err
	}
	if n.fwd, err = start(forwardedHost, 0); err != nil {
		return nil, err
	}
	proxy, err := startSOCKS5(inet)
	if err != nil {
		return nil, err
	}
	n.closers = append(n.closers, func() { _ = proxy.Close() })
	if c.resolvers && !c.frames {
		if n.resolvers, n.rootCAs, err = startResolvers(inet); err != nil {
			return nil, err
		}
		n.closers = append(n.closers, n.resolvers.close)
	}
	return n, nil
}

// slotSubject boots the VM on a network slot whose uplink is in a new test
// internet holding the servers and the resolver.
func slotSubject(ctx context.Context, art *artifacts, tmp string, c config, accel qemu.Accel) (*subject, func(), error) {
	n, err := openSlotInternet(c)
	if err != nil {
		return nil, nil, err
	}
	uplink := &timedUplink{HostUplink: n.inet.Uplink()}
	att, clock, err := attachSlot(ctx, c, n, uplink)
	if err != nil {
		n.close()
		return nil, nil, err
	}
	v, err := boot(ctx, art, tmp, "slot", att, c.memoryMiB, accel)
	if err != nil {
		_ = att.Release()
		n.close()
		return nil, nil, fmt.Errorf("boot on the slot: %w", err)
	}
	s := &subject{
		name: "slot", vm: v, srv: n.srv, uplink: uplink, clock: clock, resolvers: n.resolvers, att: att,
		nsCost: func() time.Duration {
			t0 := time.Now()
			_ = n.inet.Run(func() error { return nil })
			return time.Since(t0)
		},
		connect: netip.AddrPortFrom(publicHost, port(n.srv.connect)).String(),
		sink:    netip.AddrPortFrom(publicHost, port(n.srv.sink)).String(),
		dnsQ:    netip.AddrPortFrom(userstack.GatewayV4, 53).String(),
	}
	if !c.frames {
		s.egress = &egressPath{srv: n.fwd, connect: netip.AddrPortFrom(forwardedHost, port(n.fwd.connect)).String(),
			sink: netip.AddrPortFrom(forwardedHost, port(n.fwd.sink)).String()}
	}
	return s, func() { _ = v.Kill(); _ = att.Release(); n.close() }, nil
}

// attachSlot is the slot's attachment: userstack.NewNetwork's, under
// slotPolicy, or with
// -frames a Slot on a stream that clocks its frames.
func attachSlot(ctx context.Context, c config, n *slotInternet, uplink *timedUplink) (netslot.Attachment, *frameClock, error) {
	deployment := []netip.AddrPort{netip.AddrPortFrom(resolverHost, 53)}
	if c.frames {
		fa, err := newFramedAttachment(uplink, deployment)
		if err != nil {
			return nil, nil, err
		}
		return fa, fa.clock, nil
	}
	network, err := userstack.NewNetwork(userstack.NetworkConfig{
		Uplink: uplink, Resolvers: deployment, RootCAs: n.rootCAs,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, nil, err
	}
	att, err := network.Attach(ctx, "bench-slot", slotPolicy())
	return att, nil, err
}

// usernetSubject boots the VM on QEMU's user-mode network, unrestricted,
// with the servers on the host's loopback.
func usernetSubject(ctx context.Context, art *artifacts, tmp string, c config, accel qemu.Accel) (*subject, func(), error) {
	here := func(fn func() error) error { return fn() }
	loopback := netip.MustParseAddr("127.0.0.1")
	srv, err := startServers(here, loopback, 0)
	if err != nil {
		return nil, nil, err
	}
	v, err := boot(ctx, art, tmp, "usernet", openUserMode{}, c.memoryMiB, accel)
	if err != nil {
		srv.close()
		return nil, nil, fmt.Errorf("boot on the user-mode network: %w", err)
	}
	dnsPort := uint16(srv.dns.PacketConn.LocalAddr().(*net.UDPAddr).Port)
	gw := usernet.GuestGateway
	s := &subject{
		name: "usernet", vm: v, srv: srv,
		connect: netip.AddrPortFrom(gw, port(srv.connect)).String(),
		sink:    netip.AddrPortFrom(gw, port(srv.sink)).String(),
		dnsQ:    netip.AddrPortFrom(gw, dnsPort).String(),
	}
	return s, func() { _ = v.Kill(); srv.close() }, nil
}

// openUserMode is QEMU's user-mode network without restrict=on, for this
// benchmark only: slirp forwards the gateway address to the host's
// loopback, which no Workspace may reach (the node's usernet is always
// isolated).
type openUserMode struct{}

func (openUserMode) Device() netslot.Device {
	return netslot.Device{UserMode: &netslot.UserMode{Network: usernet.GuestNetwork}}
}

func (openUserMode) Guest() netslot.Addressing {
	return netslot.Addressing{Address: usernet.GuestAddress, Gateway: usernet.GuestGateway, Nameserver: usernet.GuestNameserver}
}

func (openUserMode) Started(string) {}
func (openUserMode) Release() error { return nil }

// Apply and Draining: the bench never changes a policy.
func (openUserMode) Apply(context.Context, netslot.Policy, time.Duration) error {
	return errors.New("bench: no policy changes")
}
func (openUserMode) Draining() uint64                         { return 0 }
func (openUserMode) EgressDraining() []netslot.EgressDraining { return nil }
func (openUserMode) EgressFaults() []netslot.EgressFault      { return nil }
func (openUserMode) ResolverFaults() []netslot.ResolverFault  { return nil }
func (openUserMode) Counters() netslot.Counters               { return netslot.Counters{} }

// round runs the three measures once in s's guest; keep adds them to its
// samples.
func (s *subject) round(ctx context.Context, c config, keep bool) error {
	if s.uplink != nil {
		s.uplink.take()
		defer func() {
			if tcpDial, udpDial, resolve := s.uplink.take(); keep {
				s.samples.tcpDial = append(s.samples.tcpDial, tcpDial...)
				s.samples.udpDial = append(s.samples.udpDial, udpDial...)
				s.samples.resolve = append(s.samples.resolve, resolve...)
			}
		}()
	}
	if s.nsCost != nil && keep {
		defer func() {
			for range 20 {
				s.samples.nsCost = append(s.samples.nsCost, s.nsCost())
			}
		}()
	}
	if s.clock != nil {
		s.clock.take()
		defer func() {
			if tcp, dns := s.clock.take(); keep {
				s.samples.slotTCP = append(s.samples.slotTCP, tcp...)
				s.samples.slotDNS = append(s.samples.slotDNS, dns...)
			}
		}()
	}
	connect, err := s.probe(ctx, "connect", s.connect, c.connects)
	if err != nil {
		return err
	}
	t, guest, qemuCPU, selfCPU, err := s.send(ctx, s.sink, s.srv, c.bytes)
	if err != nil {
		return err
	}
	queries, err := s.probe(ctx, "dns", s.dnsQ, c.queries)
	if err != nil {
		return err
	}
	if keep {
		s.samples.connect = append(s.samples.connect, connect...)
		s.samples.dns = append(s.samples.dns, queries...)
		s.samples.transfer = append(s.samples.transfer, t.last.Sub(t.first))
		s.samples.guestSend = append(s.samples.guestSend, guest)
		s.samples.qemuCPU = append(s.samples.qemuCPU, qemuCPU)
		s.samples.selfCPU = append(s.samples.selfCPU, selfCPU)
	}
	if s.egress != nil {
		return s.egressRound(ctx, c, keep)
	}
	return nil
}

// resolverRound is round r of the slot's DNS per Resolver (resolvers.go);
// nothing for a subject without Resolvers.
func (s *subject) resolverRound(ctx context.Context, c config, r int, keep bool) error {
	if s.resolvers == nil {
		return nil
	}
	return s.resolvers.round(ctx, s, s.att, r, c.queries, keep)
}

// egressRound measures TCP connect and throughput through the Egress.
func (s *subject) egressRound(ctx context.Context, c config, keep bool) error {
	connect, err := s.probe(ctx, "connect", s.egress.connect, c.connects)
	if err != nil {
		return fmt.Errorf("through the Egress: %w", err)
	}
	t, guest, _, _, err := s.send(ctx, s.egress.sink, s.egress.srv, c.bytes)
	if err != nil {
		return fmt.Errorf("through the Egress: %w", err)
	}
	if keep {
		s.samples.egConnect = append(s.samples.egConnect, connect...)
		s.samples.egTransfer = append(s.samples.egTransfer, t.last.Sub(t.first))
		s.samples.egGuestSend = append(s.samples.egGuestSend, guest)
	}
	return nil
}

// send sends bytes to sink (srv's) and returns what the sink saw, the
// guest's own time, and the CPU time QEMU and this process used meanwhile.
func (s *subject) send(ctx context.Context, sink string, srv *servers, bytes int) (transfer, time.Duration, time.Duration, time.Duration, error) {
	q0, self0 := cpuTime(s.vm.PID), cpuTime(os.Getpid())
	guest, err := s.probe(ctx, "send", sink, bytes)
	q1, self1 := cpuTime(s.vm.PID), cpuTime(os.Getpid())
	if err != nil {
		return transfer{}, 0, 0, 0, err
	}
	var t transfer
	select {
	case t = <-srv.transfers:
	case <-time.After(30 * time.Second):
		return transfer{}, 0, 0, 0, fmt.Errorf("the guest's send to %s ended, the sink reported nothing", sink)
	}
	if t.err != nil || t.bytes != int64(bytes) {
		return transfer{}, 0, 0, 0, fmt.Errorf("the sink read %d of %d bytes: %v", t.bytes, bytes, t.err)
	}
	return t, guest[0], q1 - q0, self1 - self0, nil
}

// probe runs the guest's probe and reads its TSC ticks as durations. A sum
// longer than the exec itself took on the host's clock would mean the rate
// is wrong: an error.
func (s *subject) probe(ctx context.Context, measure, addr string, n int, more ...string) ([]time.Duration, error) {
	t0 := time.Now()
	out, err := execIn(ctx, s.vm, append([]string{"/bin/netprobe", measure, addr, strconv.Itoa(n)}, more...)...)
	wall := time.Since(t0)
	if err != nil {
		return nil, err
	}
	var ds []time.Duration
	var sum time.Duration
	for _, f := range strings.Fields(out) {
		f, failed := strings.CutSuffix(f, "!")
		if failed {
			s.samples.failed++
		}
		t, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("probe %s said %q", measure, out)
		}
		d := time.Duration(float64(t) / tscHz * float64(time.Second))
		ds = append(ds, d)
		sum += d
	}
	want := n
	if measure == "send" {
		want = 1
	}
	if len(ds) != want {
		return nil, fmt.Errorf("probe %s gave %d values: %q", measure, len(ds), out)
	}
	if sum > wall {
		return nil, fmt.Errorf("probe %s: its TSC spans add up to %s, the exec took %s: the TSC rate %.0f Hz is wrong", measure, sum, wall, tscHz)
	}
	return ds, nil
}

// tscHz is the rate of the TSC the guest reads under TCG, the host's: its
// "cpu MHz" (what the node gives the guest as tsc_early_khz too).
var tscHz = func() float64 {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return mhz * 1e6
			}
		}
	}
	return 0
}()

// cpuTime is a process's user and system CPU time, from /proc/<pid>/stat
// (clock ticks of 10 ms); zero when it cannot be read.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis (utime and stime are fields 14, 15).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
