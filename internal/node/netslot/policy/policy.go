// Package policy is the node's network policy engine: for one Workspace
// NetworkPolicy and the node's hard-deny context it decides, for each new
// guest flow, whether the flow leaves the slot directly, is handled by the
// slot's link DNS service, or is refused, and why. It is pure: no sockets,
// no clocks. The network slot asks it on every dial.
//
// The rules (docs/NETWORK.md says the same for readers):
//
//   - DENY_ALL: nothing leaves; a query to the link DNS address is refused
//     (the slot answers it REFUSED at once).
//   - A query (UDP or TCP, port 53) to a link DNS address under
//     PUBLIC_INTERNET is the slot's own (LinkDNS); allow and deny never act
//     on it.
//   - Under PUBLIC_INTERNET only TCP and ICMP echo leave directly; every
//     other UDP flow is refused.
//   - A destination in deny and not in allow is refused. Each entry acts only
//     on its own family. allow admits nothing deny did not refuse: anything
//     else follows the mode.
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
	// Forward: the flow leaves through an Egress. Part 2 (Egress
	// forwarding) returns it; Decide never does yet, and Compile refuses
	// a policy with egresses or resolvers, so none is ever applied
	// without its forwarding.
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
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Decision is the answer for one flow. Entry is the deny entry that refused
// it (DenyList) and Range the registry row (HardDeny); both are zero
// otherwise.
type Decision struct {
	Kind   Kind
	Reason Reason
	Entry  netip.Prefix
	Range  Range
}

func (d Decision) String() string {
	switch d.Reason {
	case DenyList:
		return fmt.Sprintf("%s: %s (%s)", d.Kind, d.Reason, entryText("/", d.Entry))
	case HardDeny:
		return fmt.Sprintf("%s: %s (%s, %s %s)", d.Kind, d.Reason, d.Range.Prefix, d.Range.Name, d.Range.Source)
	case NoReason:
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
}

// ErrForwarding is returned by Compile for a policy with egresses or
// resolvers: forwarding is not built, and a policy the node cannot enforce
// must fail its application rather than run without its forwarding.
var ErrForwarding = errors.New("forwarding through Egresses and Resolvers is not supported by this node yet")

// Policy is one revision of a Workspace's policy compiled for a slot.
type Policy struct {
	mode    ctrlv1.NetworkPolicyMode
	allow   []netip.Prefix
	deny    []netip.Prefix
	own     []netip.Addr
	linkDNS []netip.Addr
}

// Compile checks p as the node will enforce it and builds it whole. An
// unspecified mode (or a nil policy) is DENY_ALL. It refuses what it cannot
// enforce exactly: an unknown mode, an entry that does not parse, entries
// under DENY_ALL, and egresses or resolvers (ErrForwarding).
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
	if len(p.GetEgresses()) > 0 || len(p.GetResolvers()) > 0 {
		return nil, ErrForwarding
	}
	if out.denyAll() && len(p.GetAllow())+len(p.GetDeny()) > 0 {
		return nil, errors.New("DENY_ALL takes no allow or deny entries")
	}
	var err error
	if out.allow, err = parseList("allow", p.GetAllow()); err != nil {
		return nil, err
	}
	if out.deny, err = parseList("deny", p.GetDeny()); err != nil {
		return nil, err
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
	// Part 2 goes here: a TCP flow whose destination an egresses entry
	// covers is Forward (no hard deny check), an ICMP echo to it is
	// refused (administratively prohibited).
	return p.direct(f.Dst)
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
