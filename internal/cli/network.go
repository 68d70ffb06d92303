package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// networkFlags are a NetworkPolicy as a person writes it: a mode, the
// addresses narrowing it and the destinations forwarded through an Egress.
// Resolvers take no flag yet (the node does not forward to them).
type networkFlags struct {
	mode        string
	allow, deny []string
	egresses    []string // EGRESS_ID=DEST[,DEST...]
}

func (f *networkFlags) register(c *cobra.Command, modeHelp string) {
	c.Flags().StringVar(&f.mode, "network", "", modeHelp)
	c.Flags().StringSliceVar(&f.allow, "allow", nil, "with --network public-internet: addresses or CIDRs admitted even when --deny covers them (repeatable)")
	c.Flags().StringSliceVar(&f.deny, "deny", nil, "with --network public-internet: addresses or CIDRs refused (repeatable)")
	c.Flags().StringArrayVar(&f.egresses, "egress", nil, "with --network public-internet: EGRESS_ID=CIDR[,CIDR...], TCP to those destinations leaves through that Egress (kibotos egress create)")
}

// policy is the NetworkPolicy asked for; nil when no flag was given.
func (f *networkFlags) policy() (*ctrlv1.NetworkPolicy, error) {
	if f.mode == "" {
		if len(f.allow) > 0 || len(f.deny) > 0 || len(f.egresses) > 0 {
			return nil, fmt.Errorf("--allow, --deny and --egress narrow a --network mode: give --network public-internet")
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
	return p, nil
}
