package policy_test

import (
	"errors"
	"net/netip"
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot/policy"
)

const (
	denyAll        = ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL
	publicInternet = ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET
)

// slotContext is a slot with link DNS 10.0.2.3 and fe80::1, ctrl at
// 198.51.100.10 (a test address; it is hard-denied anyway) and 192.0.9.20,
// and the node's uplink at 192.0.9.21 and 2606:4700:10::21 (addresses
// no registry row covers, so only the node rule refuses them).
var slotContext = policy.Context{
	Own: []netip.Addr{
		netip.MustParseAddr("198.51.100.10"),
		netip.MustParseAddr("192.0.9.20"),
		netip.MustParseAddr("::ffff:192.0.9.21"), // as net.Interface addresses come
		netip.MustParseAddr("2606:4700:10::21"),
	},
	LinkDNS:   []netip.Addr{netip.MustParseAddr("10.0.2.3"), netip.MustParseAddr("fe80::1")},
	Egresses:  map[string]policy.EgressRef{"eg-office": {Revision: 3}},
	Resolvers: map[string]bool{"rs-office": true},
}

func compile(t *testing.T, p *ctrlv1.NetworkPolicy) *policy.Policy {
	t.Helper()
	c, err := policy.Compile(p, slotContext)
	if err != nil {
		t.Fatalf("Compile(%v): %v", p, err)
	}
	return c
}

func tcp(a string, port uint16) policy.Flow {
	return policy.Flow{Proto: policy.TCP, Dst: netip.MustParseAddr(a), Port: port}
}

func udp(a string, port uint16) policy.Flow {
	return policy.Flow{Proto: policy.UDP, Dst: netip.MustParseAddr(a), Port: port}
}

func echo(a string) policy.Flow {
	return policy.Flow{Proto: policy.ICMPEcho, Dst: netip.MustParseAddr(a)}
}

type want struct {
	kind   policy.Kind
	reason policy.Reason
	detail string // the deny entry or the registry row's name, when one decided
}

func check(t *testing.T, p *policy.Policy, f policy.Flow, w want) {
	t.Helper()
	d := p.Decide(f)
	detail := ""
	switch d.Reason {
	case policy.DenyList:
		detail = d.Entry.String()
	case policy.HardDeny:
		detail = d.Range.Name
	}
	if d.Kind != w.kind || d.Reason != w.reason || detail != w.detail {
		t.Errorf("Decide(%+v) = %v (%q); want %v %v %q", f, d, detail, w.kind, w.reason, w.detail)
	}
}

var (
	direct  = want{kind: policy.Direct}
	linkDNS = want{kind: policy.LinkDNS}
	byMode  = want{kind: policy.Refuse, reason: policy.DenyAll}
	byProto = want{kind: policy.Refuse, reason: policy.Protocol}
	byNode  = want{kind: policy.Refuse, reason: policy.NodeAddress}
)

func hard(name string) want { return want{policy.Refuse, policy.HardDeny, name} }
func listed(e string) want  { return want{policy.Refuse, policy.DenyList, e} }

// TestDenyAll: under DENY_ALL (and an unspecified mode, which is DENY_ALL)
// nothing leaves and a query to the link DNS address is refused.
func TestDenyAll(t *testing.T) {
	for _, p := range []*ctrlv1.NetworkPolicy{nil, {}, {Mode: denyAll}} {
		c := compile(t, p)
		for _, f := range []policy.Flow{
			tcp("1.1.1.1", 443), tcp("2606:4700::1111", 443), echo("1.1.1.1"), echo("2606:4700::1111"),
			udp("10.0.2.3", 53), tcp("10.0.2.3", 53), udp("fe80::1", 53),
			udp("1.1.1.1", 53), tcp("10.0.0.1", 22), tcp("127.0.0.1", 7670),
		} {
			check(t, c, f, byMode)
		}
	}
}

