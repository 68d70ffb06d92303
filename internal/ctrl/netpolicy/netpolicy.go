// Package netpolicy validates and normalises the NetworkPolicy a request
// carries, before anything is stored. It needs no database: whether the
// Egresses and Resolvers a policy names exist (not_found) is the caller's
// check, with ReferencedEgresses and ReferencedResolvers.
//
// Every error is invalid_argument built with apierr.Invalid. Callers pass the
// dotted path of the policy in the request ("spec.network_policy",
// "network_policy"), and errors name the offending element, e.g.
// spec.network_policy.allow[2] or
// spec.network_policy.resolvers[0].path.egress_id.
package netpolicy

import (
	"fmt"
	"slices"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

const (
	// MaxEgresses and MaxResolvers are how many entries egresses and
	// resolvers accept.
	MaxEgresses  = 1
	MaxResolvers = 1
	// MaxDestinations is how many destinations one egresses entry accepts; it
	// needs at least one.
	MaxDestinations = 256
)

const (
	denyAll        = ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL
	publicInternet = ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET
)

// Normalize validates the policy of a request and returns the policy to
// store: a new message holding only the content fields (mode, allow, deny,
// egresses, resolvers) with every list in the order given. A nil policy or an
// unspecified mode is DENY_ALL. revision is zero in the result: the server
// assigns revisions and ignores the one in a request, so two requests that
// differ only there normalise to the same policy. p is not modified.
func Normalize(prefix string, p *ctrlv1.NetworkPolicy) (*ctrlv1.NetworkPolicy, error) {
	mode, err := normalizeMode(prefix, p.GetMode())
	if err != nil {
		return nil, err
	}
	if mode == denyAll {
		if err := checkDenyAllEmpty(prefix, p); err != nil {
			return nil, err
		}
		return &ctrlv1.NetworkPolicy{Mode: denyAll}, nil
	}
	out := &ctrlv1.NetworkPolicy{Mode: mode}
	if out.Allow, err = checkEntries(prefix+".allow", p.GetAllow()); err != nil {
		return nil, err
	}
	if out.Deny, err = checkEntries(prefix+".deny", p.GetDeny()); err != nil {
		return nil, err
	}
	if out.Egresses, err = normalizeEgresses(prefix+".egresses", p.GetEgresses()); err != nil {
		return nil, err
	}
	if out.Resolvers, err = normalizeResolvers(prefix+".resolvers", p.GetResolvers(), out.Egresses); err != nil {
		return nil, err
	}
	return out, nil
}

// normalizeMode maps UNSPECIFIED to DENY_ALL and refuses numbers the API does
// not define: an unknown mode cannot be enforced, so it must not be stored.
func normalizeMode(prefix string, m ctrlv1.NetworkPolicyMode) (ctrlv1.NetworkPolicyMode, error) {
	switch m {
	case ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_UNSPECIFIED:
		return denyAll, nil
	case denyAll, publicInternet:
		return m, nil
	}
	return 0, apierr.Invalid(prefix+".mode", "unknown mode %d", int32(m))
}

// checkDenyAllEmpty refuses entries under DENY_ALL rather than dropping them:
// a caller who sent them expected them to act, and they would not.
func checkDenyAllEmpty(prefix string, p *ctrlv1.NetworkPolicy) error {
	for _, f := range []struct {
		name string
		n    int
	}{
		{"allow", len(p.GetAllow())},
		{"deny", len(p.GetDeny())},
		{"egresses", len(p.GetEgresses())},
		{"resolvers", len(p.GetResolvers())},
	} {
		if f.n > 0 {
			return apierr.Invalid(prefix+"."+f.name, "DENY_ALL accepts no entries; it has %d", f.n)
		}
	}
	return nil
}

// checkEntries checks each address or CIDR of a list and returns a copy of
// the list, nil when empty.
func checkEntries(field string, entries []string) ([]string, error) {
	for i, e := range entries {
		if _, err := ParseEntry(e); err != nil {
			return nil, apierr.Invalid(index(field, i), "%v", err)
		}
	}
	return cloneOrNil(entries), nil
}

func normalizeEgresses(field string, in []*ctrlv1.NetworkPolicyEgress) ([]*ctrlv1.NetworkPolicyEgress, error) {
	if len(in) > MaxEgresses {
		return nil, apierr.Invalid(field, "has %d entries; at most %d is accepted", len(in), MaxEgresses)
	}
	var out []*ctrlv1.NetworkPolicyEgress
	for i, e := range in {
		f := index(field, i)
		if e.GetEgressId() == "" {
			return nil, apierr.Invalid(f+".egress_id", "is required")
		}
		n := len(e.GetDestinations())
		if n == 0 || n > MaxDestinations {
			return nil, apierr.Invalid(f+".destinations", "has %d entries; 1 to %d are required", n, MaxDestinations)
		}
		dests, err := checkEntries(f+".destinations", e.GetDestinations())
		if err != nil {
			return nil, err
		}
		out = append(out, &ctrlv1.NetworkPolicyEgress{EgressId: e.GetEgressId(), Destinations: dests})
	}
	return out, nil
}

// normalizeResolvers checks the resolvers entries; egresses is the policy's
// already checked egresses list, which a path's egress_id must name.
func normalizeResolvers(field string, in []*ctrlv1.NetworkPolicyResolver, egresses []*ctrlv1.NetworkPolicyEgress) ([]*ctrlv1.NetworkPolicyResolver, error) {
	if len(in) > MaxResolvers {
		return nil, apierr.Invalid(field, "has %d entries; at most %d is accepted", len(in), MaxResolvers)
	}
	var out []*ctrlv1.NetworkPolicyResolver
	for i, r := range in {
		f := index(field, i)
		if r.GetResolverId() == "" {
			return nil, apierr.Invalid(f+".resolver_id", "is required")
		}
		path, err := normalizePath(f+".path", r.GetPath(), egresses)
		if err != nil {
			return nil, err
		}
		out = append(out, &ctrlv1.NetworkPolicyResolver{ResolverId: r.GetResolverId(), Path: path})
	}
	return out, nil
}

// normalizePath checks that exactly one branch of a ResolverPath is selected
// and returns a fresh copy of it.
func normalizePath(field string, p *ctrlv1.ResolverPath, egresses []*ctrlv1.NetworkPolicyEgress) (*ctrlv1.ResolverPath, error) {
	if p == nil {
		return nil, apierr.Invalid(field, "is required")
	}
	switch k := p.GetKind().(type) {
	case *ctrlv1.ResolverPath_Direct:
		// A nil Direct is still the selected branch on the wire; store it
		// as the empty message so that it compares and marshals the same.
		return directPath(), nil
	case *ctrlv1.ResolverPath_EgressId:
		id := k.EgressId
		if id == "" {
			return nil, apierr.Invalid(field+".egress_id", "must not be empty")
		}
		if !slices.ContainsFunc(egresses, func(e *ctrlv1.NetworkPolicyEgress) bool { return e.GetEgressId() == id }) {
			return nil, apierr.Invalid(field+".egress_id", "egress %q is not listed in the policy's egresses", id)
		}
		return &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_EgressId{EgressId: id}}, nil
	}
	return nil, apierr.Invalid(field, "exactly one of direct or egress_id must be set")
}

