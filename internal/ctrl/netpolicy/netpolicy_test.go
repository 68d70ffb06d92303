package netpolicy_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/netpolicy"
)

const (
	unspecified    = ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_UNSPECIFIED
	denyAll        = ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL
	publicInternet = ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET
)

const prefix = "spec.network_policy"

func checkInvalid(t *testing.T, err error, wantField string) {
	t.Helper()
	if wantField == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want invalid_argument on %s", wantField)
	}
	if code := connect.CodeOf(err); code != connect.CodeInvalidArgument {
		t.Fatalf("code %v, want invalid_argument (%v)", code, err)
	}
	if got := apierr.FieldOf(err); got != wantField {
		t.Fatalf("field %q, want %q (%v)", got, wantField, err)
	}
}

func direct() *ctrlv1.ResolverPath {
	return &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_Direct{Direct: &ctrlv1.ResolverDirectPath{}}}
}

func viaEgress(id string) *ctrlv1.ResolverPath {
	return &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_EgressId{EgressId: id}}
}

func egress(id string, dests ...string) *ctrlv1.NetworkPolicyEgress {
	return &ctrlv1.NetworkPolicyEgress{EgressId: id, Destinations: dests}
}

func resolver(id string, path *ctrlv1.ResolverPath) *ctrlv1.NetworkPolicyResolver {
	return &ctrlv1.NetworkPolicyResolver{ResolverId: id, Path: path}
}

// TestEntries checks the canonical text rule through allow, deny and an
// egress's destinations alike.
func TestEntries(t *testing.T) {
	for _, tc := range []struct {
		entry string
		valid bool
	}{
		{"10.0.0.0/8", true},
		{"0.0.0.0/0", true},
		{"1.2.3.4", true},
		{"1.2.3.4/32", true},
		{"192.168.1.0/24", true},
		{"255.255.255.255", true},
		{"::/0", true},
		{"::", true},
		{"::1", true},
		{"2001:db8::1", true},
		{"2001:db8::/32", true},
		{"2001:db8::1/128", true},
		{"fe80::1", true},
		{"64:ff9b::/96", true},
		{"::/64", true},

		{"", false},
		{" 1.2.3.4", false},
		{"1.2.3.4 ", false},
		{"10.0.0.1/8", false},     // host bits
		{"2001:db8::1/32", false}, // host bits
		{"010.0.0.1", false},      // leading zero
		{"10.0.0.01", false},
		{"10.0.0.0/08", false},
		{"1.2.3", false},
		{"1.2.3.4.5", false},
		{"256.0.0.0", false},
		{"1.2.3.4/33", false},
		{"2001:db8::/129", false},
		{"1.2.3.4/", false},
		{"/8", false},
		{"1.2.3.4/-1", false},
		{"2001:DB8::1", false},     // upper case
		{"2001:db8:0:0::1", false}, // not compressed
		{"2001:0db8::1", false},    // leading zero
		{"2001:db8:0:0:0:0:0:1", false},
		{"0:0:0:0:0:0:0:0/0", false},
		{"fe80::1%eth0", false}, // zone
		{"fe80::%1/64", false},
		{"::ffff:1.2.3.4", false},   // IPv4-mapped, canonical text
		{"::ffff:0102:0304", false}, // IPv4-mapped, not canonical
		{"::FFFF:1.2.3.4", false},
		{"::ffff:1.2.3.0/120", false},
		{"::ffff:0.0.0.0/96", false},
		{"::1.2.3.4", false}, // IPv4-compatible: netip prints ::102:304
		{"example.com", false},
		{"1.2.3.4-1.2.3.9", false},
		{"1.2.3.4,5.6.7.8", false},
	} {
		t.Run(tc.entry, func(t *testing.T) {
			_, err := netpolicy.ParseEntry(tc.entry)
			if (err == nil) != tc.valid {
				t.Fatalf("ParseEntry(%q) = %v, want valid %v", tc.entry, err, tc.valid)
			}
			want := func(f string) string {
				if tc.valid {
					return ""
				}
				return f
			}
			// Put the entry second, so the index in the field is checked.
			ok := "192.0.2.0/24"
			_, err = netpolicy.Normalize(prefix, &ctrlv1.NetworkPolicy{Mode: publicInternet, Allow: []string{ok, tc.entry}})
			checkInvalid(t, err, want(prefix+".allow[1]"))
			_, err = netpolicy.Normalize(prefix, &ctrlv1.NetworkPolicy{Mode: publicInternet, Deny: []string{ok, ok, tc.entry}})
			checkInvalid(t, err, want(prefix+".deny[2]"))
			_, err = netpolicy.Normalize(prefix, &ctrlv1.NetworkPolicy{
				Mode:     publicInternet,
				Egresses: []*ctrlv1.NetworkPolicyEgress{egress("eg", ok, tc.entry)},
			})
			checkInvalid(t, err, want(prefix+".egresses[0].destinations[1]"))
		})
	}
}

func TestParseEntryPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"1.2.3.4":       "1.2.3.4/32",
		"10.0.0.0/8":    "10.0.0.0/8",
		"2001:db8::1":   "2001:db8::1/128",
		"2001:db8::/32": "2001:db8::/32",
	} {
		p, err := netpolicy.ParseEntry(in)
		if err != nil || p != netip.MustParsePrefix(want) {
			t.Errorf("ParseEntry(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
}

func TestNormalize(t *testing.T) {
	tooMany := make([]string, netpolicy.MaxDestinations+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("10.0.%d.%d", i/256, i%256)
	}
	for _, tc := range []struct {
		name   string
		in     *ctrlv1.NetworkPolicy
		field  string                // "" when valid
		result *ctrlv1.NetworkPolicy // checked when valid
	}{
		{
			name:   "nil is DENY_ALL",
			in:     nil,
			result: &ctrlv1.NetworkPolicy{Mode: denyAll},
		},
		{
			name:   "unspecified is DENY_ALL",
			in:     &ctrlv1.NetworkPolicy{Revision: 7},
			result: &ctrlv1.NetworkPolicy{Mode: denyAll},
		},
		{
			name:   "DENY_ALL revision dropped",
			in:     &ctrlv1.NetworkPolicy{Mode: denyAll, Revision: 3},
			result: &ctrlv1.NetworkPolicy{Mode: denyAll},
		},
		{
			name:   "PUBLIC_INTERNET bare",
			in:     &ctrlv1.NetworkPolicy{Mode: publicInternet, Revision: 9},
			result: &ctrlv1.NetworkPolicy{Mode: publicInternet},
		},
		{
			name: "PUBLIC_INTERNET full, order kept",
			in: &ctrlv1.NetworkPolicy{
				Mode:      publicInternet,
				Revision:  42,
				Allow:     []string{"203.0.113.0/24", "10.0.0.0/8", "2001:db8::/32", "10.0.0.0/8"},
				Deny:      []string{"0.0.0.0/0", "::/0"},
				Egresses:  []*ctrlv1.NetworkPolicyEgress{egress("eg-1", "192.168.0.0/16", "10.0.0.0/8", "192.168.0.0/16")},
				Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs-1", viaEgress("eg-1"))},
			},
			result: &ctrlv1.NetworkPolicy{
				Mode:      publicInternet,
				Allow:     []string{"203.0.113.0/24", "10.0.0.0/8", "2001:db8::/32", "10.0.0.0/8"},
				Deny:      []string{"0.0.0.0/0", "::/0"},
				Egresses:  []*ctrlv1.NetworkPolicyEgress{egress("eg-1", "192.168.0.0/16", "10.0.0.0/8", "192.168.0.0/16")},
				Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs-1", viaEgress("eg-1"))},
			},
		},
		{
			name: "direct resolver",
			in: &ctrlv1.NetworkPolicy{
				Mode:      publicInternet,
				Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs-1", direct())},
			},
			result: &ctrlv1.NetworkPolicy{
				Mode:      publicInternet,
				Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs-1", direct())},
			},
		},
		{
			name: "direct resolver with nil message",
			in: &ctrlv1.NetworkPolicy{
				Mode: publicInternet,
				Resolvers: []*ctrlv1.NetworkPolicyResolver{
					resolver("rs-1", &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_Direct{}}),
				},
			},
			result: &ctrlv1.NetworkPolicy{
				Mode:      publicInternet,
				Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs-1", direct())},
			},
		},
		{
			name: "256 destinations",
			in: &ctrlv1.NetworkPolicy{
				Mode:     publicInternet,
				Egresses: []*ctrlv1.NetworkPolicyEgress{egress("eg", tooMany[:256]...)},
			},
			result: &ctrlv1.NetworkPolicy{
				Mode:     publicInternet,
				Egresses: []*ctrlv1.NetworkPolicyEgress{egress("eg", tooMany[:256]...)},
			},
		},

		{name: "unknown mode", in: &ctrlv1.NetworkPolicy{Mode: 3}, field: prefix + ".mode"},
		{name: "negative mode", in: &ctrlv1.NetworkPolicy{Mode: -1}, field: prefix + ".mode"},
		{
			name:  "DENY_ALL with allow",
			in:    &ctrlv1.NetworkPolicy{Mode: denyAll, Allow: []string{"10.0.0.0/8"}},
			field: prefix + ".allow",
		},
		{
			name:  "unspecified with deny",
			in:    &ctrlv1.NetworkPolicy{Deny: []string{"10.0.0.0/8"}},
			field: prefix + ".deny",
		},
		{
			name:  "DENY_ALL with egresses",
			in:    &ctrlv1.NetworkPolicy{Mode: denyAll, Egresses: []*ctrlv1.NetworkPolicyEgress{egress("eg", "10.0.0.0/8")}},
			field: prefix + ".egresses",
		},
		{
			name:  "DENY_ALL with resolvers",
			in:    &ctrlv1.NetworkPolicy{Mode: denyAll, Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs", direct())}},
			field: prefix + ".resolvers",
		},
		{
			name:  "DENY_ALL with an invalid entry reports DENY_ALL",
			in:    &ctrlv1.NetworkPolicy{Mode: denyAll, Allow: []string{"nonsense"}},
			field: prefix + ".allow",
		},
		{
			name: "two egresses",
			in: &ctrlv1.NetworkPolicy{Mode: publicInternet, Egresses: []*ctrlv1.NetworkPolicyEgress{
				egress("a", "10.0.0.0/8"), egress("b", "172.16.0.0/12"),
			}},
			field: prefix + ".egresses",
		},
		{
			name:  "egress without id",
			in:    &ctrlv1.NetworkPolicy{Mode: publicInternet, Egresses: []*ctrlv1.NetworkPolicyEgress{egress("", "10.0.0.0/8")}},
			field: prefix + ".egresses[0].egress_id",
		},
		{
			name:  "nil egress entry",
			in:    &ctrlv1.NetworkPolicy{Mode: publicInternet, Egresses: []*ctrlv1.NetworkPolicyEgress{nil}},
			field: prefix + ".egresses[0].egress_id",
		},
		{
			name:  "egress without destinations",
			in:    &ctrlv1.NetworkPolicy{Mode: publicInternet, Egresses: []*ctrlv1.NetworkPolicyEgress{egress("eg")}},
			field: prefix + ".egresses[0].destinations",
		},
		{
			name:  "egress with 257 destinations",
			in:    &ctrlv1.NetworkPolicy{Mode: publicInternet, Egresses: []*ctrlv1.NetworkPolicyEgress{egress("eg", tooMany...)}},
			field: prefix + ".egresses[0].destinations",
		},
		{
			name: "two resolvers",
			in: &ctrlv1.NetworkPolicy{Mode: publicInternet, Resolvers: []*ctrlv1.NetworkPolicyResolver{
				resolver("a", direct()), resolver("b", direct()),
			}},
			field: prefix + ".resolvers",
		},
		{
			name:  "resolver without id",
			in:    &ctrlv1.NetworkPolicy{Mode: publicInternet, Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("", direct())}},
			field: prefix + ".resolvers[0].resolver_id",
		},
		{
			name:  "nil resolver entry",
			in:    &ctrlv1.NetworkPolicy{Mode: publicInternet, Resolvers: []*ctrlv1.NetworkPolicyResolver{nil}},
			field: prefix + ".resolvers[0].resolver_id",
		},
		{
			name:  "resolver without path",
			in:    &ctrlv1.NetworkPolicy{Mode: publicInternet, Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs", nil)}},
			field: prefix + ".resolvers[0].path",
		},
		{
			name:  "resolver path with no branch",
			in:    &ctrlv1.NetworkPolicy{Mode: publicInternet, Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs", &ctrlv1.ResolverPath{})}},
			field: prefix + ".resolvers[0].path",
		},
		{
			name:  "resolver path with empty egress_id",
			in:    &ctrlv1.NetworkPolicy{Mode: publicInternet, Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs", viaEgress(""))}},
			field: prefix + ".resolvers[0].path.egress_id",
		},
		{
			name:  "resolver path through an egress not listed",
			in:    &ctrlv1.NetworkPolicy{Mode: publicInternet, Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs", viaEgress("eg"))}},
			field: prefix + ".resolvers[0].path.egress_id",
		},
		{
			name: "resolver path through a different egress",
			in: &ctrlv1.NetworkPolicy{
				Mode:      publicInternet,
				Egresses:  []*ctrlv1.NetworkPolicyEgress{egress("eg-1", "10.0.0.0/8")},
				Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs", viaEgress("eg-2"))},
			},
			field: prefix + ".resolvers[0].path.egress_id",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before *ctrlv1.NetworkPolicy
			if tc.in != nil {
				before = proto.Clone(tc.in).(*ctrlv1.NetworkPolicy)
			}
			got, err := netpolicy.Normalize(prefix, tc.in)
			checkInvalid(t, err, tc.field)
			if tc.in != nil && !proto.Equal(before, tc.in) {
				t.Fatalf("Normalize modified its input")
			}
			if tc.field != "" {
				if got != nil {
					t.Fatalf("failed Normalize returned %v", got)
				}
				return
			}
			if !proto.Equal(got, tc.result) {
				t.Fatalf("Normalize = %v\nwant %v", got, tc.result)
			}
			if got.GetRevision() != 0 {
				t.Fatalf("revision %d, want 0", got.GetRevision())
			}
			if tc.in != nil && got == tc.in {
				t.Fatalf("Normalize returned its input, not a copy")
			}
			// Normalizing is idempotent.
			again, err := netpolicy.Normalize(prefix, got)
			if err != nil || !proto.Equal(again, got) {
				t.Fatalf("renormalize = %v, %v", again, err)
			}
		})
	}
}

// TestNormalizeCopies checks that the result shares no list with the input.
func TestNormalizeCopies(t *testing.T) {
	in := &ctrlv1.NetworkPolicy{
		Mode:     publicInternet,
		Allow:    []string{"10.0.0.0/8"},
		Egresses: []*ctrlv1.NetworkPolicyEgress{egress("eg", "10.0.0.0/8")},
	}
	got, err := netpolicy.Normalize(prefix, in)
	if err != nil {
		t.Fatal(err)
	}
	in.Allow[0] = "changed"
	in.Egresses[0].EgressId = "changed"
	in.Egresses[0].Destinations[0] = "changed"
	if got.Allow[0] != "10.0.0.0/8" || got.Egresses[0].EgressId != "eg" || got.Egresses[0].Destinations[0] != "10.0.0.0/8" {
		t.Fatalf("result shares storage with the input: %v", got)
	}
}

// TestPrefixInField checks that the caller's prefix is used as given.
func TestPrefixInField(t *testing.T) {
	_, err := netpolicy.Normalize("network_policy", &ctrlv1.NetworkPolicy{Mode: publicInternet, Deny: []string{"10.0.0.1/8"}})
	checkInvalid(t, err, "network_policy.deny[0]")
}

func TestSameContent(t *testing.T) {
	base := func() *ctrlv1.NetworkPolicy {
		return &ctrlv1.NetworkPolicy{
			Mode:      publicInternet,
			Revision:  4,
			Allow:     []string{"10.0.0.0/8", "192.0.2.1"},
			Deny:      []string{"0.0.0.0/0"},
			Egresses:  []*ctrlv1.NetworkPolicyEgress{egress("eg", "10.0.0.0/8", "172.16.0.0/12")},
			Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs", viaEgress("eg"))},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(p *ctrlv1.NetworkPolicy)
		same   bool
	}{
		{"identical", func(p *ctrlv1.NetworkPolicy) {}, true},
		{"revision only", func(p *ctrlv1.NetworkPolicy) { p.Revision = 99 }, true},
		{"mode", func(p *ctrlv1.NetworkPolicy) { p.Mode = denyAll }, false},
		{"allow reordered", func(p *ctrlv1.NetworkPolicy) { slices.Reverse(p.Allow) }, false},
		{"allow entry added", func(p *ctrlv1.NetworkPolicy) { p.Allow = append(p.Allow, "192.0.2.2") }, false},
		{"allow duplicated", func(p *ctrlv1.NetworkPolicy) { p.Allow = append(p.Allow, "192.0.2.1") }, false},
		{"allow moved to deny", func(p *ctrlv1.NetworkPolicy) { p.Allow, p.Deny = p.Deny, p.Allow }, false},
		{"deny removed", func(p *ctrlv1.NetworkPolicy) { p.Deny = nil }, false},
		{"egress replaced", func(p *ctrlv1.NetworkPolicy) { p.Egresses[0].EgressId = "eg-2" }, false},
		{"destinations reordered", func(p *ctrlv1.NetworkPolicy) { slices.Reverse(p.Egresses[0].Destinations) }, false},
		{"destinations changed", func(p *ctrlv1.NetworkPolicy) { p.Egresses[0].Destinations[1] = "172.16.0.0/16" }, false},
		{"egress removed", func(p *ctrlv1.NetworkPolicy) { p.Egresses = nil }, false},
		{"resolver replaced", func(p *ctrlv1.NetworkPolicy) { p.Resolvers[0].ResolverId = "rs-2" }, false},
		{"resolver path to direct", func(p *ctrlv1.NetworkPolicy) { p.Resolvers[0].Path = direct() }, false},
		{"resolver path egress changed", func(p *ctrlv1.NetworkPolicy) { p.Resolvers[0].Path = viaEgress("other") }, false},
		{"resolver path emptied", func(p *ctrlv1.NetworkPolicy) { p.Resolvers[0].Path = &ctrlv1.ResolverPath{} }, false},
		{"resolver path removed", func(p *ctrlv1.NetworkPolicy) { p.Resolvers[0].Path = nil }, false},
		{"resolver removed", func(p *ctrlv1.NetworkPolicy) { p.Resolvers = nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := base(), base()
			tc.change(b)
			if got := netpolicy.SameContent(a, b); got != tc.same {
				t.Fatalf("SameContent = %v, want %v", got, tc.same)
			}
			if got := netpolicy.SameContent(b, a); got != tc.same {
				t.Fatalf("SameContent reversed = %v, want %v", got, tc.same)
			}
		})
	}
}

func TestSameContentEdges(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b *ctrlv1.NetworkPolicy
		same bool
	}{
		{"nil and nil", nil, nil, true},
		{"nil and DENY_ALL", nil, &ctrlv1.NetworkPolicy{Mode: denyAll, Revision: 1}, true},
		{"unspecified and DENY_ALL", &ctrlv1.NetworkPolicy{Mode: unspecified}, &ctrlv1.NetworkPolicy{Mode: denyAll}, true},
		{"nil and PUBLIC_INTERNET", nil, &ctrlv1.NetworkPolicy{Mode: publicInternet}, false},
		{
			"empty and nil lists",
			&ctrlv1.NetworkPolicy{Mode: publicInternet, Allow: []string{}, Egresses: []*ctrlv1.NetworkPolicyEgress{}},
			&ctrlv1.NetworkPolicy{Mode: publicInternet},
			true,
		},
		{
			"direct nil and empty message",
			&ctrlv1.NetworkPolicy{Mode: publicInternet, Resolvers: []*ctrlv1.NetworkPolicyResolver{
				resolver("rs", &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_Direct{}}),
			}},
			&ctrlv1.NetworkPolicy{Mode: publicInternet, Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs", direct())}},
			true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := netpolicy.SameContent(tc.a, tc.b); got != tc.same {
				t.Fatalf("SameContent = %v, want %v", got, tc.same)
			}
		})
	}
}

// TestSameCommand checks the spec's promise that two requests differing only
// in revision are the same: they normalise to equal messages.
func TestSameCommand(t *testing.T) {
	mk := func(rev uint64) *ctrlv1.NetworkPolicy {
		return &ctrlv1.NetworkPolicy{Mode: publicInternet, Revision: rev, Allow: []string{"10.0.0.0/8"}}
	}
	a, errA := netpolicy.Normalize(prefix, mk(1))
	b, errB := netpolicy.Normalize(prefix, mk(2))
	if errA != nil || errB != nil || !proto.Equal(a, b) || !netpolicy.SameContent(a, b) {
		t.Fatalf("normalised %v and %v differ (%v, %v)", a, b, errA, errB)
	}
}

func TestReferenced(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        *ctrlv1.NetworkPolicy
		egresses  []string
		resolvers []string
	}{
		{"nil", nil, nil, nil},
		{"DENY_ALL", &ctrlv1.NetworkPolicy{Mode: denyAll}, nil, nil},
		{
			"direct resolver",
			&ctrlv1.NetworkPolicy{
				Mode:      publicInternet,
				Egresses:  []*ctrlv1.NetworkPolicyEgress{egress("eg", "10.0.0.0/8")},
				Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs", direct())},
			},
			[]string{"eg"}, []string{"rs"},
		},
		{
			"resolver through the listed egress, deduplicated",
			&ctrlv1.NetworkPolicy{
				Mode:      publicInternet,
				Egresses:  []*ctrlv1.NetworkPolicyEgress{egress("eg", "10.0.0.0/8")},
				Resolvers: []*ctrlv1.NetworkPolicyResolver{resolver("rs", viaEgress("eg"))},
			},
			[]string{"eg"}, []string{"rs"},
		},
		{
			// Not valid input, but the helpers must still list every id in
			// order of first appearance, once.
			"unnormalized, several",
			&ctrlv1.NetworkPolicy{
				Mode:     publicInternet,
				Egresses: []*ctrlv1.NetworkPolicyEgress{egress("b"), egress("a"), egress("b"), egress("")},
				Resolvers: []*ctrlv1.NetworkPolicyResolver{
					resolver("r2", viaEgress("c")), resolver("r1", direct()), resolver("r2", viaEgress("a")), resolver("", nil),
				},
			},
			[]string{"b", "a", "c"}, []string{"r2", "r1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := netpolicy.ReferencedEgresses(tc.in); !slices.Equal(got, tc.egresses) {
				t.Errorf("ReferencedEgresses = %q, want %q", got, tc.egresses)
			}
			if got := netpolicy.ReferencedResolvers(tc.in); !slices.Equal(got, tc.resolvers) {
				t.Errorf("ReferencedResolvers = %q, want %q", got, tc.resolvers)
			}
		})
	}
}