// TestPublicInternet: TCP and ICMP echo to public destinations leave
// directly in both families; no other UDP than DNS to the link address.
func TestPublicInternet(t *testing.T) {
	c := compile(t, &ctrlv1.NetworkPolicy{Mode: publicInternet})
	for _, tc := range []struct {
		f policy.Flow
		w want
	}{
		{tcp("1.1.1.1", 443), direct},
		{tcp("8.8.8.8", 53), direct},
		{echo("1.1.1.1"), direct},
		{tcp("2606:4700::1111", 80), direct},
		{echo("2606:4700::1111"), direct},
		{tcp("192.0.0.9", 5351), direct}, // a globally reachable row inside a denied block
		{udp("10.0.2.3", 53), linkDNS},
		{tcp("10.0.2.3", 53), linkDNS}, // DNS over TCP, for truncated answers
		{udp("fe80::1", 53), linkDNS},
		{udp("1.1.1.1", 53), byProto}, // DNS to anyone else: UDP does not leave
		{udp("1.1.1.1", 443), byProto},
		{udp("2606:4700::1111", 443), byProto},
		{udp("10.0.2.3", 67), byProto},
		{udp("10.0.2.3", 123), byProto},
		{policy.Flow{Proto: 0, Dst: netip.MustParseAddr("1.1.1.1")}, byProto},
		{policy.Flow{Proto: 99, Dst: netip.MustParseAddr("1.1.1.1")}, byProto},
		{tcp("10.0.2.3", 22), hard("Private-Use")}, // the gateway itself, other than DNS
		{tcp("fe80::1", 22), hard("Link-Local Unicast")},
		{echo("10.0.2.3"), hard("Private-Use")},
	} {
		check(t, c, tc.f, tc.w)
	}
}

// TestHardDeny: private, local and platform ranges and the node's and ctrl's
// addresses are refused for TCP and echo, whatever allow says.
func TestHardDeny(t *testing.T) {
	plain := compile(t, &ctrlv1.NetworkPolicy{Mode: publicInternet})
	allowAll := compile(t, &ctrlv1.NetworkPolicy{
		Mode:  publicInternet,
		Allow: []string{"0.0.0.0/0", "::/0", "10.0.0.0/8", "169.254.169.254", "192.0.9.20", "2606:4700:10::21"},
	})
	cases := []struct {
		addr string
		w    want
	}{
		{"10.1.2.3", hard("Private-Use")},
		{"172.20.0.1", hard("Private-Use")},
		{"192.168.0.1", hard("Private-Use")},
		{"100.100.100.100", hard("Shared Address Space")},
		{"127.0.0.1", hard("Loopback")},
		{"169.254.10.10", hard("Link Local")},
		{"169.254.169.254", hard("Metadata service")},
		{"0.0.0.0", hard(`"This host on this network"`)},
		{"255.255.255.255", hard("Limited Broadcast")},
		{"224.0.0.251", hard("Multicast")},
		{"198.51.100.10", hard("Documentation (TEST-NET-2)")}, // ctrl, already in a row
		{"192.0.9.20", byNode},                                // ctrl
		{"192.0.9.21", byNode},                                // the node, given IPv4-mapped
		{"2606:4700:10::21", byNode},                          // the node's IPv6 uplink
		{"::1", hard("Loopback Address")},
		{"::", hard("Unspecified Address")},
		{"fe80::1234", hard("Link-Local Unicast")},
		{"fd00::1", hard("Unique-Local")},
		{"::ffff:1.1.1.1", hard("IPv4-mapped Address")},
		{"::ffff:127.0.0.1", hard("IPv4-mapped Address")},
		{"64:ff9b::a9fe:a9fe", hard("Metadata service")},
		{"2001:db8::1", hard("Documentation")},
		{"ff02::fb", hard("Multicast")},
	}
	for _, c := range cases {
		for _, p := range []*policy.Policy{plain, allowAll} {
			check(t, p, tcp(c.addr, 80), c.w)
			check(t, p, echo(c.addr), c.w)
		}
	}
}

