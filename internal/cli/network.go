package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// networkFlags are a NetworkPolicy as a person writes it: a mode, the
// addresses narrowing it, the destinations forwarded through an Egress and
// the Resolver the guest's DNS queries go to.
type networkFlags struct {
	mode        string
	allow, deny []string
	egresses    []string // EGRESS_ID=DEST[,DEST...]
	resolvers   []string // RESOLVER_ID[=direct|=egress:EGRESS_ID]
}

func (f *networkFlags) register(c *cobra.Command, modeHelp string) {
	c.Flags().StringVar(&f.mode, "network", "", modeHelp)
	c.Flags().StringSliceVar(&f.allow, "allow", nil, "with --network public-internet: addresses or CIDRs admitted even when --deny covers them (repeatable)")
	c.Flags().StringSliceVar(&f.deny, "deny", nil, "with --network public-internet: addresses or CIDRs refused (repeatable)")
	c.Flags().StringArrayVar(&f.egresses, "egress", nil, "with --network public-internet: EGRESS_ID=CIDR[,CIDR...], TCP to those destinations leaves through that Egress (kibotos egress create)")
	c.Flags().StringArrayVar(&f.resolvers, "resolver", nil, "with --network public-internet: RESOLVER_ID[=direct|=egress:EGRESS_ID], the guest's DNS queries go to that Resolver (kibotos resolver create) instead of the deployment resolvers, directly (the default) or through an Egress of --egress")
}

// policy is the NetworkPolicy asked for; nil when no flag was given.
func (f *networkFlags) policy() (*ctrlv1.NetworkPolicy, error) {
	if f.mode == "" {
		if len(f.allow) > 0 || len(f.deny) > 0 || len(f.egresses) > 0 || len(f.resolvers) > 0 {
			return nil, fmt.Errorf("--allow, --deny, --egress and --resolver narrow a --network mode: give --network public-internet")
		}
		return nil, nil
	}
	v, ok := ctrlv1.NetworkPolicyMode_value["NETWORK_POLICY_MODE_"+strings.ToUpper(strings.ReplaceAll(f.mode, "-", "_"))]
	if !ok || v == 0 {
		return nil, fmt.Errorf("--network %q: want deny-all or public-internet", f.mode)
	}
	p := &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode(v), Allow: f.allow, Deny: f.deny}
	for _, e := range f.egresses {
		id, dests, ok := strings.Cut(e, "=")
		if !ok || id == "" || dests == "" {
			return nil, fmt.Errorf("--egress %q: want EGRESS_ID=CIDR[,CIDR...]", e)
		}
		p.Egresses = append(p.Egresses, &ctrlv1.NetworkPolicyEgress{EgressId: id, Destinations: strings.Split(dests, ",")})
	}
	for _, r := range f.resolvers {
		entry, err := resolverEntry(r)
		if err != nil {
			return nil, err
		}
		p.Resolvers = append(p.Resolvers, entry)
	}
	return p, nil
}

// resolverEntry reads one --resolver: RESOLVER_ID, RESOLVER_ID=direct or
// RESOLVER_ID=egress:EGRESS_ID.
func resolverEntry(v string) (*ctrlv1.NetworkPolicyResolver, error) {
	id, path, _ := strings.Cut(v, "=")
	if id == "" {
		return nil, fmt.Errorf("--resolver %q: want RESOLVER_ID[=direct|=egress:EGRESS_ID]", v)
	}
	if path == "" || path == "direct" {
		return &ctrlv1.NetworkPolicyResolver{ResolverId: id, Path: resolverDirect()}, nil
	}
	egressID, ok := strings.CutPrefix(path, "egress:")
	if !ok || egressID == "" {
		return nil, fmt.Errorf("--resolver %q: the path is direct or egress:EGRESS_ID, not %q", v, path)
	}
	return &ctrlv1.NetworkPolicyResolver{ResolverId: id, Path: &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_EgressId{EgressId: egressID}}}, nil
}

func resolverDirect() *ctrlv1.ResolverPath {
	return &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_Direct{Direct: &ctrlv1.ResolverDirectPath{}}}
}

// resolversText is the policy's resolvers as --resolver takes them.
func resolversText(rs []*ctrlv1.NetworkPolicyResolver) string {
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		path := "direct"
		if id := r.GetPath().GetEgressId(); id != "" {
			path = "egress:" + id
		}
		parts = append(parts, r.GetResolverId()+"="+path)
	}
	return strings.Join(parts, " ")
}
