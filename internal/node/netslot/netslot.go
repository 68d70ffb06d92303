// Package netslot is the node's seam for an execution's network: a
// Network attaches one execution under its Workspace's network policy and
// tells the VM provider what backs the guest's network device and how the
// guest addresses itself. The node core sees only this package; the
// implementations (usernet, the VMM's own isolated user-mode network, and
// userstack, a user-space network stack per execution in the node) are
// chosen by the wiring (internal/cli), as VM providers are.
package netslot

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
)

// Network makes the network attachments of executions.
type Network interface {
	// Name says which implementation it is, for logs.
	Name() string
	// Attach prepares the network of execution instanceID under policy (a
	// nil NetworkPolicy is DENY_ALL, what an unspecified mode selects). It
	// is idempotent: a second Attach of the same instance gives the same
	// attachment. A policy the implementation cannot enforce is an
	// *Unenforceable error: the start fails instead of running with less
	// than it asked.
	Attach(ctx context.Context, instanceID string, policy Policy) (Attachment, error)
}

// Policy is what an attachment enforces: the Workspace's NetworkPolicy,
// the Egresses it forwards through and the Resolvers its link DNS address
// forwards to, as ctrl resolved them.
type Policy struct {
	Network   *ctrlv1.NetworkPolicy
	Egresses  []*nodev1.ResolvedEgress
	Resolvers []*nodev1.ResolvedResolver
}

// Attachment is one execution's network.
type Attachment interface {
	// Device is what the provider backs the guest's network device with.
	Device() Device
	// Guest is the addressing the guest configures on that device.
	Guest() Addressing
	// Started is called once the execution's VM runs in runDir: after its
	// boot, and when an agent starting finds it running. An attachment
	// whose device is a Stream connects to it then (and again, should the
	// connection end while the VM runs).
	Started(runDir string)
	// Apply puts a new revision of the policy in force for the running
	// execution: new flows follow it once Apply returned; an open
	// connection it refuses is closed after drain. A policy the
	// implementation cannot apply is an *Unenforceable error and leaves
	// the one in force.
	Apply(ctx context.Context, policy Policy, drain time.Duration) error
	// Draining is the earliest policy revision whose connections are still
	// open though a later revision refused them (they close when their
	// drain ends); zero when none are.
	Draining() uint64
	// EgressDraining are the Egresses whose connections of an earlier
	// revision are still open (they close when the drain of the update
	// that moved the Egress on ends), ordered by egress_id.
	EgressDraining() []EgressDraining
	// EgressFaults are the Egresses whose connections fail now, each with
	// the run of failures it is in; an Egress's next success clears it.
	EgressFaults() []EgressFault
	// ResolverFaults are the entries of the policy's resolvers whose
	// upstream fails now, each with the run of failures it is in; the
	// entry's next answered query clears it.
	ResolverFaults() []ResolverFault
	// Counters are the guest's traffic through the attachment since it was
	// made (MetricsSample's network counters), as the host counts it.
	Counters() Counters
	// Release undoes what Attach made; it is idempotent.
	Release() error
}

// Device is one of the kinds of backing a provider may offer; exactly one
// field is set. A provider that does not offer the kind fails the start.
type Device struct {
	// UserMode is the VMM's own user-mode network stack (QEMU's slirp).
	UserMode *UserMode
	// Stream is a stream socket the VMM listens on and carries the
	// guest's Ethernet frames over (QEMU's -netdev stream, server=on).
	Stream *Stream
}

// Stream is where the VMM listens for the attachment's connection.
type Stream struct {
	// Name is the socket's file name in the run directory: relative,
	// because a socket path is limited to 107 bytes and run directories
	// nest deep.
	Name string
}

// UserMode is a network inside the VMM process.
type UserMode struct {
	// Network is the guest's subnet.
	Network netip.Prefix
	// Isolated keeps every packet inside the VMM: nothing is forwarded to
	// the host or beyond.
	Isolated bool
}

// Addressing is the guest's IPv4 configuration of its one interface.
type Addressing struct {
	Address    netip.Prefix
	Gateway    netip.Addr
	Nameserver netip.Addr
	// NoDNS is true when nothing answers DNS at Nameserver (DENY_ALL): the
	// guest makes a query to it fail at once instead of time out.
	NoDNS bool
	// AddressV6 and GatewayV6 are the guest's IPv6 address and its
	// default gateway (link-local or in AddressV6); zero: no IPv6.
	AddressV6 netip.Prefix
	GatewayV6 netip.Addr
}

// Counters are the bytes of the Ethernet frames (their headers included,
// as the guest's own interface counts them) the guest received and sent.
// An attachment made by a node agent that restarted counts from its start:
// the counts live in the agent, and a restart makes the attachment anew.
type Counters struct {
	Received, Sent uint64
}

// EgressDraining is an Egress with connections of an earlier revision
// still open: Revision is the earliest of them.
type EgressDraining struct {
	EgressID string
	Revision uint64
}

// EgressFault is the current run of failures of one Egress.
type EgressFault struct {
	EgressID string
	Kind     ctrlv1.EgressObservationKind
	// Since is when the run began, on this host's clock.
	Since   time.Time
	Message string // the latest failure
}

// ResolverFault is the current run of failures of one entry of the
// policy's resolvers.
type ResolverFault struct {
	ResolverID string
	Path       *ctrlv1.ResolverPath
	Kind       ctrlv1.ResolverObservationKind
	// Since is when the run began, on this host's clock.
	Since   time.Time
	Message string // the latest failure
}

// Unenforceable is a policy an implementation cannot apply.
type Unenforceable struct {
	Mode ctrlv1.NetworkPolicyMode
	Why  string
}

func (e *Unenforceable) Error() string {
	return fmt.Sprintf("network policy %v cannot be applied on this node: %s", e.Mode, e.Why)
}

// IsUnenforceable reports whether err is an *Unenforceable.
func IsUnenforceable(err error) bool {
	var u *Unenforceable
	return errors.As(err, &u)
}

// Mode is policy's mode, DENY_ALL when unspecified.
func Mode(policy *ctrlv1.NetworkPolicy) ctrlv1.NetworkPolicyMode {
	if m := policy.GetMode(); m != ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_UNSPECIFIED {
		return m
	}
	return ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL
}