// TestAllowDeny: deny refuses what allow does not cover; allow beats deny;
// each entry acts only on its own family; anything else follows the mode;
// entries inside hard-denied ranges do not open them.
func TestAllowDeny(t *testing.T) {
	c := compile(t, &ctrlv1.NetworkPolicy{
		Mode:  publicInternet,
		Allow: []string{"8.8.8.8", "2001:4860:4860::8888/128", "10.9.0.0/16"},
		Deny:  []string{"8.8.0.0/16", "10.0.0.0/8", "2001:4860::/32", "0.0.0.0/0"},
	})
	for _, tc := range []struct {
		f policy.Flow
		w want
	}{
		{tcp("8.8.8.8", 443), direct},                                // allow beats deny
		{echo("8.8.8.8"), direct},                                    // for echo too
		{tcp("8.8.4.4", 443), listed("8.8.0.0/16")},                  // only in deny; first entry named
		{echo("8.8.4.4"), listed("8.8.0.0/16")},                      // echo refused as well
		{tcp("1.1.1.1", 443), listed("0.0.0.0/0")},                   // 0.0.0.0/0 refuses all of IPv4...
		{tcp("2606:4700::1111", 443), direct},                        // ...and leaves IPv6 open
		{tcp("2001:4860:4860::8888", 443), direct},                   // IPv6 allow beats IPv6 deny
		{tcp("2001:4860:4860::8844", 443), listed("2001:4860::/32")}, // only in deny
		{tcp("10.9.0.1", 80), hard("Private-Use")},                   // allow in a hard-denied range opens nothing
		{tcp("10.1.0.1", 80), listed("10.0.0.0/8")},                  // deny there still refuses
		{udp("10.0.2.3", 53), linkDNS},                               // never narrowed, though deny covers it
		{udp("8.8.8.8", 53), byProto},                                // allow does not admit UDP
	} {
		check(t, c, tc.f, tc.w)
	}
	// An IPv4 deny does not act on the IPv4-mapped form, which the
	// hard deny refuses on its own row.
	v6only := compile(t, &ctrlv1.NetworkPolicy{Mode: publicInternet, Deny: []string{"::/0"}})
	check(t, v6only, tcp("1.1.1.1", 443), direct)
	check(t, v6only, tcp("2606:4700::1111", 443), listed("::/0"))
	check(t, v6only, udp("fe80::1", 53), linkDNS)
}

