package userstack

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/egress"
	"github.com/kibotos/kibotos/internal/node/netslot/policy"
)

// SocketName is the stream socket QEMU listens on in an execution's run
// directory.
const SocketName = "net.sock"

// NetworkConfig is what the node gives its slots.
type NetworkConfig struct {
	Uplink Uplink
	// Own lists ctrl's addresses and the node's own, which the hard deny
	// refuses.
	Own []netip.Addr
	// Resolvers are the deployment resolvers (--resolver), in order. The
	// first decides the family of the link DNS address: GatewayV4, or
	// GatewayV6 (fe80::1) when it is IPv6.
	Resolvers []netip.AddrPort
	// RootCAs verifies the TLS of Egress endpoints and of tls and https
	// Resolvers; nil is the host's pool.
	RootCAs *x509.CertPool
	Log     *slog.Logger
}

// Network is a slot per execution: a netslot.Network.
type Network struct {
	cfg NetworkConfig

	mu    sync.Mutex
	slots map[string]*attachment
}

// NewNetwork checks cfg and makes the network.
func NewNetwork(cfg NetworkConfig) (*Network, error) {
	if cfg.Uplink == nil {
		return nil, errors.New("userstack: a network needs an uplink")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Network{cfg: cfg, slots: map[string]*attachment{}}, nil
}

// LinkDNS is the link DNS address of every slot: the gateway address in
// the family of the first deployment resolver (IPv4 when there is none).
// Only it is the guest's nameserver; port 53 of the other gateway address
// is the slot's own address like any other, refused.
func (n *Network) LinkDNS() netip.Addr {
	if len(n.cfg.Resolvers) > 0 && !n.cfg.Resolvers[0].Addr().Unmap().Is4() {
		return GatewayV6
	}
	return GatewayV4
}

// Name implements netslot.Network.
func (*Network) Name() string { return "userstack" }

// Attach implements netslot.Network: the slot of instanceID, made on the
// first Attach and given policy on each (the next one's new flows follow
// it). A policy the engine cannot compile is *netslot.Unenforceable.
func (n *Network) Attach(_ context.Context, instanceID string, pol netslot.Policy) (netslot.Attachment, error) {
	p, dialers, r, err := n.compile(pol)
	if err != nil {
		return nil, err
	}
	rev := pol.Network.GetRevision()
	n.mu.Lock()
	defer n.mu.Unlock()
	if a := n.slots[instanceID]; a != nil {
		a.slot.SetEgresses(dialers)
		a.slot.SetPolicyWith(p, rev, r, 0)
		a.keepEgressFaults(pol.Egresses)
		a.keepResolverFaults(r)
		return a, nil
	}
	log := n.cfg.Log.With("instance_id", instanceID)
	a := &attachment{net: n, id: instanceID, log: log, done: make(chan struct{}), faults: map[string]*netslot.EgressFault{},
		resolverFaults: map[string]*netslot.ResolverFault{}}
	a.keepEgressFaults(pol.Egresses)
	s, err := New(Config{Policy: p, Revision: rev, Uplink: n.cfg.Uplink, Resolvers: n.cfg.Resolvers, Egresses: dialers,
		EgressResult: a.egressResult, Resolver: r, ResolverResult: a.resolverResult, Log: log})
	if err != nil {
		return nil, err
	}
	a.slot = s
	n.slots[instanceID] = a
	return a, nil
}

// compile is pol as this node's slots enforce it, with a dialer for each
// Egress it names and the Resolver its link DNS address forwards to (nil:
// none); a policy they cannot enforce is *netslot.Unenforceable.
func (n *Network) compile(pol netslot.Policy) (*policy.Policy, map[string]EgressDialer, *Resolver, error) {
	unenforceable := func(err error) error {
		return &netslot.Unenforceable{Mode: netslot.Mode(pol.Network), Why: err.Error()}
	}
	refs := map[string]policy.EgressRef{}
	dialers := map[string]EgressDialer{}
	for _, e := range pol.Egresses {
		d, err := egress.New(egress.Config{
			Spec:    e.GetSpec(),
			RootCAs: n.cfg.RootCAs,
			Lookup:  net.DefaultResolver.LookupNetIP,
			Check:   policy.DialCheck(n.cfg.Own),
			Dial:    n.cfg.Uplink.DialTCP,
			DialUDP: n.cfg.Uplink.DialUDP,
		})
		if err != nil {
			return nil, nil, nil, unenforceable(fmt.Errorf("egress %s: %w", e.GetEgressId(), err))
		}
		refs[e.GetEgressId()] = policy.EgressRef{Revision: e.GetRevision()}
		dialers[e.GetEgressId()] = d
	}
	resolved := map[string]bool{}
	for _, r := range pol.Resolvers {
		resolved[r.GetResolverId()] = true
	}
	p, err := policy.Compile(pol.Network, policy.Context{Own: n.cfg.Own, LinkDNS: []netip.Addr{n.LinkDNS()}, Egresses: refs, Resolvers: resolved})
	if err != nil {
		return nil, nil, nil, unenforceable(err)
	}
	r, err := n.resolverOf(pol, dialers)
	if err != nil {
		return nil, nil, nil, unenforceable(err)
	}
	return p, dialers, r, nil
}

// attachment is one execution's slot.
type attachment struct {
	net  *Network
	id   string
	slot *Slot
	log  *slog.Logger

	once    sync.Once
	done    chan struct{} // closed by Release
	carried sync.WaitGroup

	mu             sync.Mutex
	faults         map[string]*netslot.EgressFault   // egress_id → its current run of failures
	named          map[string]bool                   // the egress_ids the policy in force names
	resolverFaults map[string]*netslot.ResolverFault // resolver_id → its entry's current run
}

// egressResult follows each Egress's run of failures: a fault of the
// Egress starts or continues one (a new kind starts a new run), and a
// connection it made clears it. A destination the Egress reports
// unreachable is the Egress working.
func (a *attachment) egressResult(egressID string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.named[egressID] {
		return // a dial of an Egress a later policy dropped (keepEgressFaults)
	}
	var fault *egress.Error
	if !errors.As(err, &fault) {
		if err == nil || errors.Is(err, egress.ErrDestination) {
			delete(a.faults, egressID)
		}
		return
	}
	kind := fault.Kind.Observation()
	if f := a.faults[egressID]; f != nil && f.Kind == kind {
		f.Message = err.Error()
		return
	}
	a.faults[egressID] = &netslot.EgressFault{EgressID: egressID, Kind: kind, Since: time.Now(), Message: err.Error()}
}

// keepEgressFaults notes the Egresses the policy in force names, and drops
// the faults of those it no longer names: the execution forwards through
// them no more, so no connection would ever clear them, and a dial of one
// that ends after the change adds none (egressResult). The reference
// reports "one entry for each Egress the current execution forwards
// through that is failing".
func (a *attachment) keepEgressFaults(egresses []*nodev1.ResolvedEgress) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.named = make(map[string]bool, len(egresses))
	for _, e := range egresses {
		a.named[e.GetEgressId()] = true
	}
	for id := range a.faults {
		if !a.named[id] {
			delete(a.faults, id)
		}
	}
}

