package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ParseEntry reads one entry of allow or deny as ctrl stores it: one address
// or one CIDR in the canonical text net/netip prints, with no zone and not
// IPv4-mapped. ctrl validated it already (internal/ctrl/netpolicy); the node
// reads it again because it must never enforce something other than what
// the entry says, so anything else is an error that fails the application
// rather than an entry that silently acts on the wrong addresses.
func ParseEntry(s string) (netip.Prefix, error) {
	p, err := parsePrefixOrAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	switch {
	case p.Addr().Is4In6():
		return netip.Prefix{}, fmt.Errorf("entry %q is IPv4-mapped IPv6 and would act on no destination", s)
	case p != p.Masked():
		return netip.Prefix{}, fmt.Errorf("entry %q has host bits set", s)
	case entryText(s, p) != s:
		return netip.Prefix{}, fmt.Errorf("entry %q is not in canonical form (%s)", s, entryText(s, p))
	}
	return p, nil
}

// parsePrefixOrAddr reads a CIDR, or a single address as its full-length
// prefix. netip.ParsePrefix refuses zones; a lone address is checked here.
func parsePrefixOrAddr(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("entry %q: %w", s, err)
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("entry %q: %w", s, err)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("entry %q: %w", s, errZone)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

var errZone = errors.New("destinations take no zone")

// entryText is the canonical text of p written the way s was: as an address
// when s has no length, as a CIDR (a /32 or /128 too) when it has one.
func entryText(s string, p netip.Prefix) string {
	if !strings.Contains(s, "/") {
		return p.Addr().String()
	}
	return p.String()
}