// TestCompileRefuses: what the node cannot enforce exactly fails the
// application instead of being applied in part.
func TestCompileRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    *ctrlv1.NetworkPolicy
	}{
		{"unknown mode", &ctrlv1.NetworkPolicy{Mode: 7}},
		{"DENY_ALL with allow", &ctrlv1.NetworkPolicy{Mode: denyAll, Allow: []string{"1.1.1.1"}}},
		{"unspecified with deny", &ctrlv1.NetworkPolicy{Deny: []string{"1.1.1.1"}}},
		{"bad allow", &ctrlv1.NetworkPolicy{Mode: publicInternet, Allow: []string{"1.1.1.1", "nope"}}},
		{"host bits", &ctrlv1.NetworkPolicy{Mode: publicInternet, Deny: []string{"10.0.0.1/8"}}},
		{"unresolved egress", egresses(publicInternet, entry("eg-other", "10.0.0.0/8"))},
		{"egress without destinations", egresses(publicInternet, entry("eg-office"))},
		{"bad destination", egresses(publicInternet, entry("eg-office", "10.0.0.1/8"))},
		{"two egresses", egresses(publicInternet, entry("eg-office", "10.0.0.0/8"), entry("eg-office", "192.168.0.0/16"))},
		{"DENY_ALL with egresses", egresses(denyAll, entry("eg-office", "10.0.0.0/8"))},
		{"too many destinations", egresses(publicInternet, entry("eg-office", manyDestinations(257)...))},
		{"resolvers", &ctrlv1.NetworkPolicy{Mode: publicInternet, Resolvers: []*ctrlv1.NetworkPolicyResolver{{ResolverId: "r"}}}},
		{"resolver without a path", resolvers(publicInternet, &ctrlv1.NetworkPolicyResolver{ResolverId: "rs-office"})},
		{"resolver through an Egress the policy lacks", resolvers(publicInternet, throughEgress("rs-office", "eg-office"))},
		{"two resolvers", resolvers(publicInternet, directResolver("rs-office"), directResolver("rs-office"))},
		{"DENY_ALL with resolvers", resolvers(denyAll, directResolver("rs-office"))},
	} {
		if c, err := policy.Compile(tc.p, slotContext); err == nil {
			t.Errorf("%s: Compile = %v, nil; want an error", tc.name, c)
		}
	}
	for _, p := range []*ctrlv1.NetworkPolicy{
		egresses(publicInternet, entry("eg-other", "10.0.0.0/8")),
		{Mode: publicInternet, Resolvers: []*ctrlv1.NetworkPolicyResolver{{ResolverId: "r"}}},
	} {
		if _, err := policy.Compile(p, slotContext); !errors.Is(err, policy.ErrForwarding) {
			t.Errorf("Compile(%v): %v; want ErrForwarding", p, err)
		}
	}
	compile(t, egresses(publicInternet, entry("eg-office", manyDestinations(256)...)))
}

// A resolvers entry compiles when its Resolver was resolved and its path is
// direct or an Egress of the same policy; the engine answers its queries
// LinkDNS as before (the slot asks the Resolver).
func TestCompileResolvers(t *testing.T) {
	viaEgress := egresses(publicInternet, entry("eg-office", "10.0.0.0/8"))
	viaEgress.Resolvers = []*ctrlv1.NetworkPolicyResolver{throughEgress("rs-office", "eg-office")}
	for _, p := range []*ctrlv1.NetworkPolicy{resolvers(publicInternet, directResolver("rs-office")), viaEgress} {
		c := compile(t, p)
		if d := c.Decide(policy.Flow{Proto: policy.UDP, Dst: netip.MustParseAddr("10.0.2.3"), Port: 53}); d.Kind != policy.LinkDNS {
			t.Errorf("a query to the link DNS address under %v: %v, want LinkDNS", p, d)
		}
	}
}

func resolvers(mode ctrlv1.NetworkPolicyMode, entries ...*ctrlv1.NetworkPolicyResolver) *ctrlv1.NetworkPolicy {
	return &ctrlv1.NetworkPolicy{Mode: mode, Resolvers: entries}
}

func directResolver(id string) *ctrlv1.NetworkPolicyResolver {
	return &ctrlv1.NetworkPolicyResolver{ResolverId: id, Path: &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_Direct{Direct: &ctrlv1.ResolverDirectPath{}}}}
}

func throughEgress(id, egressID string) *ctrlv1.NetworkPolicyResolver {
	return &ctrlv1.NetworkPolicyResolver{ResolverId: id, Path: &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_EgressId{EgressId: egressID}}}
}

func egresses(mode ctrlv1.NetworkPolicyMode, entries ...*ctrlv1.NetworkPolicyEgress) *ctrlv1.NetworkPolicy {
	return &ctrlv1.NetworkPolicy{Mode: mode, Egresses: entries}
}

func entry(id string, destinations ...string) *ctrlv1.NetworkPolicyEgress {
	return &ctrlv1.NetworkPolicyEgress{EgressId: id, Destinations: destinations}
}

func manyDestinations(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String()
	}
	return out
}

