package qemu_test

import (
	"context"
	"encoding/hex"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/usernet"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
	"github.com/kibotos/kibotos/internal/node/vm"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
	"github.com/kibotos/kibotos/internal/testenv"
)

// withV6 is QEMU's isolated user-mode network addressed as the network
// slot addresses its guests, IPv6 included. Slirp routes none of the slot's
// IPv6 addresses, but the guest configures them all the same, and that is
// what is checked: usernet itself gives no IPv6.
type withV6 struct{ netslot.Attachment }

func (a withV6) Guest() netslot.Addressing {
	g := a.Attachment.Guest()
	g.AddressV6, g.GatewayV6 = userstack.GuestV6, userstack.GatewayV6
	return g
}

// A guest given IPv6 addressing has the address on eth0 at boot, usable at
// once (not tentative), and a default route via the gateway out of eth0.
func TestGuestConfiguresIPv6(t *testing.T) {
	art := testenv.BuildVMArtifacts(t)
	dir := t.TempDir()
	att, err := usernet.New().Attach(context.Background(), "v6", netslot.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	inst, err := qemu.New(nil, qemu.WithAccel(testenv.Accel(t))).Start(ctx, vm.Spec{
		RunDir: filepath.Join(dir, "run"), Kernel: art.Kernel(), Initrd: art.Initrd(), VCPUs: 1, MemoryMiB: 256,
		Disks:   []vm.Disk{{Role: vm.TemplateRoot, Path: art.Template.Path}, {Role: vm.WritableLayer, Path: layer(t, dir)}},
		Network: withV6{att}, BootID: "boot-v6",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Kill() })
	if _, err := inst.WaitAgent(ctx); err != nil {
		t.Fatal(err)
	}
	addrs, code := execAgent(t, vm.Agent(inst), "cat", "/proc/net/if_inet6")
	if code != 0 || !hasUsableAddress(addrs, "eth0", userstack.GuestV6) {
		t.Errorf("%s on eth0, not tentative, in /proc/net/if_inet6 (exit %d):\n%s", userstack.GuestV6, code, addrs)
	}
	routes, code := execAgent(t, vm.Agent(inst), "cat", "/proc/net/ipv6_route")
	if code != 0 || !hasDefaultRoute(routes, "eth0", userstack.GatewayV6) {
		t.Errorf("no default route via %s on eth0 in /proc/net/ipv6_route (exit %d):\n%s", userstack.GatewayV6, code, routes)
	}
	t.Logf("the guest's if_inet6:\n%s\nipv6_route:\n%s", addrs, routes)
}

// hasUsableAddress finds addr on dev in /proc/net/if_inet6 (address, index,
// prefix length, scope, flags, device; hexadecimal), not tentative.
func hasUsableAddress(table, dev string, addr netip.Prefix) bool {
	const tentative = 0x40 // IFA_F_TENTATIVE
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && f[5] == dev && hexAddr(f[0]) == addr.Addr() && hexByte(f[2]) == addr.Bits() {
			return hexByte(f[4])&tentative == 0
		}
	}
	return false
}

// hasDefaultRoute finds ::/0 via gw on dev in /proc/net/ipv6_route
// (destination, its length, source, its length, next hop, metric,
// references, use, flags, device). Others may be there too: slirp's
// router advertisements give the guest one via slirp's own router.
func hasDefaultRoute(table, dev string, gw netip.Addr) bool {
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) == 10 && f[9] == dev && hexAddr(f[0]) == netip.IPv6Unspecified() && f[1] == "00" && hexAddr(f[4]) == gw {
			return true
		}
	}
	return false
}

// hexAddr reads an IPv6 address as /proc/net writes it: 32 hex digits.
func hexAddr(s string) netip.Addr {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 16 {
		return netip.Addr{}
	}
	return netip.AddrFrom16([16]byte(b))
}

func hexByte(s string) int {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 1 {
		return -1
	}
	return int(b[0])
}
