package guest_test

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kibotos/kibotos/internal/guest"
)

// The kernel takes ConfigureNetwork6's requests: in a network namespace of
// the test's own, on a tap device (an interface any namespace can make,
// where a dummy one needs a module), the address is there at once, not
// tentative, and the default route goes via the gateway out of the
// interface. A second run succeeds and changes nothing.
func TestConfigureNetwork6InANetworkNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a network namespace and a tap device need root")
	}
	n := guest.Net6Config{Address: netip.MustParsePrefix("fd6b:6962:6f74::15/64"), Gateway: netip.MustParseAddr("fe80::1")}
	type result struct {
		addrs, routes string
		err           error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the runtime ends the thread, left in the test's
		// namespace, with this goroutine instead of reusing it.
		runtime.LockOSThread()
		var r result
		r.addrs, r.routes, r.err = configureInOwnNamespace(n)
		done <- r
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	flags, ok := addressFlags(r.addrs, tapName, n.Address)
	if !ok {
		t.Fatalf("no %s on %s in if_inet6:\n%s", n.Address, tapName, r.addrs)
	}
	if flags&unix.IFA_F_TENTATIVE != 0 || flags&unix.IFA_F_NODAD == 0 {
		t.Errorf("address flags %#x, want nodad and not tentative", flags)
	}
	if got := defaultRoutes(r.routes, tapName); len(got) != 1 || got[0] != n.Gateway {
		t.Errorf("default routes on %s via %v, want only via %s:\n%s", tapName, got, n.Gateway, r.routes)
	}
}

const tapName = "kbt0"

// configureInOwnNamespace moves the calling thread into a new network
// namespace, runs ConfigureNetwork6 twice on a tap device there and
// returns the namespace's address and route tables.
func configureInOwnNamespace(n guest.Net6Config) (addrs, routes string, err error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return "", "", fmt.Errorf("new network namespace: %w", err)
	}
	tap, err := openTap(tapName)
	if err != nil {
		return "", "", err
	}
	defer tap.Close()
	for run := 1; run <= 2; run++ {
		if err := guest.ConfigureNetwork6(tapName, n); err != nil {
			return "", "", fmt.Errorf("run %d: %w", run, err)
		}
	}
	// thread-self: /proc/net is the main thread's namespace, not this one.
	a, err := os.ReadFile("/proc/thread-self/net/if_inet6")
	if err != nil {
		return "", "", err
	}
	r, err := os.ReadFile("/proc/thread-self/net/ipv6_route")
	return string(a), string(r), err
}

// openTap makes the tap device name, which lasts while the file is open.
func openTap(name string) (*os.File, error) {
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("tap device: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		f.Close()
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(int(f.Fd()), unix.TUNSETIFF, ifr); err != nil {
		f.Close()
		return nil, fmt.Errorf("tap device %s: %w", name, err)
	}
	return f, nil
}

// addressFlags finds addr on dev in /proc/net/if_inet6 (address, index,
// prefix length, scope, flags, device; hexadecimal) and returns its flags.
func addressFlags(table, dev string, addr netip.Prefix) (uint64, bool) {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) != 6 || f[5] != dev || hexAddr(f[0]) != addr.Addr() || f[2] != fmt.Sprintf("%02x", addr.Bits()) {
			continue
		}
		flags, err := strconv.ParseUint(f[4], 16, 32)
		return flags, err == nil
	}
	return 0, false
}

// defaultRoutes are the gateways of the ::/0 routes on dev in
// /proc/net/ipv6_route (destination, its length, source, its length,
// next hop, metric, references, use, flags, device).
func defaultRoutes(table, dev string) []netip.Addr {
	var gws []netip.Addr
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) == 10 && f[9] == dev && hexAddr(f[0]) == netip.IPv6Unspecified() && f[1] == "00" {
			gws = append(gws, hexAddr(f[4]))
		}
	}
	return gws
}

// hexAddr reads an IPv6 address as /proc/net writes it: 32 hex digits.
func hexAddr(s string) netip.Addr {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return netip.Addr{}
	}
	return netip.AddrFrom16([16]byte(b))
}
