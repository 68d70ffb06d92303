// Package policy is the node's network policy engine: for one Workspace
// NetworkPolicy and the node's hard-deny context it decides, for each new
// guest flow, whether the flow leaves the slot directly, leaves through an
// Egress, is handled by the slot's link DNS service, or is refused, and
// why. It is pure: no sockets, no clocks. The network slot asks it on every
// dial.
//
// The rules (docs/NETWORK.md says the same for readers):
//
//   - DENY_ALL: nothing leaves; a query to the link DNS address is refused
//     (the slot answers it REFUSED at once).
//   - A query (UDP or TCP, port 53) to a link DNS address under
//     PUBLIC_INTERNET is the slot's own (LinkDNS: it asks the policy's
//     Resolver, or the deployment resolver); allow and deny never act on
//     it.
//   - Under PUBLIC_INTERNET only TCP and ICMP echo leave directly; every
//     other UDP flow is refused.
//   - A destination in deny and not in allow is refused. Each entry acts only
//     on its own family. allow admits nothing deny did not refuse: anything
//     else follows the mode.
//   - A TCP flow deny does not refuse, to a destination an egresses entry
//     covers, is forwarded through that entry's Egress without the hard
//     deny; an ICMP echo to such a destination is refused.
//   - The hard deny wins for everything that leaves directly, allow included:
//     every address the IANA special-purpose registries do not mark globally
//     reachable (loopback, private, link-local and 169.254.169.254 among
//     them), multicast, IPv6 outside 2000::/3, and ctrl's and the node's own
//     addresses. Entries inside those ranges are valid; they act only on
//     forwarded traffic.
package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// Proto is the kind of guest flow being decided.
type Proto uint8

const (
	TCP      Proto = iota + 1 // a new TCP connection (SYN)
	ICMPEcho                  // an ICMP or ICMPv6 echo request
	UDP                       // a UDP datagram of a new flow
)

// Flow is what the slot knows of a new guest flow when it asks.
type Flow struct {
	Proto Proto
	Dst   netip.Addr
	Port  uint16 // destination port; zero for ICMP echo
}

// Kind is what happens to a flow. The zero Kind refuses, so a Decision
// nobody filled in fails closed.
type Kind uint8

const (
	Refuse Kind = iota
	// Direct: the slot re-originates the flow from the host's uplink.
	Direct
	// LinkDNS: a DNS query to the link DNS address, which the slot
	// answers itself by forwarding to the deployment resolver.
	LinkDNS
	// Forward: the flow leaves through the Egress Decision.Egress names,
	// never directly (the slot resets it when forwarding fails).
	Forward
)

