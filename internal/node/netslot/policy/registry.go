package policy

import "net/netip"

// Range is one row of the hard-deny table: a block of the IANA IPv4 or IPv6
// Special-Purpose Address Registry (or one of the few rows the node adds,
// each saying so in Source), with its name and whether the registry marks it
// globally reachable.
type Range struct {
	Prefix netip.Prefix
	Name   string
	Source string
	// Global is the registry's "Globally Reachable" column. Only true
	// leaves directly; false and N/A are both hard-denied, since a block
	// the registry does not call globally reachable is nothing a Workspace
	// may reach from the node's uplink.
	Global bool
}

func row(prefix, name, source string, global bool) Range {
	return Range{Prefix: netip.MustParsePrefix(prefix), Name: name, Source: source, Global: global}
}

// registry is the table the hard deny reads, both families. An address takes
// the row of the longest prefix covering it, so a globally reachable block
// inside a denied one (192.0.0.9/32 in 192.0.0.0/24) is reachable, and an
// address no row covers is globally reachable.
//
// Rows are the IANA registries as of 2025 (iana-ipv4-special-registry,
// iana-ipv6-special-registry), plus rows the node adds for addresses that
// are not globally reachable without being in those registries: multicast
// (in neither; no TCP goes there and no echo to it may leave), the IPv6
// space outside 2000::/3 (IANA IPv6 Address Space: "Reserved by IETF"),
// and the metadata address, which link-local already covers but which gets
// its own name in refusals.
var registry = []Range{
	// IPv4 Special-Purpose Address Registry.
	row("0.0.0.0/8", `"This network"`, "RFC 791", false),
	row("0.0.0.0/32", `"This host on this network"`, "RFC 1122", false),
	row("10.0.0.0/8", "Private-Use", "RFC 1918", false),
	row("100.64.0.0/10", "Shared Address Space", "RFC 6598", false),
	row("127.0.0.0/8", "Loopback", "RFC 1122", false),
	row("169.254.0.0/16", "Link Local", "RFC 3927", false),
	row("172.16.0.0/12", "Private-Use", "RFC 1918", false),
	row("192.0.0.0/24", "IETF Protocol Assignments", "RFC 6890", false),
	row("192.0.0.0/29", "IPv4 Service Continuity Prefix", "RFC 7335", false),
	row("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", false),
	row("192.0.0.9/32", "Port Control Protocol Anycast", "RFC 7723", true),
	row("192.0.0.10/32", "Traversal Using Relays around NAT Anycast", "RFC 8155", true),
	row("192.0.0.170/32", "NAT64/DNS64 Discovery", "RFC 8880", false),
	row("192.0.0.171/32", "NAT64/DNS64 Discovery", "RFC 8880", false),
	row("192.0.2.0/24", "Documentation (TEST-NET-1)", "RFC 5737", false),
	row("192.31.196.0/24", "AS112-v4", "RFC 7535", true),
	row("192.52.193.0/24", "AMT", "RFC 7450", true),
	row("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", "RFC 7526", false),
	row("192.168.0.0/16", "Private-Use", "RFC 1918", false),
	row("192.175.48.0/24", "Direct Delegation AS112 Service", "RFC 7534", true),
	row("198.18.0.0/15", "Benchmarking", "RFC 2544", false),
	row("198.51.100.0/24", "Documentation (TEST-NET-2)", "RFC 5737", false),
	row("203.0.113.0/24", "Documentation (TEST-NET-3)", "RFC 5737", false),
	row("240.0.0.0/4", "Reserved", "RFC 1112", false),
	row("255.255.255.255/32", "Limited Broadcast", "RFC 919", false),
	// Added by the node (IPv4).
	row("169.254.169.254/32", "Metadata service", "node", false),
	row("224.0.0.0/4", "Multicast", "RFC 5771", false),

	// IPv6 Special-Purpose Address Registry.
	row("::1/128", "Loopback Address", "RFC 4291", false),
	row("::/128", "Unspecified Address", "RFC 4291", false),
	row("::ffff:0:0/96", "IPv4-mapped Address", "RFC 4291", false),
	row("64:ff9b::/96", "IPv4-IPv6 Translat.", "RFC 6052", true),
	row("64:ff9b:1::/48", "IPv4-IPv6 Translat.", "RFC 8215", false),
	row("100::/64", "Discard-Only Address Block", "RFC 6666", false),
	row("100:0:0:1::/64", "Dummy IPv6 Prefix", "RFC 9780", false),
	row("2001::/23", "IETF Protocol Assignments", "RFC 2928", false),
	row("2001::/32", "TEREDO", "RFC 4380", false),
	row("2001:1::1/128", "Port Control Protocol Anycast", "RFC 7723", true),
	row("2001:1::2/128", "Traversal Using Relays around NAT Anycast", "RFC 8155", true),
	row("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast", "RFC 9665", true),
	row("2001:2::/48", "Benchmarking", "RFC 5180", false),
	row("2001:3::/32", "AMT", "RFC 7450", true),
	row("2001:4:112::/48", "AS112-v6", "RFC 7535", true),
	row("2001:10::/28", "Deprecated (previously ORCHID)", "RFC 4843", false),
	row("2001:20::/28", "ORCHIDv2", "RFC 7343", true),
	row("2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374", true),
	row("2001:db8::/32", "Documentation", "RFC 3849", false),
	row("2002::/16", "6to4", "RFC 3056", false),
	row("2620:4f:8000::/48", "Direct Delegation AS112 Service", "RFC 7534", true),
	row("3fff::/20", "Documentation", "RFC 9637", false),
	row("5f00::/16", "Segment Routing (SRv6) SIDs", "RFC 9602", false),
	row("fc00::/7", "Unique-Local", "RFC 4193", false),
	row("fe80::/10", "Link-Local Unicast", "RFC 4291", false),
	// Added by the node (IPv6): everything outside the global unicast
	// space is reserved, and multicast is named apart.
	row("::/0", "Reserved by IETF (outside Global Unicast 2000::/3)", "IANA IPv6 Address Space", false),
	row("2000::/3", "Global Unicast", "IANA IPv6 Address Space", true),
	row("ff00::/8", "Multicast", "RFC 4291", false),
}

// nat64 is the well-known NAT64 prefix. The registry marks it globally
// reachable, but what it reaches is the IPv4 address in its last 32 bits,
// through a translator the node does not control: 64:ff9b::a00:1 would be
// 10.0.0.1. So an address in it is judged by the IPv4 address it carries.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// lookup is the row of the longest prefix covering a, and false when no row
// does (a globally reachable IPv4 address).
func lookup(a netip.Addr) (Range, bool) {
	var best Range
	found := false
	for _, r := range registry {
		if r.Prefix.Contains(a) && (!found || r.Prefix.Bits() > best.Prefix.Bits()) {
			best, found = r, true
		}
	}
	return best, found
}

// SpecialPurpose reports the row that makes a not globally reachable, if
// any: the hard deny without the node's own addresses. A zoned or invalid
// address (no packet carries one) is never reachable either.
func SpecialPurpose(a netip.Addr) (Range, bool) {
	if !a.IsValid() || a.Zone() != "" {
		return Range{Name: "invalid or zoned address", Source: "node"}, true
	}
	if nat64.Contains(a) {
		b := a.As16()
		if r, denied := SpecialPurpose(netip.AddrFrom4([4]byte(b[12:]))); denied {
			return r, true
		}
	}
	r, found := lookup(a)
	if !found || r.Global {
		return Range{}, false
	}
	return r, true
}
