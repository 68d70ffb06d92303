// Package usernet is the first network attachment: the VMM's user-mode
// network, isolated. QEMU lays it out with the guest at .15, the gateway at
// .2 and the nameserver at .3 of 10.0.2.0/24; nothing needs root. Isolated
// (QEMU's restrict=on) because slirp would otherwise forward the gateway
// address to the host's own loopback, where ctrl listens, which no network
// policy may reach. That is what NETWORK_POLICY_MODE_DENY_ALL asks; egress
// for PUBLIC_INTERNET (tap + nftables, or a user-space stack) is not built.
package usernet

import (
	"context"
	"net/netip"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot"
)

// The guest's network as QEMU's user-mode network lays it out.
var (
	GuestNetwork    = netip.MustParsePrefix("10.0.2.0/24")
	GuestAddress    = netip.MustParsePrefix("10.0.2.15/24")
	GuestGateway    = netip.MustParseAddr("10.0.2.2")
	GuestNameserver = netip.MustParseAddr("10.0.2.3")
)

// Network is the isolated user-mode network.
type Network struct{}

// New is the isolated user-mode network.
func New() Network { return Network{} }

// Name implements netslot.Network.
func (Network) Name() string { return "usernet" }

// Attach implements netslot.Network. Each execution gets the same layout
// inside its own VMM, so there is nothing to make or undo. It enforces
// DENY_ALL only: a PUBLIC_INTERNET policy would run with no egress at all,
// so it is refused rather than silently left unenforced.
func (Network) Attach(_ context.Context, _ string, policy netslot.Policy) (netslot.Attachment, error) {
	if m := netslot.Mode(policy.Network); m != ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL {
		return nil, &netslot.Unenforceable{Mode: m, Why: "this node gives guests QEMU's isolated user-mode network only; " +
			"egress to the internet (a tap device and nftables, or a user-space network stack) is not built"}
	}
	return attachment{}, nil
}

type attachment struct{}

func (attachment) Device() netslot.Device {
	return netslot.Device{UserMode: &netslot.UserMode{Network: GuestNetwork, Isolated: true}}
}

// Guest implements netslot.Attachment. Nothing answers DNS at the
// nameserver: restrict=on keeps slirp's DNS forwarder from the host's
// resolvers too, so a query would wait for its timeout (NoDNS).
func (attachment) Guest() netslot.Addressing {
	return netslot.Addressing{Address: GuestAddress, Gateway: GuestGateway, Nameserver: GuestNameserver, NoDNS: true}
}

// Apply implements netslot.Attachment: DENY_ALL is all it enforces, and
// under it there is no connection to drain.
func (attachment) Apply(_ context.Context, policy netslot.Policy, _ time.Duration) error {
	if m := netslot.Mode(policy.Network); m != ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL {
		return &netslot.Unenforceable{Mode: m, Why: "this node gives guests QEMU's isolated user-mode network only (--guest-network usernet)"}
	}
	return nil
}

// Draining implements netslot.Attachment.
func (attachment) Draining() uint64 { return 0 }

// EgressDraining implements netslot.Attachment: usernet forwards through
// no Egress.
func (attachment) EgressDraining() []netslot.EgressDraining { return nil }

// EgressFaults implements netslot.Attachment: usernet forwards nowhere.
func (attachment) EgressFaults() []netslot.EgressFault { return nil }

// ResolverFaults implements netslot.Attachment: usernet is DENY_ALL only,
// so it forwards no query.
func (attachment) ResolverFaults() []netslot.ResolverFault { return nil }

// Counters implements netslot.Attachment: zero, because the frames never
// leave the VMM and QEMU counts none of them (HMP's "info usernet" lists
// the open connections only; QMP's query-stats serves KVM's statistics,
// not the network's). The userstack slot, which carries every frame,
// counts them.
func (attachment) Counters() netslot.Counters { return netslot.Counters{} }

// Started implements netslot.Attachment: the network is inside the VMM.
func (attachment) Started(string) {}

func (attachment) Release() error { return nil }
