package main

import (
	"fmt"
	"io"
	"math"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kibotos/kibotos/internal/node/netslot/resolver/resolvertest"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
)

// goal is the bound: the slot within 1.2x of the user-mode network
// on each measure.
const goal = 1.2

type reportInput struct {
	cfg         config
	accel       qemu.Accel
	why, kernel string
	slot, user  *subject
}

// nearestRank is the p-th percentile by the nearest-rank method.
func nearestRank(vals []time.Duration, p float64) time.Duration {
	sorted := slices.Sorted(slices.Values(vals))
	k := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(k, 1)-1]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// rate is MiB/s for bytes in d.
func rate(bytes int, d time.Duration) float64 { return float64(bytes) / mib / d.Seconds() }

// roundLine is the latest round of both subjects, for progress.
func roundLine(c config, subjects ...*subject) string {
	var out []string
	for _, s := range subjects {
		x := s.samples
		out = append(out, fmt.Sprintf("%s: connect p50 %s, %.1f MiB/s, DNS p50 %s", s.name,
			ms(nearestRank(x.connect[len(x.connect)-c.connects:], 50)), rate(c.bytes, x.transfer[len(x.transfer)-1]),
			ms(nearestRank(x.dns[len(x.dns)-c.queries:], 50))))
		if len(x.egConnect) >= c.connects && len(x.egTransfer) > 0 {
			out = append(out, fmt.Sprintf("%s via the Egress: connect p50 %s, %.1f MiB/s", s.name,
				ms(nearestRank(x.egConnect[len(x.egConnect)-c.connects:], 50)), rate(c.bytes, x.egTransfer[len(x.egTransfer)-1])))
		}
	}
	return strings.Join(out, " | ")
}

func report(w io.Writer, in reportInput) {
	c := in.cfg
	how := "userstack.NewNetwork's attachment"
	if c.frames {
		how = "a Slot on a frame-clocking stream (-frames)"
	}
	fmt.Fprintf(w, "slot served by %s\n", how)
	fmt.Fprintf(w, "Guest network: the network slot (userstack) beside QEMU's user-mode network (slirp, unrestricted), one VM each, same platform and template, 1 vCPU, %d MiB; %d rounds, alternating which goes first, after one warm-up round\n",
		c.memoryMiB, c.rounds)
	fmt.Fprintf(w, "machine: %d CPUs (%s); %s; accelerator %s (%s); guest kernel %s; GOMAXPROCS %d\n",
		runtime.NumCPU(), cpuModel(), qemuVersion(), strings.ToUpper(string(in.accel)), in.why, in.kernel, runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "per round: %d TCP connects, %d DNS queries, %d MiB sent guest → host\n", c.connects, c.queries, c.bytes/mib)

	s, u := in.slot.samples, in.user.samples
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measure\tslot p50\tslot p90\tusernet p50\tusernet p90\tslot cost / usernet (p50)\twithin 1.2x\t")
	latency := func(name string, a, b []time.Duration) {
		ra, rb := nearestRank(a, 50), nearestRank(b, 50)
		ratio := ra.Seconds() / rb.Seconds()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t\n", name, ms(ra), ms(nearestRank(a, 90)), ms(rb), ms(nearestRank(b, 90)), ratio, yes(ratio))
	}
	latency("TCP connect", s.connect, u.connect)
	latency("DNS query", s.dns, u.dns)
	// Throughput: the cost is the time per byte, so the ratio is
	// usernet's rate over the slot's; p90 is the slow tail (p10 of the
	// rate).
	ts, tu := nearestRank(s.transfer, 50), nearestRank(u.transfer, 50)
	ratio := ts.Seconds() / tu.Seconds()
	fmt.Fprintf(tw, "TCP guest → host (sink's first → last byte)\t%.1f MiB/s\t%.1f MiB/s\t%.1f MiB/s\t%.1f MiB/s\t%.2f\t%s\t\n",
		rate(c.bytes, ts), rate(c.bytes, nearestRank(s.transfer, 90)), rate(c.bytes, tu), rate(c.bytes, nearestRank(u.transfer, 90)), ratio, yes(ratio))
	gs, gu := nearestRank(s.guestSend, 50), nearestRank(u.guestSend, 50)
	fmt.Fprintf(tw, "TCP guest → host (guest: dial → sink's ok)\t%.1f MiB/s\t%.1f MiB/s\t%.1f MiB/s\t%.1f MiB/s\t%.2f\t%s\t\n",
		rate(c.bytes, gs), rate(c.bytes, nearestRank(s.guestSend, 90)), rate(c.bytes, gu), rate(c.bytes, nearestRank(u.guestSend, 90)), gs.Seconds()/gu.Seconds(), yes(gs.Seconds()/gu.Seconds()))
	tw.Flush()

	rates := func(ds []time.Duration) string {
		var out []string
		for _, d := range ds {
			out = append(out, fmt.Sprintf("%.1f", rate(c.bytes, d)))
		}
		return strings.Join(out, " ")
	}
	fmt.Fprintf(w, "TCP connections that failed (30 s timeout, counted at their time above): slot %d, usernet %d\n", s.failed, u.failed)
	fmt.Fprintf(w, "throughput by round (MiB/s, sink): slot %s | usernet %s\n", rates(s.transfer), rates(u.transfer))
	if len(s.tcpDial) > 0 && len(s.udpDial) > 0 && len(s.resolve) > 0 {
		fmt.Fprintf(w, "inside the slot (p50, host clock): its upstream TCP dial %s (p90 %s, %d dials, the sink's included); a UDP socket in the namespace per query %s (p90 %s); the resolver's round trip %s (p90 %s)\n",
			ms(nearestRank(s.tcpDial, 50)), ms(nearestRank(s.tcpDial, 90)), len(s.tcpDial), ms(nearestRank(s.udpDial, 50)), ms(nearestRank(s.udpDial, 90)),
			ms(nearestRank(s.resolve, 50)), ms(nearestRank(s.resolve, 90)))
	}
	if len(s.nsCost) > 0 {
		fmt.Fprintf(w, "of which the test internet's own cost (entering its namespace on a thread of its own, which a node's uplink without a namespace skips), per dial or query socket: %s (p90 %s)\n",
			ms(nearestRank(s.nsCost, 50)), ms(nearestRank(s.nsCost, 90)))
	}
	if len(s.slotTCP) > 0 && len(s.slotDNS) > 0 {
		fmt.Fprintf(w, "the slot's own time (-frames; p50, host clock, from the frame's arrival on QEMU's stream to the answer's write): SYN → SYN-ACK %s (p90 %s, %d), query → answer %s (p90 %s, %d)\n",
			ms(nearestRank(s.slotTCP, 50)), ms(nearestRank(s.slotTCP, 90)), len(s.slotTCP), ms(nearestRank(s.slotDNS, 50)), ms(nearestRank(s.slotDNS, 90)), len(s.slotDNS))
	}
	fmt.Fprintf(w, "CPU time per %d MiB sent (p50 of rounds; /proc, 10 ms ticks): slot: QEMU %s, this process (the slot, its uplink and the sink) %s | usernet: QEMU (slirp inside) %s, this process (the sink) %s\n",
		c.bytes/mib, ms(nearestRank(s.qemuCPU, 50)), ms(nearestRank(s.selfCPU, 50)), ms(nearestRank(u.qemuCPU, 50)), ms(nearestRank(u.selfCPU, 50)))
	if len(s.egConnect) > 0 {
		egressReport(w, c, s)
	}
	if b := in.slot.resolvers; b != nil && len(b.paths[0].samples) > 0 {
		resolverReport(w, c, b)
	}
}

