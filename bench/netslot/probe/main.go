// Command probe runs inside the guest of bench/netslot: a static binary
// added to the busybox template, because a busybox loop would time the
// guest's fork and exec (tens of milliseconds a process under TCG) more
// than the network. It prints one line: the measurements, in TSC ticks,
// space-separated.
//
// TSC ticks, because the guest's clock cannot time a millisecond: under
// TCG its kernel finds the TSC unstable against the jiffies and keeps
// time in jiffies (4 ms), which also lose ticks when the host is busy.
// QEMU's TCG reads the host's TSC for the guest's RDTSC, so the ticks are
// the host's, at its rate (the host's "cpu MHz"; the same for both
// networks, so their ratio does not depend on it).
//
//	probe connect ADDR N   N TCP connections to ADDR, one at a time; each
//	                       timed from the dial to the handshake's end; one
//	                       that fails (30 s timeout) is its time with a "!"
//	probe send ADDR BYTES  BYTES to ADDR on one connection, then the write
//	                       side closed; timed to the server's "ok" (it
//	                       times its own first to last byte too)
//	probe dns ADDR N [NAME]
//	                       N A queries for NAME (bench.test.) to the DNS
//	                       server ADDR over UDP, one at a time, each from a
//	                       new socket (as a resolver library does)
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
)

func main() {
	if len(os.Args) != 4 && (len(os.Args) != 5 || os.Args[1] != "dns") {
		fmt.Fprintln(os.Stderr, "usage: probe connect|send ADDR N, or probe dns ADDR N [NAME]")
		os.Exit(2)
	}
	n, err := strconv.Atoi(os.Args[3])
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "probe: %q is not a positive count\n", os.Args[3])
		os.Exit(2)
	}
	var out []string
	switch addr := os.Args[2]; os.Args[1] {
	case "connect":
		out, err = connects(addr, n)
	case "send":
		var d ticks
		d, err = send(addr, n)
		out = []string{d.String()}
	case "dns":
		name := "bench.test."
		if len(os.Args) == 5 {
			name = os.Args[4]
		}
		out, err = queries(addr, n, name)
	default:
		err = fmt.Errorf("unknown measure %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
	fmt.Println(strings.Join(out, " "))
}

const timeout = 30 * time.Second

// ticks is a span of the TSC.
type ticks uint64

func (t ticks) String() string { return strconv.FormatUint(uint64(t), 10) }

func rdtsc() uint64

// since is the TSC ticks from t0 (a reading of rdtsc).
func since(t0 uint64) ticks { return ticks(rdtsc() - t0) }

// connects goes on after a connection that failed: the run reports how
// many did, rather than lose the round.
func connects(addr string, n int) ([]string, error) {
	out := make([]string, n)
	for i := range n {
		t0 := rdtsc()
		c, err := net.DialTimeout("tcp", addr, timeout)
		out[i] = since(t0).String()
		if err != nil {
			fmt.Fprintf(os.Stderr, "connection %d to %s: %v\n", i+1, addr, err)
			out[i] += "!"
			continue
		}
		_ = c.Close()
	}
	return out, nil
}

func send(addr string, total int) (ticks, error) {
	buf := make([]byte, 64<<10)
	t0 := rdtsc()
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	for left := total; left > 0; {
		w, err := c.Write(buf[:min(left, len(buf))])
		if err != nil {
			return 0, fmt.Errorf("after %d bytes to %s: %w", total-left, addr, err)
		}
		left -= w
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	ack, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || ack != "ok\n" {
		return 0, fmt.Errorf("the sink's answer after %d bytes: %q %v", total, ack, err)
	}
	return since(t0), nil
}

func queries(addr string, n int, name string) ([]string, error) {
	client := &dns.Client{Net: "udp", Timeout: timeout}
	out := make([]string, n)
	for i := range n {
		q := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA)
		t0 := rdtsc()
		r, _, err := client.Exchange(q, addr)
		out[i] = since(t0).String()
		if err != nil {
			return nil, fmt.Errorf("query %d to %s: %w", i+1, addr, err)
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			return nil, fmt.Errorf("query %d to %s: %s with %d answers", i+1, addr, dns.RcodeToString[r.Rcode], len(r.Answer))
		}
	}
	return out, nil
}
