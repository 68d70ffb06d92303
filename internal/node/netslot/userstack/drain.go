package userstack

import (
	"io"
	"net"
	"sync"
	"time"

	"github.com/kibotos/kibotos/internal/node/netslot/policy"
	"gvisor.dev/gvisor/pkg/tcpip"
)

// tcpFlow is one guest TCP connection the slot carries to the world.
type tcpFlow struct {
	flow         policy.Flow
	decision     policy.Decision // its path: direct, link DNS, or through which Egress
	revision     uint64          // the policy revision that admitted it
	guest, world net.Conn
	endpoint     tcpip.Endpoint // the guest side's, to reset it

	// guarded by flowSet.mu
	drain *time.Timer // closes it; nil while no revision refuses it
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
		p     *policy.Policy
		n     uint64
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
	if l := f.latest; l.p != nil && t.revision < l.n && !samePath(t.decision, l.p.Decide(t.flow)) {
		t.drain = time.AfterFunc(l.drain, t.reset)
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

// redecide asks p about every open flow: one it refuses, or sends another
// way (directly instead of through an Egress, or through another), keeps
// its path and is closed after drain; one it admits again on its own path
// stops draining.
func (f *flowSet) redecide(p *policy.Policy, n uint64, drain time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latest.p, f.latest.n, f.latest.drain = p, n, drain
	for t := range f.tcp {
		admitted := samePath(t.decision, p.Decide(t.flow))
		switch {
		case admitted && t.drain != nil:
			t.drain.Stop()
			t.drain = nil
		case !admitted && t.drain == nil:
			t.drain = time.AfterFunc(drain, t.reset)
		}
	}
}

// samePath: decision now admits a flow the way it was admitted.
func samePath(was, now policy.Decision) bool {
	return now.Kind != policy.Refuse && now.Kind == was.Kind && now.Egress == was.Egress
}

// draining is the earliest revision of a flow being drained, zero when
// none is.
func (f *flowSet) draining() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var earliest uint64
	for t := range f.tcp {
		if t.drain != nil && (earliest == 0 || t.revision < earliest) {
			earliest = t.revision
		}
	}
	return earliest
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
