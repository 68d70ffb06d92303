package netpolicy_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/netpolicy"
)

// canonicalEntry is the entry rule read directly off net/netip: an address
// or a masked CIDR, printed back exactly as given, without zone and not
// IPv4-mapped.
func canonicalEntry(s string) bool {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil || p.Masked() != p || p.String() != s {
			return false
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil || a.String() != s {
			return false
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return p.Addr().Zone() == "" && !p.Addr().Is4In6()
}

// FuzzNormalize: for any policy, Normalize never panics, never modifies its
// input, and refuses only with invalid_argument naming a field of the
// policy. Each entry is accepted exactly when it is canonical for net/netip.
// What it accepts has revision 0, the same content as the input, only
// egress references the policy lists, and normalises to itself again, also
// after a wire round trip.
func FuzzNormalize(f *testing.F) {
	pub := int32(publicInternet)
	f.Add(int32(0), "", "", "", "", "", uint8(0), "", uint64(0))
	f.Add(int32(denyAll), "10.0.0.0/8", "", "", "", "", uint8(0), "", uint64(3))
	f.Add(pub, "1.2.3.4,10.0.0.0/8", "::/0", "", "", "", uint8(0), "", uint64(7))
	f.Add(pub, "10.0.0.1/8", "", "", "", "", uint8(0), "", uint64(0))
	f.Add(pub, "", "2001:DB8::1", "", "", "", uint8(0), "", uint64(0))
	f.Add(pub, "::ffff:1.2.3.4", "fe80::1%eth0", "", "", "", uint8(0), "", uint64(0))
	f.Add(pub, "010.0.0.1", "::ffff:0102:0304", "", "", "", uint8(0), "", uint64(0))
	f.Add(pub, "", "", "203.0.113.0/24", "egr-1", "rsv-1", uint8(2), "egr-1", uint64(0))
	f.Add(pub, "", "", "203.0.113.0/24", "egr-1", "rsv-1", uint8(2), "egr-2", uint64(0))
	f.Add(pub, "", "", "", "egr-1", "rsv-1", uint8(1), "", uint64(0))
	f.Add(pub, "", "", "", "", "rsv-1", uint8(3), "", uint64(0))
	f.Add(pub, "", "", "", "", "rsv-1", uint8(0), "", uint64(0))
	f.Add(int32(99), "", "", "", "", "", uint8(0), "", uint64(0))
	f.Add(int32(-1), "", "", "", "", "", uint8(0), "", uint64(0))
	f.Fuzz(func(t *testing.T, mode int32, allow, deny, dests, egressID, resolverID string, pathKind uint8, pathEgress string, revision uint64) {
		if !allValidUTF8(allow, deny, dests, egressID, resolverID, pathEgress) {
			return // no request carries it: the wire refuses invalid UTF-8 in a string
		}
		p := &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode(mode), Allow: split(allow), Deny: split(deny), Revision: revision}
		if egressID != "" || dests != "" {
			p.Egresses = []*ctrlv1.NetworkPolicyEgress{{EgressId: egressID, Destinations: split(dests)}}
		}
		if resolverID != "" || pathKind != 0 {
			r := &ctrlv1.NetworkPolicyResolver{ResolverId: resolverID}
			switch pathKind % 4 {
			case 1:
				r.Path = &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_Direct{}} // the branch, without a message
			case 2:
				r.Path = &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_EgressId{EgressId: pathEgress}}
			case 3:
				r.Path = &ctrlv1.ResolverPath{}
			}
			p.Resolvers = []*ctrlv1.NetworkPolicyResolver{r}
		}
		in := proto.Clone(p)
		n, err := netpolicy.Normalize(prefix, p)
		if !proto.Equal(in, p) {
			t.Fatalf("Normalize modified its input: %v, was %v", p, in)
		}
		if err != nil {
			if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.HasPrefix(apierr.FieldOf(err), prefix+".") {
				t.Fatalf("Normalize(%v): %v; want invalid_argument naming a field under %s", p, err, prefix)
			}
			return
		}
		checkNormalized(t, p, n)
	})
}

func checkNormalized(t *testing.T, p, n *ctrlv1.NetworkPolicy) {
	t.Helper()
	switch n.GetMode() {
	case denyAll, publicInternet:
	default:
		t.Fatalf("Normalize(%v) stored mode %v", p, n.GetMode())
	}
	if n.GetRevision() != 0 {
		t.Fatalf("Normalize(%v) kept revision %d", p, n.GetRevision())
	}
	entries := slices.Concat(n.GetAllow(), n.GetDeny())
	for _, e := range n.GetEgresses() {
		entries = append(entries, e.GetDestinations()...)
	}
	for _, e := range entries {
		if !canonicalEntry(e) {
			t.Fatalf("Normalize(%v) accepted the entry %q, which is not canonical", p, e)
		}
	}
	for _, list := range [][]string{p.GetAllow(), p.GetDeny()} {
		for _, e := range list {
			if _, err := netpolicy.ParseEntry(e); (err == nil) != canonicalEntry(e) {
				t.Fatalf("ParseEntry(%q): %v; canonical = %v", e, err, canonicalEntry(e))
			}
		}
	}
	if !netpolicy.SameContent(p, n) || !netpolicy.SameContent(n, p) {
		t.Fatalf("Normalize(%v) = %v, another content", p, n)
	}
	listed := map[string]bool{}
	for _, e := range n.GetEgresses() {
		listed[e.GetEgressId()] = true
	}
	for _, id := range netpolicy.ReferencedEgresses(n) {
		if !listed[id] {
			t.Fatalf("Normalize(%v) kept a reference to the unlisted egress %q", p, id)
		}
	}
	again, err := netpolicy.Normalize(prefix, n)
	if err != nil || !proto.Equal(again, n) {
		t.Fatalf("Normalize is not idempotent on %v: %v, %v", n, again, err)
	}
	b, err := proto.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	wire := &ctrlv1.NetworkPolicy{}
	if err := proto.Unmarshal(b, wire); err != nil {
		t.Fatal(err)
	}
	if w, err := netpolicy.Normalize(prefix, wire); err != nil || !proto.Equal(w, n) || !netpolicy.SameContent(wire, n) {
		t.Fatalf("%v after a wire round trip normalises to %v, %v", n, w, err)
	}
}

func allValidUTF8(ss ...string) bool {
	return !slices.ContainsFunc(ss, func(s string) bool { return !utf8.ValidString(s) })
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
