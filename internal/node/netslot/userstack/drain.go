package userstack

import (
	"io"
	"net"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/kibotos/kibotos/internal/node/netslot/policy"
)

// tcpFlow is one guest TCP connection the slot carries to the world.
type tcpFlow struct {
	flow policy.Flow
	// decision is its path: direct, link DNS, or through which Egress at
	// which of its revisions.
	decision     policy.Decision
	admittedBy   *revision // the policy in force that admitted it
	guest, world net.Conn
	endpoint     tcpip.Endpoint // the guest side's, to reset it

	// guarded by flowSet.mu
	drain *time.Timer // resets it; nil while no revision moves it
	// egressMoved: what drains it is only its Egress's new revision (the
	// policy still sends it through the same Egress), which the
	// Egress's draining revision reports rather than the policy's.
	egressMoved bool
}

func (f *tcpFlow) close() {
	_ = f.guest.Close()
	_ = f.world.Close()
}

// reset ends the flow as a policy that refuses it does: the guest's
// connection is reset (an application reading it sees the end at once,
// which a FIN it may ignore does not give).
func (f *tcpFlow) reset() {
	f.endpoint.Abort()
	f.close()
}

// flowSet is what a slot carries: its TCP flows, which a policy change
// may drain, and its services' sockets, so Close can end them all.
type flowSet struct {
	mu       sync.Mutex
	closed   bool
	services map[io.Closer]struct{}
	tcp      map[*tcpFlow]struct{}
	// latest is the last redecide: a flow an older revision admitted that
	// is added after it (its handshake raced the change) is decided by it.
	latest struct {
		rev   *revision
		drain time.Duration
	}
}

// add tracks a service socket; false (and c closed) once the set is closed.
func (f *flowSet) add(c io.Closer) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		_ = c.Close()
		return false
	}
	if f.services == nil {
		f.services = map[io.Closer]struct{}{}
	}
	f.services[c] = struct{}{}
	return true
}

// addTCP tracks t; false (and t closed) once the set is closed.
func (f *flowSet) addTCP(t *tcpFlow) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		t.close()
		return false
	}
	if f.tcp == nil {
		f.tcp = map[*tcpFlow]struct{}{}
	}
	f.tcp[t] = struct{}{}
	if l := f.latest; l.rev != nil && t.admittedBy.seq < l.rev.seq {
		f.redecideOne(t, l.rev, l.drain)
	}
	return true
}

// removeTCP forgets a flow that ended.
func (f *flowSet) removeTCP(t *tcpFlow) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.drain != nil {
		t.drain.Stop()
	}
	delete(f.tcp, t)
}

// redecide asks rev about every open flow: one it refuses, or sends
// another way (directly instead of through an Egress, through another
// Egress, or through another revision of the same one), keeps its path
// and is reset after drain; one it admits again on its own path stops
// draining.
func (f *flowSet) redecide(rev *revision, drain time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latest.rev, f.latest.drain = rev, drain
	for t := range f.tcp {
		f.redecideOne(t, rev, drain)
	}
}

// redecideOne is redecide of one flow; f.mu is held.
func (f *flowSet) redecideOne(t *tcpFlow, rev *revision, drain time.Duration) {
	now := rev.Decide(t.flow)
	admitted := samePath(t.decision, now)
	switch {
	case admitted && t.drain != nil:
		t.drain.Stop()
		t.drain = nil
	case !admitted && t.drain == nil:
		t.drain = time.AfterFunc(drain, t.reset)
	}
	t.egressMoved = !admitted && onlyEgressRevision(t.decision, now)
}

// samePath: decision now admits a flow the way it was admitted, through
// the same revision of the same Egress when it was forwarded.
func samePath(was, now policy.Decision) bool {
	return now.Kind != policy.Refuse && now.Kind == was.Kind && now.Egress == was.Egress && now.EgressRevision == was.EgressRevision
}

// onlyEgressRevision: both forward through the same Egress, at different
// revisions of it.
func onlyEgressRevision(was, now policy.Decision) bool {
	return was.Kind == policy.Forward && now.Kind == policy.Forward && was.Egress == now.Egress && was.EgressRevision != now.EgressRevision
}

// draining is the earliest policy revision of a flow a later policy
// revision moved and that is being drained, zero when none is. A flow
// only its Egress's new revision moved counts in egressDraining instead.
func (f *flowSet) draining() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var earliest uint64
	for t := range f.tcp {
		if t.drain != nil && !t.egressMoved && (earliest == 0 || t.admittedBy.n < earliest) {
			earliest = t.admittedBy.n
		}
	}
	return earliest
}

// egressDraining is, by egress_id, the earliest revision of each Egress
// whose flows are being drained because the Egress moved to a later one;
// an Egress with none is absent.
func (f *flowSet) egressDraining() map[string]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]uint64{}
	for t := range f.tcp {
		if t.drain == nil || !t.egressMoved {
			continue
		}
		id, r := t.decision.Egress, t.decision.EgressRevision
		if cur, ok := out[id]; !ok || r < cur {
			out[id] = r
		}
	}
	return out
}

func (f *flowSet) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for c := range f.services {
		_ = c.Close()
	}
	for t := range f.tcp {
		if t.drain != nil {
			t.drain.Stop()
		}
		t.close()
	}
	clear(f.services)
	clear(f.tcp)
}