func (k Kind) String() string {
	switch k {
	case Refuse:
		return "refuse"
	case Direct:
		return "direct"
	case LinkDNS:
		return "link-dns"
	case Forward:
		return "forward"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Reason is why a flow is refused.
type Reason uint8

const (
	NoReason    Reason = iota
	DenyAll            // the mode is DENY_ALL
	Protocol           // not TCP or ICMP echo, and not a link DNS query
	DenyList           // covered by deny and not by allow
	HardDeny           // not globally reachable (Range names the row)
	NodeAddress        // one of ctrl's or the node's own addresses
	Forwarded          // an ICMP echo to a destination an egresses entry covers
)

func (r Reason) String() string {
	switch r {
	case NoReason:
		return "none"
	case DenyAll:
		return "DENY_ALL"
	case Protocol:
		return "protocol not admitted"
	case DenyList:
		return "deny list"
	case HardDeny:
		return "hard deny"
	case NodeAddress:
		return "node or ctrl address"
	case Forwarded:
		return "forwarded destination"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Decision is the answer for one flow. Entry is the deny entry that refused
// it (DenyList) or the destinations entry that covers it (Forward,
// Forwarded), Range the registry row (HardDeny), and Egress the egress_id
// it is forwarded through (Forward) or would be (Forwarded); each is zero
// otherwise. EgressRevision is that Egress's revision the slot's dialer
// uses (Context.Egresses): part of a forwarded flow's path, so a flow of
// one revision drains when the Egress moves to the next.
type Decision struct {
	Kind           Kind
	Reason         Reason
	Entry          netip.Prefix
	Range          Range
	Egress         string
	EgressRevision uint64
}

func (d Decision) String() string {
	switch d.Reason {
	case DenyList:
		return fmt.Sprintf("%s: %s (%s)", d.Kind, d.Reason, entryText("/", d.Entry))
	case HardDeny:
		return fmt.Sprintf("%s: %s (%s, %s %s)", d.Kind, d.Reason, d.Range.Prefix, d.Range.Name, d.Range.Source)
	case Forwarded:
		return fmt.Sprintf("%s: %s (%s via %s)", d.Kind, d.Reason, entryText("/", d.Entry), d.Egress)
	case NoReason:
		if d.Kind == Forward {
			return fmt.Sprintf("%s via %s (%s)", d.Kind, d.Egress, entryText("/", d.Entry))
		}
		return d.Kind.String()
	}
	return fmt.Sprintf("%s: %s", d.Kind, d.Reason)
}

// Context is what the node knows beside the policy: its hard-deny addresses
// and the slot's link DNS addresses. It is the same for every revision of a
// slot's policy.
type Context struct {
	// Own lists ctrl's addresses and the node's own (every interface
	// address), which the hard deny refuses wherever they are.
	Own []netip.Addr
	// LinkDNS lists the link DNS addresses of the slot (its gateway in
	// the family of the first deployment resolver, fe80::1 for IPv6).
	LinkDNS []netip.Addr
	// Egresses are the Egresses the node has resolved for this slot, by
	// egress_id. A policy entry naming one that is missing here does not
	// compile: the node must not apply an entry it cannot forward.
	Egresses map[string]EgressRef
	// Resolvers are the resolver_ids of the Resolvers the node has
	// resolved for this slot; an entry of resolvers naming one missing
	// here does not compile. The slot, not the engine, asks them.
	Resolvers map[string]bool
}

// EgressRef is what the engine knows of a resolved Egress: which revision
// of it the slot's dialer uses (carried in a Forward decision, never
// decided on).
type EgressRef struct {
	Revision uint64
}

// ErrForwarding is returned by Compile for a policy the node cannot forward
// as written: a resolvers or egresses entry whose Resolver or Egress the
// node was not given. A policy the node cannot enforce must fail its
// application rather than run without its forwarding.
var ErrForwarding = errors.New("forwarding not supported by this node")

// maxEgresses and maxDestinations are the reference's limits: at most one
// egresses entry, 1 to 256 destinations each.
const (
	maxEgresses     = 1
	maxDestinations = 256
)

// Policy is one revision of a Workspace's policy compiled for a slot.
type Policy struct {
	mode    ctrlv1.NetworkPolicyMode
	allow   []netip.Prefix
	deny    []netip.Prefix
	own     []netip.Addr
	linkDNS []netip.Addr
	forward []forwardEntry
}

// forwardEntry is one egresses entry: its destinations leave through egress.
type forwardEntry struct {
	egress       string
	revision     uint64 // of the Egress, as the node has it
	destinations []netip.Prefix
}

// Compile checks p as the node will enforce it and builds it whole. An
// unspecified mode (or a nil policy) is DENY_ALL. It refuses what it cannot
// enforce exactly: an unknown mode, an entry that does not parse, entries
// under DENY_ALL, resolvers and egresses entries whose Egress c lacks
// (ErrForwarding).
func Compile(p *ctrlv1.NetworkPolicy, c Context) (*Policy, error) {
	out := &Policy{mode: p.GetMode(), own: unmapAll(c.Own), linkDNS: unmapAll(c.LinkDNS)}
	switch out.mode {
	case ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_UNSPECIFIED:
		out.mode = ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL
	case ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL,
		ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET:
	default:
		return nil, fmt.Errorf("network policy mode %d is unknown", int32(out.mode))
	}
	if out.denyAll() && len(p.GetAllow())+len(p.GetDeny())+len(p.GetEgresses())+len(p.GetResolvers()) > 0 {
		return nil, errors.New("DENY_ALL takes no allow, deny, egresses or resolvers entries")
	}
	if err := checkResolvers(p, c.Resolvers); err != nil {
		return nil, err
	}
	var err error
	if out.allow, err = parseList("allow", p.GetAllow()); err != nil {
		return nil, err
	}
	if out.deny, err = parseList("deny", p.GetDeny()); err != nil {
		return nil, err
	}
	if out.forward, err = compileEgresses(p.GetEgresses(), c.Egresses); err != nil {
		return nil, err
	}
	return out, nil
}

// maxResolvers is the reference's limit on resolvers entries.
const maxResolvers = 1

// checkResolvers checks p's resolvers entries: each names a Resolver the
// node was given and exactly one path, an Egress path one of p's egresses.
func checkResolvers(p *ctrlv1.NetworkPolicy, known map[string]bool) error {
	entries := p.GetResolvers()
	if len(entries) > maxResolvers {
		return fmt.Errorf("resolvers has %d entries; at most %d is accepted", len(entries), maxResolvers)
	}
	for i, r := range entries {
		if !known[r.GetResolverId()] || r.GetResolverId() == "" {
			return fmt.Errorf("resolvers[%d]: Resolver %q is not resolved on this node: %w", i, r.GetResolverId(), ErrForwarding)
		}
		switch k := r.GetPath().GetKind().(type) {
		case *ctrlv1.ResolverPath_Direct:
		case *ctrlv1.ResolverPath_EgressId:
			if !slices.ContainsFunc(p.GetEgresses(), func(e *ctrlv1.NetworkPolicyEgress) bool { return e.GetEgressId() == k.EgressId }) {
				return fmt.Errorf("resolvers[%d].path.egress_id: Egress %q is not in the policy's egresses", i, k.EgressId)
			}
		default:
			return fmt.Errorf("resolvers[%d].path: no path selected", i)
		}
	}
	return nil
}

// compileEgresses reads the egresses entries, each of whose Egress the node
// must have been given.
func compileEgresses(entries []*ctrlv1.NetworkPolicyEgress, known map[string]EgressRef) ([]forwardEntry, error) {
	if len(entries) > maxEgresses {
		return nil, fmt.Errorf("egresses has %d entries; at most %d is accepted", len(entries), maxEgresses)
	}
	out := make([]forwardEntry, 0, len(entries))
	for i, e := range entries {
		ref, ok := known[e.GetEgressId()]
		if !ok || e.GetEgressId() == "" {
			return nil, fmt.Errorf("egresses[%d]: Egress %q is not resolved on this node: %w", i, e.GetEgressId(), ErrForwarding)
		}
		if n := len(e.GetDestinations()); n == 0 || n > maxDestinations {
			return nil, fmt.Errorf("egresses[%d]: %d destinations; 1 to %d are accepted", i, n, maxDestinations)
		}
		dsts, err := parseList(fmt.Sprintf("egresses[%d].destinations", i), e.GetDestinations())
		if err != nil {
			return nil, err
		}
		out = append(out, forwardEntry{egress: e.GetEgressId(), revision: ref.Revision, destinations: dsts})
	}
	return out, nil
}

func parseList(field string, entries []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(entries))
	for i, e := range entries {
		p, err := ParseEntry(e)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// unmapAll keeps IPv4 addresses in their 4-byte form: Go's net package
// often hands interface addresses over as IPv4-mapped IPv6, which would
// match no IPv4 destination.
func unmapAll(as []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if a.IsValid() {
			out = append(out, a.Unmap().WithZone(""))
		}
	}
	return out
}

func (p *Policy) denyAll() bool {
	return p.mode == ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL
}

// Decide says what happens to a new guest flow. The steps run in the order
// the reference states them; each returns or falls through.
func (p *Policy) Decide(f Flow) Decision {
	if p.denyAll() {
		return refuse(DenyAll)
	}
	if p.isLinkDNS(f) {
		return Decision{Kind: LinkDNS}
	}
	if f.Proto != TCP && f.Proto != ICMPEcho {
		return refuse(Protocol)
	}
	if e, denied := p.denied(f.Dst); denied {
		return Decision{Kind: Refuse, Reason: DenyList, Entry: e}
	}
	// Forwarded traffic leaves from the Egress's network, so the hard
	// deny (which guards the node's) does not apply to it.
	if e, entry, ok := p.forwarded(f.Dst); ok {
		if f.Proto == TCP {
			return Decision{Kind: Forward, Entry: entry, Egress: e.egress, EgressRevision: e.revision}
		}
		return Decision{Kind: Refuse, Reason: Forwarded, Entry: entry, Egress: e.egress}
	}
	return p.direct(f.Dst)
}

// forwarded is the egresses entry whose destinations cover dst, and the
// destination that does (the first; destinations are a set).
func (p *Policy) forwarded(dst netip.Addr) (forwardEntry, netip.Prefix, bool) {
	for _, e := range p.forward {
		if i := slices.IndexFunc(e.destinations, func(d netip.Prefix) bool { return d.Contains(dst) }); i >= 0 {
			return e, e.destinations[i], true
		}
	}
	return forwardEntry{}, netip.Prefix{}, false
}

// isLinkDNS: DNS over UDP or TCP to one of the slot's link DNS addresses.
func (p *Policy) isLinkDNS(f Flow) bool {
	return (f.Proto == UDP || f.Proto == TCP) && f.Port == 53 && slices.Contains(p.linkDNS, f.Dst)
}

// denied is the deny entry covering dst when no allow entry does. Contains
// never matches across families, which is what makes each entry act only
// on its own family.
func (p *Policy) denied(dst netip.Addr) (netip.Prefix, bool) {
	i := slices.IndexFunc(p.deny, func(e netip.Prefix) bool { return e.Contains(dst) })
	if i < 0 || slices.ContainsFunc(p.allow, func(e netip.Prefix) bool { return e.Contains(dst) }) {
		return netip.Prefix{}, false
	}
	return p.deny[i], true
}

// direct applies the hard deny to a flow that would leave directly.
func (p *Policy) direct(dst netip.Addr) Decision {
	if r, denied := SpecialPurpose(dst); denied {
		return Decision{Kind: Refuse, Reason: HardDeny, Range: r}
	}
	if slices.Contains(p.own, dst) {
		return refuse(NodeAddress)
	}
	return Decision{Kind: Direct}
}

func refuse(r Reason) Decision {
	return Decision{Kind: Refuse, Reason: r}
}

// DialCheck is the check of an address the node dials itself to reach an
// Egress's endpoint: the hard deny (the special-purpose ranges, ctrl's and
// the node's addresses) refuses it with an error naming why.
func DialCheck(own []netip.Addr) func(netip.Addr) error {
	p := &Policy{own: unmapAll(own)}
	return func(a netip.Addr) error {
		if d := p.direct(a.Unmap()); d.Kind == Refuse {
			return fmt.Errorf("%s: %s", a, d)
		}
		return nil
	}
}