// resolverReport is the slot's guest's DNS through each Resolver beside
// the deployment resolver, in the same rounds: the ratio is the path's
// cost over the baseline's.
func resolverReport(w io.Writer, c config, b *resolverBench) {
	fmt.Fprintf(w, "\nthe slot's guest's DNS queries to its link DNS address %s, %d a round per path (A %s, a new UDP socket each), the policy's Resolver in turn (Apply before each path's queries; the order reversed every other round): resolvertest's servers at %s, directly or through the Egress at %s (UDP ASSOCIATE for udp); the baseline is the deployment resolver %s:\n",
		userstack.GatewayV4, c.queries, resolvertest.Name, upstreamHost, egressAt, resolverHost)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tp50\tp90\t/ baseline (p50)\t/ baseline (p90)\t")
	base := b.paths[0].samples
	b50, b90 := nearestRank(base, 50), nearestRank(base, 90)
	for _, p := range b.paths {
		p50, p90 := nearestRank(p.samples, 50), nearestRank(p.samples, 90)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t\n", p.name, ms(p50), ms(p90), p50.Seconds()/b50.Seconds(), p90.Seconds()/b90.Seconds())
	}
	tw.Flush()
}

// resolverLine is the latest round of the slot's Resolvers, for progress.
func resolverLine(c config, b *resolverBench) string {
	var out []string
	for _, p := range b.paths {
		out = append(out, fmt.Sprintf("%s %s", p.name, ms(nearestRank(p.samples[len(p.samples)-c.queries:], 50))))
	}
	return "DNS p50: " + strings.Join(out, ", ")
}

// egressReport is the slot's guest direct beside through its SOCKS5
// Egress, in the same rounds: the ratio is the Egress's cost over direct.
func egressReport(w io.Writer, c config, s samples) {
	fmt.Fprintf(w, "\nthe slot's guest, directly (%s) and through a SOCKS5 Egress (%s, github.com/armon/go-socks5 with a password and egresstest's UDP ASSOCIATE, in the test internet), same servers, same rounds:\n", publicHost, egressAt)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measure\tdirect p50\tdirect p90\tEgress p50\tEgress p90\tEgress / direct (p50)\t")
	a, b := nearestRank(s.connect, 50), nearestRank(s.egConnect, 50)
	fmt.Fprintf(tw, "TCP connect\t%s\t%s\t%s\t%s\t%.2f\t\n", ms(a), ms(nearestRank(s.connect, 90)), ms(b), ms(nearestRank(s.egConnect, 90)), b.Seconds()/a.Seconds())
	throughput := func(name string, direct, egress []time.Duration) {
		d, e := nearestRank(direct, 50), nearestRank(egress, 50)
		fmt.Fprintf(tw, "%s\t%.1f MiB/s\t%.1f MiB/s\t%.1f MiB/s\t%.1f MiB/s\t%.2f\t\n", name,
			rate(c.bytes, d), rate(c.bytes, nearestRank(direct, 90)), rate(c.bytes, e), rate(c.bytes, nearestRank(egress, 90)), e.Seconds()/d.Seconds())
	}
	throughput("TCP guest → host (sink's first → last byte)", s.transfer, s.egTransfer)
	throughput("TCP guest → host (guest: dial → sink's ok)", s.guestSend, s.egGuestSend)
	tw.Flush()
}

func yes(ratio float64) string {
	if ratio <= goal {
		return "yes"
	}
	return "NO"
}

func cpuModel() string {
	out, err := exec.Command("lscpu").Output()
	if err != nil {
		return "lscpu: " + err.Error()
	}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "Model name" {
			return strings.TrimSpace(v)
		}
	}
	return "model unknown"
}

func qemuVersion() string {
	out, err := exec.Command("qemu-system-x86_64", "--version").Output()
	if err != nil {
		return "QEMU version unknown"
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}