func directPath() *ctrlv1.ResolverPath {
	return &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_Direct{Direct: &ctrlv1.ResolverDirectPath{}}}
}

// SameContent reports whether two normalized policies have the same content:
// mode, allow, deny, egresses and resolvers, each list in order, since the
// server keeps lists as given and a reordering is a content change. revision
// is ignored. An unspecified mode counts as DENY_ALL and a nil policy as the
// DENY_ALL policy, so the answer holds for unnormalized input too.
func SameContent(a, b *ctrlv1.NetworkPolicy) bool {
	return effectiveMode(a) == effectiveMode(b) &&
		slices.Equal(a.GetAllow(), b.GetAllow()) &&
		slices.Equal(a.GetDeny(), b.GetDeny()) &&
		slices.EqualFunc(a.GetEgresses(), b.GetEgresses(), sameEgress) &&
		slices.EqualFunc(a.GetResolvers(), b.GetResolvers(), sameResolver)
}

func effectiveMode(p *ctrlv1.NetworkPolicy) ctrlv1.NetworkPolicyMode {
	if m := p.GetMode(); m != ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_UNSPECIFIED {
		return m
	}
	return denyAll
}

func sameEgress(a, b *ctrlv1.NetworkPolicyEgress) bool {
	return a.GetEgressId() == b.GetEgressId() && slices.Equal(a.GetDestinations(), b.GetDestinations())
}

func sameResolver(a, b *ctrlv1.NetworkPolicyResolver) bool {
	return a.GetResolverId() == b.GetResolverId() && samePath(a.GetPath(), b.GetPath())
}

// samePath compares the selected branch, not the Go representation: a nil
// and an empty ResolverDirectPath are the same direct path.
func samePath(a, b *ctrlv1.ResolverPath) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	switch ka := a.GetKind().(type) {
	case *ctrlv1.ResolverPath_Direct:
		_, ok := b.GetKind().(*ctrlv1.ResolverPath_Direct)
		return ok
	case *ctrlv1.ResolverPath_EgressId:
		kb, ok := b.GetKind().(*ctrlv1.ResolverPath_EgressId)
		return ok && ka.EgressId == kb.EgressId
	default:
		return b.GetKind() == nil
	}
}

// ReferencedEgresses lists the Egress ids the policy names, in egresses and
// in resolver paths, first occurrence first and without repeats, so the
// caller can check that each exists.
func ReferencedEgresses(p *ctrlv1.NetworkPolicy) []string {
	var ids []string
	for _, e := range p.GetEgresses() {
		ids = appendID(ids, e.GetEgressId())
	}
	for _, r := range p.GetResolvers() {
		ids = appendID(ids, r.GetPath().GetEgressId())
	}
	return ids
}

// ReferencedResolvers lists the Resolver ids the policy names, first
// occurrence first and without repeats.
func ReferencedResolvers(p *ctrlv1.NetworkPolicy) []string {
	var ids []string
	for _, r := range p.GetResolvers() {
		ids = appendID(ids, r.GetResolverId())
	}
	return ids
}

func appendID(ids []string, id string) []string {
	if id == "" || slices.Contains(ids, id) {
		return ids
	}
	return append(ids, id)
}

func index(field string, i int) string {
	return fmt.Sprintf("%s[%d]", field, i)
}

func cloneOrNil(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}
