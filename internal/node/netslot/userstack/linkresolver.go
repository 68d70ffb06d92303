package userstack

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/policy"
	"github.com/kibotos/kibotos/internal/node/netslot/resolver"
)

// Resolver is the entry of the policy's resolvers that the link DNS
// address forwards the guest's queries to, in place of the deployment
// resolvers.
type Resolver struct {
	ID   string
	Path *ctrlv1.ResolverPath
	// Upstream asks it (*resolver.Upstream). An Upstream that is an
	// io.Closer is closed once the policy that carried it is replaced and
	// no query uses it any more.
	Upstream Exchanger
}

// Exchanger asks a DNS upstream one query.
type Exchanger interface {
	Exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error)
}

// egressID is the Egress r's queries go through; "" on the direct path.
func (r *Resolver) egressID() string { return r.Path.GetEgressId() }

// heldResolver is a Resolver in force, counted while queries use it so the
// revision that replaces it closes its Upstream only after the last one.
type heldResolver struct {
	*Resolver

	mu      sync.Mutex
	uses    int
	retired bool
}

func hold(r *Resolver) *heldResolver {
	if r == nil {
		return nil
	}
	return &heldResolver{Resolver: r}
}

// acquire counts a query; false once the resolver was replaced (the query
// is then the new revision's).
func (h *heldResolver) acquire() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.retired {
		return false
	}
	h.uses++
	return true
}

func (h *heldResolver) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.uses--
	h.closeIfUnused()
}

// retire takes h out of force: no new query uses it.
func (h *heldResolver) retire() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.retired = true
	h.closeIfUnused()
}

func (h *heldResolver) closeIfUnused() {
	if h.retired && h.uses == 0 {
		if c, ok := h.Upstream.(io.Closer); ok {
			_ = c.Close()
		}
	}
}

// askResolver is r's answer to q, or SERVFAIL when it fails: never the
// deployment resolvers'. Each result is reported (a fault of the Egress on
// the way as the Egress's).
func (s *Slot) askResolver(r *heldResolver, q *dns.Msg) *dns.Msg {
	ctx, cancel := context.WithTimeout(s.ctx, queryTimeout)
	defer cancel()
	reply, err := r.Upstream.Exchange(ctx, q)
	if s.ctx.Err() != nil {
		return new(dns.Msg).SetRcode(q, dns.RcodeServerFailure) // the slot closed: no result to report
	}
	if id := r.egressID(); id != "" && s.onEgress != nil {
		s.onEgress(id, err)
	}
	if s.onResolver != nil {
		s.onResolver(r.Resolver, err)
	}
	if err != nil {
		s.log.Debug("link DNS: the policy's Resolver failed", "resolver_id", r.ID, "err", err)
		return new(dns.Msg).SetRcode(q, dns.RcodeServerFailure)
	}
	reply.Id = q.Id
	return reply
}

// resolverOf is the Resolver pol's link DNS address forwards to, nil when
// its resolvers is empty. Compile checked the entry: at most one, its
// Resolver resolved, its Egress (on that path) one of pol's.
func (n *Network) resolverOf(pol netslot.Policy, dialers map[string]EgressDialer) (*Resolver, error) {
	entries := pol.Network.GetResolvers()
	if len(entries) == 0 {
		return nil, nil
	}
	e := entries[0]
	i := slices.IndexFunc(pol.Resolvers, func(r *nodev1.ResolvedResolver) bool {
		return r.GetResolverId() == e.GetResolverId() && proto.Equal(r.GetPath(), e.GetPath())
	})
	if i < 0 {
		return nil, fmt.Errorf("resolvers[0]: Resolver %q on its path was not resolved", e.GetResolverId())
	}
	var path resolver.Path
	if id := e.GetPath().GetEgressId(); id != "" {
		d, ok := dialers[id]
		if !ok {
			return nil, fmt.Errorf("resolvers[0]: Egress %q has no dialer", id)
		}
		path = resolver.Through(d)
	} else {
		path = resolver.Direct(n.cfg.Uplink, policy.DialCheck(n.cfg.Own))
	}
	u, err := resolver.New(resolver.Config{Spec: pol.Resolvers[i].GetSpec(), Path: path, RootCAs: n.cfg.RootCAs})
	if err != nil {
		return nil, fmt.Errorf("resolvers[0]: Resolver %q: %w", e.GetResolverId(), err)
	}
	return &Resolver{ID: e.GetResolverId(), Path: e.GetPath(), Upstream: u}, nil
}

// sameEntry: a and b are the same entry of a policy's resolvers.
func sameEntry(a, b *Resolver) bool {
	return a != nil && b != nil && a.ID == b.ID && proto.Equal(a.Path, b.Path)
}

// current is the Resolver in force, nil when there is none.
func (s *Slot) current() *Resolver {
	if h := s.policy.Load().dns; h != nil {
		return h.Resolver
	}
	return nil
}

// resolverResult follows the run of failures of the entry in force: an
// upstream fault starts or continues one (a new kind starts a new run), an
// answer (NXDOMAIN and SERVFAIL included) clears it. A fault of the Egress
// on the way is the Egress's (egressResult), and a late result of an entry
// no longer in force is dropped.
func (a *attachment) resolverResult(r *Resolver, err error) {
	if !sameEntry(a.slot.current(), r) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		delete(a.resolverFaults, r.ID)
		return
	}
	k, ok := resolver.KindOf(err)
	if !ok {
		return
	}
	kind := k.Observation()
	if f := a.resolverFaults[r.ID]; f != nil && f.Kind == kind {
		f.Message = err.Error()
		return
	}
	a.resolverFaults[r.ID] = &netslot.ResolverFault{ResolverID: r.ID, Path: r.Path, Kind: kind, Since: time.Now(), Message: err.Error()}
}

// keepResolverFaults forgets the runs of entries other than r, the one a
// new revision put in force.
func (a *attachment) keepResolverFaults(r *Resolver) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, f := range a.resolverFaults {
		if !sameEntry(r, &Resolver{ID: f.ResolverID, Path: f.Path}) {
			delete(a.resolverFaults, id)
		}
	}
}

// ResolverFaults implements netslot.Attachment, ordered by resolver_id.
func (a *attachment) ResolverFaults() []netslot.ResolverFault {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]netslot.ResolverFault, 0, len(a.resolverFaults))
	for _, f := range a.resolverFaults {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(x, y netslot.ResolverFault) int { return strings.Compare(x.ResolverID, y.ResolverID) })
	return out
}