// EgressFaults implements netslot.Attachment, ordered by egress_id.
func (a *attachment) EgressFaults() []netslot.EgressFault {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]netslot.EgressFault, 0, len(a.faults))
	for _, f := range a.faults {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(x, y netslot.EgressFault) int { return strings.Compare(x.EgressID, y.EgressID) })
	return out
}

// Device implements netslot.Attachment.
func (*attachment) Device() netslot.Device {
	return netslot.Device{Stream: &netslot.Stream{Name: SocketName}}
}

// Guest implements netslot.Attachment: the nameserver is the link DNS
// address, answered by the slot (REFUSED at once under DENY_ALL).
func (a *attachment) Guest() netslot.Addressing {
	return netslot.Addressing{Address: GuestV4, Gateway: GatewayV4, Nameserver: a.net.LinkDNS(), AddressV6: GuestV6, GatewayV6: GatewayV6}
}

// Apply implements netslot.Attachment.
// The new dialers are in place before the policy that names them, so no
// new flow is forwarded to an Egress the slot cannot dial.
func (a *attachment) Apply(_ context.Context, pol netslot.Policy, drain time.Duration) error {
	p, dialers, r, err := a.net.compile(pol)
	if err != nil {
		return err
	}
	a.slot.SetEgresses(dialers)
	a.slot.SetPolicyWith(p, pol.Network.GetRevision(), r, drain)
	a.keepEgressFaults(pol.Egresses)
	a.keepResolverFaults(r)
	return nil
}

// Draining implements netslot.Attachment.
func (a *attachment) Draining() uint64 { return a.slot.Draining() }

// EgressDraining implements netslot.Attachment.
func (a *attachment) EgressDraining() []netslot.EgressDraining {
	var out []netslot.EgressDraining
	for id, r := range a.slot.EgressDraining() {
		out = append(out, netslot.EgressDraining{EgressID: id, Revision: r})
	}
	slices.SortFunc(out, func(x, y netslot.EgressDraining) int { return strings.Compare(x.EgressID, y.EgressID) })
	return out
}

// Counters implements netslot.Attachment: the slot's count of the frames
// it carried.
func (a *attachment) Counters() netslot.Counters { return a.slot.Counters() }

// Started implements netslot.Attachment: it connects to QEMU's socket in
// runDir, and again whenever the connection ends, until Release.
func (a *attachment) Started(runDir string) {
	a.once.Do(func() {
		a.carried.Add(1)
		go func() {
			defer a.carried.Done()
			a.carry(runDir)
		}()
	})
}

// Release implements netslot.Attachment.
func (a *attachment) Release() error {
	a.net.mu.Lock()
	if a.net.slots[a.id] == a {
		delete(a.net.slots, a.id)
	}
	a.net.mu.Unlock()
	select {
	case <-a.done:
		return nil
	default:
		close(a.done)
	}
	err := a.slot.Close()
	a.carried.Wait()
	return err
}

// carry serves the slot on QEMU's stream while the VM runs: QEMU makes its
// socket as it starts and listens again after a connection ends.
func (a *attachment) carry(runDir string) {
	wait := 50 * time.Millisecond
	for {
		conn, err := dialStream(runDir)
		if err == nil {
			wait = 50 * time.Millisecond
			if err := a.slot.Serve(conn); err != nil {
				a.log.Warn("network slot: the stream ended", "err", err)
			}
		}
		select {
		case <-a.done:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// dialStream connects to the socket in runDir through a descriptor of the
// directory, so the path stays short whatever runDir's length.
func dialStream(runDir string) (net.Conn, error) {
	dir, err := os.Open(runDir)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return net.Dial("unix", filepath.Join(fmt.Sprintf("/proc/self/fd/%d", dir.Fd()), SocketName))
}
