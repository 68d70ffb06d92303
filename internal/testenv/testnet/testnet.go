// Package testnet builds a test's own internet: a network namespace whose
// one interface is its loopback, holding the addresses of the test's hosts
// ("public" ones among them). It has no route to anywhere else, which New
// checks before anything dials, so nothing a test sends there can reach
// the machine's real uplink. A node's uplink made in it
// (userstack.HostUplink.Netns) re-originates guest flows into it.
//
// It needs root (CI runs as root; KIBOTOS_TEST_REQUIRE_NETNS=1 makes its
// absence a failure there) and iproute2's ip.
package testnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
)

// Internet is one test's namespace.
type Internet struct {
	ns    *os.File
	hosts []netip.Addr
}

// New makes the namespace with hosts on its loopback, for a test: it is
// skipped without root (a failure with KIBOTOS_TEST_REQUIRE_NETNS=1) and the
// namespace goes at its end.
func New(t testing.TB, hosts ...netip.Addr) *Internet {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("KIBOTOS_TEST_REQUIRE_NETNS") == "1" {
			t.Fatal("a test internet needs root (network namespaces), and KIBOTOS_TEST_REQUIRE_NETNS=1")
		}
		t.Skip("a test internet needs root (network namespaces)")
	}
	n, err := Open(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// Open makes the namespace with hosts on its loopback, for a program that
// is not a test (a benchmark); Close lets it go. It needs root.
func Open(hosts ...netip.Addr) (*Internet, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("a test internet needs root (network namespaces)")
	}
	ns, err := newNamespace()
	if err != nil {
		return nil, err
	}
	n := &Internet{ns: ns, hosts: hosts}
	if err := n.setUp(); err != nil {
		_ = ns.Close()
		return nil, err
	}
	return n, nil
}

// setUp puts the hosts on the loopback and checks, before anything dials,
// that no route leads out.
func (n *Internet) setUp() error {
	if _, err := n.ip("link", "set", "lo", "up"); err != nil {
		return err
	}
	for _, h := range n.hosts {
		if _, err := n.ip(addrAdd(h)...); err != nil {
			return err
		}
	}
	if out, err := n.ip("-6", "addr", "show", "tentative"); err != nil || strings.TrimSpace(out) != "" {
		return fmt.Errorf("the test internet has a tentative address (%v): %s", err, out)
	}
	return n.checkRoutes()
}

// Close lets go of the namespace: it ends once no socket made in it is
// left open.
func (n *Internet) Close() error { return n.ns.Close() }

// newNamespace unshares a network namespace on a thread of its own and
// keeps a descriptor of it.
func newNamespace() (*os.File, error) {
	type result struct {
		ns  *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer own.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("unshare a network namespace: %w", err)}
			return
		}
		ns, err := os.Open("/proc/thread-self/ns/net")
		done <- result{ns, err}
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	r := <-done
	return r.ns, r.err
}

// ip runs iproute2's ip inside the namespace.
func (n *Internet) ip(args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"--net=/proc/self/fd/3", "ip"}, args...)...)
	cmd.ExtraFiles = []*os.File{n.ns}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ip %s in the test internet: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// checkRoutes fails unless every route of the namespace, in every table
// and both families, is a loopback route to one of its hosts (or the
// loopback's own): nothing leads out of it.
func (n *Internet) checkRoutes() error {
	for _, family := range []string{"-4", "-6"} {
		var routes []struct {
			Dst  string `json:"dst"`
			Dev  string `json:"dev"`
			Type string `json:"type"`
		}
		out, err := n.ip("-j", family, "route", "show", "table", "all")
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(out), &routes); err != nil {
			return fmt.Errorf("the test internet's routes: %w", err)
		}
		for _, r := range routes {
			if r.Dev != "lo" || r.Dst == "default" || !n.isOwn(r.Dst) {
				return fmt.Errorf("the test internet has a route that could lead out of it: %+v", r)
			}
		}
	}
	return nil
}

// isOwn: dst is a host of the namespace, or loopback's own block.
func (n *Internet) isOwn(dst string) bool {
	p, err := netip.ParsePrefix(dst)
	if err != nil {
		a, aerr := netip.ParseAddr(dst)
		if aerr != nil {
			return false
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().IsLoopback() || p.Addr().IsMulticast() || p.Addr().IsLinkLocalUnicast() {
		return true
	}
	return p.Bits() == p.Addr().BitLen() && slices.Contains(n.hosts, p.Addr())
}

// Uplink is a node uplink whose sockets are made in the namespace.
func (n *Internet) Uplink() *userstack.HostUplink {
	return &userstack.HostUplink{Netns: n.ns}
}

// Run runs fn on a thread in the namespace: a socket fn makes is the
// namespace's for its life.
func (n *Internet) Run(fn func() error) error { return userstack.InNetns(n.ns, fn) }

// Listen listens inside the namespace.
func (n *Internet) Listen(t testing.TB, network, address string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := userstack.InNetns(n.ns, func() (err error) {
		ln, err = net.Listen(network, address)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// ListenPacket listens for datagrams inside the namespace.
func (n *Internet) ListenPacket(t testing.TB, network, address string) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	if err := userstack.InNetns(n.ns, func() (err error) {
		pc, err = net.ListenPacket(network, address)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	return pc
}

// addrAdd is the ip command that puts h on the loopback. An IPv6 address is
// added with nodad: without it the kernel marks it tentative until its
// duplicate-address detection has run (even on lo, from a work queue), and
// a listener bound in that window gets "cannot assign requested address".
func addrAdd(h netip.Addr) []string {
	args := []string{"addr", "add", netip.PrefixFrom(h, h.BitLen()).String(), "dev", "lo"}
	if h.Is6() && !h.Is4In6() {
		args = append(args, "nodad")
	}
	return args
}
