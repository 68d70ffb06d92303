package policy_test

import (
	"net/netip"
	"testing"

	"github.com/kibotos/kibotos/internal/node/netslot/policy"
)

// TestSpecialPurpose takes an address in every row of the hard-deny table
// (the IANA IPv4 and IPv6 special-purpose registries and the node's own
// rows), and the globally reachable blocks inside denied ones, and checks
// the row each one takes by its prefix and name.
func TestSpecialPurpose(t *testing.T) {
	denied := []struct {
		addr, prefix, name string
	}{
		// IPv4 Special-Purpose Address Registry.
		{"0.1.2.3", "0.0.0.0/8", `"This network"`},
		{"0.0.0.0", "0.0.0.0/32", `"This host on this network"`},
		{"10.0.0.1", "10.0.0.0/8", "Private-Use"},
		{"10.255.255.255", "10.0.0.0/8", "Private-Use"},
		{"100.64.0.1", "100.64.0.0/10", "Shared Address Space"},
		{"100.127.255.254", "100.64.0.0/10", "Shared Address Space"},
		{"127.0.0.1", "127.0.0.0/8", "Loopback"},
		{"127.255.0.9", "127.0.0.0/8", "Loopback"},
		{"169.254.1.1", "169.254.0.0/16", "Link Local"},
		{"172.16.0.1", "172.16.0.0/12", "Private-Use"},
		{"172.31.255.255", "172.16.0.0/12", "Private-Use"},
		{"192.0.0.100", "192.0.0.0/24", "IETF Protocol Assignments"},
		{"192.0.0.1", "192.0.0.0/29", "IPv4 Service Continuity Prefix"},
		{"192.0.0.8", "192.0.0.8/32", "IPv4 dummy address"},
		{"192.0.0.170", "192.0.0.170/32", "NAT64/DNS64 Discovery"},
		{"192.0.0.171", "192.0.0.171/32", "NAT64/DNS64 Discovery"},
		{"192.0.2.1", "192.0.2.0/24", "Documentation (TEST-NET-1)"},
		{"192.88.99.1", "192.88.99.0/24", "Deprecated (6to4 Relay Anycast)"},
		{"192.168.1.1", "192.168.0.0/16", "Private-Use"},
		{"198.18.0.1", "198.18.0.0/15", "Benchmarking"},
		{"198.19.255.255", "198.18.0.0/15", "Benchmarking"},
		{"198.51.100.7", "198.51.100.0/24", "Documentation (TEST-NET-2)"},
		{"203.0.113.9", "203.0.113.0/24", "Documentation (TEST-NET-3)"},
		{"240.0.0.1", "240.0.0.0/4", "Reserved"},
		{"255.255.255.254", "240.0.0.0/4", "Reserved"},
		{"255.255.255.255", "255.255.255.255/32", "Limited Broadcast"},
		// The node's IPv4 rows.
		{"169.254.169.254", "169.254.169.254/32", "Metadata service"},
		{"224.0.0.1", "224.0.0.0/4", "Multicast"},
		{"239.255.255.250", "224.0.0.0/4", "Multicast"},
		// IPv6 Special-Purpose Address Registry.
		{"::1", "::1/128", "Loopback Address"},
		{"::", "::/128", "Unspecified Address"},
		{"::ffff:1.1.1.1", "::ffff:0.0.0.0/96", "IPv4-mapped Address"},
		{"::ffff:10.0.0.1", "::ffff:0.0.0.0/96", "IPv4-mapped Address"},
		{"64:ff9b:1::1", "64:ff9b:1::/48", "IPv4-IPv6 Translat."},
		{"100::1", "100::/64", "Discard-Only Address Block"},
		{"100:0:0:1::1", "100:0:0:1::/64", "Dummy IPv6 Prefix"},
		{"2001:100::1", "2001::/23", "IETF Protocol Assignments"},
		{"2001::1", "2001::/32", "TEREDO"},
		{"2001:1::4", "2001::/23", "IETF Protocol Assignments"},
		{"2001:2::1", "2001:2::/48", "Benchmarking"},
		{"2001:10::1", "2001:10::/28", "Deprecated (previously ORCHID)"},
		{"2001:db8::1", "2001:db8::/32", "Documentation"},
		{"2002:a00:1::1", "2002::/16", "6to4"},
		{"3fff::1", "3fff::/20", "Documentation"},
		{"5f00::1", "5f00::/16", "Segment Routing (SRv6) SIDs"},
		{"fc00::1", "fc00::/7", "Unique-Local"},
		{"fd00:ec2::254", "fc00::/7", "Unique-Local"},
		{"fe80::1", "fe80::/10", "Link-Local Unicast"},
		{"febf::1", "fe80::/10", "Link-Local Unicast"},
		// The node's IPv6 rows.
		{"ff02::1", "ff00::/8", "Multicast"},
		{"4000::1", "::/0", "Reserved by IETF (outside Global Unicast 2000::/3)"},
		{"fec0::1", "::/0", "Reserved by IETF (outside Global Unicast 2000::/3)"},
		// NAT64: judged by the IPv4 address it carries.
		{"64:ff9b::a00:1", "10.0.0.0/8", "Private-Use"},
		{"64:ff9b::7f00:1", "127.0.0.0/8", "Loopback"},
		{"64:ff9b::a9fe:a9fe", "169.254.169.254/32", "Metadata service"},
	}
	for _, c := range denied {
		r, ok := policy.SpecialPurpose(netip.MustParseAddr(c.addr))
		if !ok || r.Prefix.String() != c.prefix || r.Name != c.name || r.Global {
			t.Errorf("SpecialPurpose(%s) = %+v, %v; want denied by %s %s", c.addr, r, ok, c.prefix, c.name)
		}
	}
	reachable := []struct{ addr, why string }{
		{"1.1.1.1", "no row"},
		{"8.8.8.8", "no row"},
		{"100.63.255.255", "just below Shared Address Space"},
		{"100.128.0.0", "just above Shared Address Space"},
		{"172.15.255.255", "just below 172.16.0.0/12"},
		{"172.32.0.0", "just above 172.16.0.0/12"},
		{"192.0.0.9", "192.0.0.9/32 Port Control Protocol Anycast, Globally Reachable"},
		{"192.0.0.10", "192.0.0.10/32 TURN Anycast, Globally Reachable"},
		{"192.31.196.1", "192.31.196.0/24 AS112-v4, Globally Reachable"},
		{"192.52.193.1", "192.52.193.0/24 AMT, Globally Reachable"},
		{"192.175.48.1", "192.175.48.0/24 Direct Delegation AS112 Service, Globally Reachable"},
		{"223.255.255.255", "just below Multicast"},
		{"2606:4700::1111", "Global Unicast"},
		{"2a00:1450::1", "Global Unicast"},
		{"64:ff9b::101:101", "64:ff9b::/96 IPv4-IPv6 Translat., carrying 1.1.1.1"},
		{"2001:1::1", "2001:1::1/128 Port Control Protocol Anycast"},
		{"2001:1::2", "2001:1::2/128 TURN Anycast"},
		{"2001:1::3", "2001:1::3/128 DNS-SD SRP Anycast"},
		{"2001:3::1", "2001:3::/32 AMT"},
		{"2001:4:112::1", "2001:4:112::/48 AS112-v6"},
		{"2001:20::1", "2001:20::/28 ORCHIDv2"},
		{"2001:30::1", "2001:30::/28 Drone Remote ID DETs"},
		{"2620:4f:8000::1", "2620:4f:8000::/48 Direct Delegation AS112 Service"},
		{"2001:200::1", "just above 2001::/23"},
	}
	for _, c := range reachable {
		if r, ok := policy.SpecialPurpose(netip.MustParseAddr(c.addr)); ok {
			t.Errorf("SpecialPurpose(%s) = denied by %+v; want reachable (%s)", c.addr, r, c.why)
		}
	}
}

func TestSpecialPurposeRefusesZonedAndInvalid(t *testing.T) {
	for _, a := range []netip.Addr{{}, netip.MustParseAddr("2606:4700::1111%eth0")} {
		if _, ok := policy.SpecialPurpose(a); !ok {
			t.Errorf("SpecialPurpose(%v) reachable; want denied", a)
		}
	}
}