// TestEgresses: a TCP flow that deny does not refuse, to a destination an
// entry covers, is forwarded without the hard deny; an echo to it is
// refused; link DNS is never forwarded by destination; the rest leaves
// directly as before.
func TestEgresses(t *testing.T) {
	p := egresses(publicInternet, entry("eg-office", "10.0.0.0/8", "1.1.1.0/24", "fd00::/8", "10.0.2.3", "192.0.9.20"))
	p.Deny = []string{"10.9.0.0/16", "1.1.1.1"}
	p.Allow = []string{"10.9.9.9"}
	c := compile(t, p)
	fwd := func(dst string) want { return want{policy.Forward, policy.NoReason, "eg-office " + dst} }
	forwardedEcho := func(dst string) want { return want{policy.Refuse, policy.Forwarded, "eg-office " + dst} }
	for _, tc := range []struct {
		f policy.Flow
		w want
	}{
		{tcp("10.1.2.3", 22), fwd("10.0.0.0/8")},                  // private: hard deny does not apply
		{tcp("1.1.1.2", 443), fwd("1.1.1.0/24")},                  // public too
		{tcp("fd12::1", 80), fwd("fd00::/8")},                     // each family its own
		{tcp("192.0.9.20", 443), fwd("192.0.9.20/32")},            // ctrl's address, through the Egress's network
		{tcp("10.9.1.1", 22), listed("10.9.0.0/16")},              // deny first
		{tcp("10.9.9.9", 22), fwd("10.0.0.0/8")},                  // allow cancels deny; the entry still forwards
		{tcp("1.1.1.1", 443), listed("1.1.1.1/32")},               // deny wins over forwarding
		{echo("10.1.2.3"), forwardedEcho("10.0.0.0/8")},           // echo to a forwarded destination
		{echo("1.1.1.2"), forwardedEcho("1.1.1.0/24")},            // public as well
		{udp("10.1.2.3", 53), byProto},                            // UDP is not forwarded yet
		{udp("10.0.2.3", 53), linkDNS},                            // link DNS is never forwarded by destination
		{tcp("10.0.2.3", 53), linkDNS},                            // over TCP neither
		{tcp("10.0.2.3", 80), fwd("10.0.0.0/8")},                  // the address itself, another port, is
		{tcp("8.8.8.8", 443), direct},                             // not covered: direct
		{tcp("192.168.1.1", 443), hard("Private-Use")},            // not covered: hard deny
		{tcp("::ffff:10.1.2.3", 22), hard("IPv4-mapped Address")}, // an IPv4 entry does not cover the mapped form
	} {
		checkEgress(t, c, tc.f, tc.w)
	}
}

// checkEgress is check with the egress and covering entry as the detail of
// Forward and Forwarded decisions.
func checkEgress(t *testing.T, p *policy.Policy, f policy.Flow, w want) {
	t.Helper()
	d := p.Decide(f)
	if d.Kind != policy.Forward && d.Reason != policy.Forwarded {
		check(t, p, f, w)
		return
	}
	if got := d.Egress + " " + d.Entry.String(); d.Kind != w.kind || d.Reason != w.reason || got != w.detail {
		t.Errorf("Decide(%+v) = %v; want %v %v %q", f, d, w.kind, w.reason, w.detail)
	}
}

func TestParseEntry(t *testing.T) {
	for _, s := range []string{"1.2.3.4", "1.2.3.4/32", "10.0.0.0/8", "0.0.0.0/0", "::/0", "2001:db8::/32", "2001:db8::1", "fe80::/10"} {
		if _, err := policy.ParseEntry(s); err != nil {
			t.Errorf("ParseEntry(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "nope", "10.0.0.1/8", "010.0.0.1", "2001:DB8::1", "2001:0db8::1", "fe80::1%eth0", "::ffff:1.2.3.4", "::ffff:1.2.3.0/120", "::ffff:0.0.0.0/96", "1.2.3.4/33", " 1.2.3.4", "1.2.3.4/"} {
		if p, err := policy.ParseEntry(s); err == nil {
			t.Errorf("ParseEntry(%q) = %v; want an error", s, p)
		}
	}
}
