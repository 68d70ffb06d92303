package cli

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/usernet"
	"github.com/kibotos/kibotos/internal/node/netslot/userstack"
)

// guestNetworkFlags choose what gives a node's guests their network, for
// `kibotos node` and `kibotos dev`.
type guestNetworkFlags struct {
	kind      string
	resolvers []string
}

const (
	guestNetworkSlot    = "userstack"
	guestNetworkUserNet = "usernet"
)

func (f *guestNetworkFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.kind, "guest-network", guestNetworkSlot,
		"the guests' network: userstack (a network slot per execution in the node, every NetworkPolicy mode, no root) "+
			"or usernet (QEMU's isolated user-mode network: DENY_ALL only)")
	c.Flags().StringArrayVar(&f.resolvers, "resolver", nil,
		"a deployment resolver (ADDR or ADDR:PORT) the guests' link DNS address forwards to under PUBLIC_INTERNET, first first (repeatable; "+
			"default: the nameservers of /etc/resolv.conf)")
}

// note says what the chosen network gives guests, for kibotos dev.
func (f *guestNetworkFlags) note() string {
	if f.kind == guestNetworkUserNet {
		return "note: Workspaces get QEMU's isolated user-mode network (--guest-network usernet): DENY_ALL only; " +
			"a start under NETWORK_POLICY_MODE_PUBLIC_INTERNET fails at APPLYING_NETWORK"
	}
	dns := "the nameservers of /etc/resolv.conf"
	if len(f.resolvers) > 0 {
		dns = strings.Join(f.resolvers, ", ")
	}
	note := "note: each Workspace's network is a slot in this process (no root needed): DENY_ALL unless its policy says otherwise; " +
		"under NETWORK_POLICY_MODE_PUBLIC_INTERNET its connections leave from this host's address and its DNS goes to " + dns
	if !canPing("/proc/sys/net/ipv4/ping_group_range") {
		note += fmt.Sprintf("; a guest's ping (ICMP echo) is sent from a ping socket, which this host gives group %d only as root "+
			"or with sysctl net.ipv4.ping_group_range covering it: until then pings go unanswered", os.Getgid())
	}
	return note
}

// canPing reports whether this process may open an ICMP socket: as root
// (a raw one), or when path, Linux's ping_group_range, covers its group.
func canPing(path string) bool {
	if os.Geteuid() == 0 {
		return true
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return false
	}
	return lo <= os.Getgid() && os.Getgid() <= hi
}

// network makes the chosen network. ctrlEndpoint is ctrl's URL: its
// addresses are hard-denied to guests, as the node's own are.
func (f *guestNetworkFlags) network(ctrlEndpoint string, log *slog.Logger) (netslot.Network, error) {
	switch f.kind {
	case guestNetworkUserNet:
		if len(f.resolvers) > 0 {
			return nil, fmt.Errorf("--resolver is for --guest-network %s: usernet answers no DNS", guestNetworkSlot)
		}
		return usernet.New(), nil
	case guestNetworkSlot:
	default:
		return nil, fmt.Errorf("--guest-network %q: give %s or %s", f.kind, guestNetworkSlot, guestNetworkUserNet)
	}
	resolvers, err := parseResolvers(f.resolvers)
	if err != nil {
		return nil, err
	}
	own, err := ownAddresses(ctrlEndpoint)
	if err != nil {
		return nil, err
	}
	return userstack.NewNetwork(userstack.NetworkConfig{Uplink: &userstack.HostUplink{}, Own: own, Resolvers: resolvers, Log: log.With("component", "netslot")})
}

// parseResolvers reads --resolver values, or /etc/resolv.conf's
// nameservers when none is given.
func parseResolvers(flags []string) ([]netip.AddrPort, error) {
	if len(flags) == 0 {
		return systemResolvers("/etc/resolv.conf"), nil
	}
	out := make([]netip.AddrPort, 0, len(flags))
	for _, s := range flags {
		ap, err := parseResolver(s)
		if err != nil {
			return nil, fmt.Errorf("--resolver %q: %w", s, err)
		}
		out = append(out, ap)
	}
	return out, nil
}

func parseResolver(s string) (netip.AddrPort, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a.WithZone(""), 53), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("not an address or ADDRESS:PORT")
	}
	return ap, nil
}

// systemResolvers are the nameserver lines of path; none when it cannot be
// read (then link DNS answers SERVFAIL).
func systemResolvers(path string) []netip.AddrPort {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.AddrPort
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				out = append(out, netip.AddrPortFrom(a.WithZone(""), 53))
			}
		}
	}
	return out
}

// ownAddresses are every address of this host's interfaces and ctrl's
// endpoint's addresses.
func ownAddresses(ctrlEndpoint string) ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("this host's addresses: %w", err)
	}
	var own []netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			own = append(own, p.Addr())
		}
	}
	if u, err := url.Parse(ctrlEndpoint); err == nil && u.Hostname() != "" {
		ips, err := net.LookupIP(u.Hostname())
		if err != nil {
			return nil, fmt.Errorf("ctrl's addresses (%s): %w", u.Hostname(), err)
		}
		for _, ip := range ips {
			if a, ok := netip.AddrFromSlice(ip); ok {
				own = append(own, a.Unmap())
			}
		}
	}
	return own, nil
}
