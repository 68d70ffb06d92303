package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// networkFlags are a NetworkPolicy as a person writes it: a mode and the
// addresses narrowing it. Egresses and Resolvers are not built, so they
// take no flags yet.
type networkFlags struct {
	mode        string
	allow, deny []string
}

func (f *networkFlags) register(c *cobra.Command, modeHelp string) {
	c.Flags().StringVar(&f.mode, "network", "", modeHelp)
	c.Flags().StringSliceVar(&f.allow, "allow", nil, "with --network public-internet: addresses or CIDRs admitted even when --deny covers them (repeatable)")
	c.Flags().StringSliceVar(&f.deny, "deny", nil, "with --network public-internet: addresses or CIDRs refused (repeatable)")
}

// policy is the NetworkPolicy asked for; nil when no flag was given.
func (f *networkFlags) policy() (*ctrlv1.NetworkPolicy, error) {
	if f.mode == "" {
		if len(f.allow) > 0 || len(f.deny) > 0 {
			return nil, fmt.Errorf("--allow and --deny narrow a --network mode: give --network public-internet")
		}
		return nil, nil
	}
	v, ok := ctrlv1.NetworkPolicyMode_value["NETWORK_POLICY_MODE_"+strings.ToUpper(strings.ReplaceAll(f.mode, "-", "_"))]
	if !ok || v == 0 {
		return nil, fmt.Errorf("--network %q: want deny-all or public-internet", f.mode)
	}
	return &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode(v), Allow: f.allow, Deny: f.deny}, nil
}
