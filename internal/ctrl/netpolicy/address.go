package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ParseEntry parses one entry of allow, deny or an egress's destinations and
// returns the prefix it covers (a single address as /32 or /128).
//
// An entry is one address or one CIDR in canonical text: the text must be
// exactly what net/netip prints for it, which rules out host bits set in a
// CIDR, leading zeros, upper-case or uncompressed IPv6, and IPv6 written with
// an embedded IPv4 part other than the IPv4-mapped form. A zone is refused
// because a destination outside the host has none.
//
// IPv4-mapped IPv6 entries (::ffff:1.2.3.4, ::ffff:1.2.3.0/120) are refused
// even in canonical text. An entry acts only on its own address family, and
// such addresses never appear as IPv6 destinations on the wire: a guest that
// dials one sends IPv4. Accepted, "::ffff:1.2.3.4" in deny would look like it
// refuses 1.2.3.4 and refuse nothing, so the caller is told to write the
// IPv4 form. IPv6 prefixes that merely contain the mapped range, such as
// ::/0, are ordinary IPv6 entries.
//
// The error is plain; Normalize wraps it in invalid_argument for the field.
func ParseEntry(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, errors.New("must be an address or a CIDR, not empty")
	}
	if strings.Contains(s, "%") {
		return netip.Prefix{}, fmt.Errorf("%q has a zone; destinations take none", s)
	}
	p, canon, err := parse(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	// Mapped before canonical, so that "::ffff:0102:0304" is told to write
	// 1.2.3.4 rather than a canonical form that is refused in turn.
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is IPv4-mapped IPv6, which acts on no destination; write the IPv4 form %s", s, unmap(p))
	}
	if canon != s {
		return netip.Prefix{}, fmt.Errorf("%q is not in canonical form; write %s", s, canon)
	}
	return p, nil
}

// parse reads s as a CIDR when it has a slash and as an address otherwise,
// refusing host bits, and returns the prefix with the text netip prints for
// the entry.
func parse(s string) (netip.Prefix, string, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, "", fmt.Errorf("%q is not an address or a CIDR: %v", s, err)
		}
		return netip.PrefixFrom(a, a.BitLen()), a.String(), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, "", fmt.Errorf("%q is not an address or a CIDR: %v", s, err)
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, "", fmt.Errorf("%q has host bits set; the network is %s", s, m)
	}
	return p, p.String(), nil
}

// unmap is the IPv4 text of an IPv4-mapped prefix, for the error message.
func unmap(p netip.Prefix) string {
	a := p.Addr().Unmap()
	if p.Bits() == 128 {
		return a.String()
	}
	return netip.PrefixFrom(a, p.Bits()-96).String()
}
