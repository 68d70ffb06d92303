package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/node/netslot/policy"
	"github.com/kibotos/kibotos/internal/store"
)

// namedReferrers is how many Workspaces a refusal names; maxReferrers how
// many an update's UDP check reads.
const (
	namedReferrers = 20
	maxReferrers   = 1000
)

// CheckPolicyReferences checks, in the caller's transaction, what policy p
// (at field) names: every Egress and Resolver must exist undeleted
// (not_found otherwise), and a udp Resolver sent through an Egress needs
// that Egress's udp_enabled (invalid_argument). It locks the rows it reads,
// so a concurrent delete waits for the caller's write of p and then sees it
// in policy_references.
func CheckPolicyReferences(tx *store.Tx, field string, p *ctrlv1.NetworkPolicy) error {
	egresses := map[string]*ctrlv1.Egress{}
	lookup := func(at, id string) (*ctrlv1.Egress, error) {
		if e, ok := egresses[id]; ok {
			return e, nil
		}
		r, err := tx.GetEgress(id, true)
		if errors.Is(err, store.ErrNotFound) || err == nil && r.Egress.GetDeleted() {
			return nil, notFound(at, "egress", id)
		} else if err != nil {
			return nil, err
		}
		egresses[id] = r.Egress
		return r.Egress, nil
	}
	for i, e := range p.GetEgresses() {
		if _, err := lookup(fmt.Sprintf("%s.egresses[%d].egress_id", field, i), e.GetEgressId()); err != nil {
			return err
		}
	}
	for i, entry := range p.GetResolvers() {
		at := fmt.Sprintf("%s.resolvers[%d]", field, i)
		r, err := tx.GetResolver(entry.GetResolverId(), true)
		if errors.Is(err, store.ErrNotFound) || err == nil && r.GetDeleted() {
			return notFound(at+".resolver_id", "resolver", entry.GetResolverId())
		} else if err != nil {
			return err
		}
		via := entry.GetPath().GetEgressId()
		if via == "" {
			if err := checkDirectUpstream(at+".path.direct", r); err != nil {
				return err
			}
			continue
		}
		e, err := lookup(at+".path.egress_id", via)
		if err != nil {
			return err
		}
		if isUDP(r) && !e.GetSpec().GetUdpEnabled() {
			return apierr.Invalid(at+".path.egress_id",
				"resolver %s is udp and egress %s does not have udp_enabled", r.GetResolverId(), via)
		}
	}
	return nil
}

// notFound is not_found for a record a request names at field.
func notFound(field, kind, id string) error {
	return apierr.New(connect.CodeNotFound, &ctrlv1.ErrorDetail{Reason: ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, Field: field},
		"%s: %s %q not found (or deleted)", field, kind, id)
}

// checkDirectUpstream refuses a direct path to an upstream whose address
// is in the fixed special-purpose ranges: the node's hard deny would refuse
// every query. A host name is checked only on each dial, by the node. The
// table is the node's own (policy.SpecialPurpose), so both agree.
func checkDirectUpstream(field string, r *ctrlv1.Resolver) error {
	host := r.GetSpec().GetAddress()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if u := r.GetSpec().GetUrl(); u != "" {
		parsed, err := url.Parse(u)
		if err != nil {
			return nil // stored specs were validated; nothing to check
		}
		host = parsed.Hostname()
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return nil
	}
	if rng, denied := policy.SpecialPurpose(a); denied {
		return apierr.Invalid(field, "resolver %s is at %s, in %s (%s), which the direct path never reaches: send it through an Egress",
			r.GetResolverId(), a, rng.Name, rng.Source)
	}
	return nil
}

func isUDP(r *ctrlv1.Resolver) bool {
	return r.GetSpec().GetProtocol() == ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP
}

// inUse is failed_precondition naming the Workspaces whose policy names
// the Egress or Resolver (kind store.RefEgress or store.RefResolver) id.
func inUse(tx *store.Tx, kind, id string) error {
	ids, err := tx.PolicyReferrers(kind, id, namedReferrers+1)
	if err != nil || len(ids) == 0 {
		return err
	}
	return inUseBy(kind, id, ids, "it cannot be deleted: remove it from their network policies first")
}

func inUseBy(kind, id string, ids []string, why string) error {
	named := strings.Join(ids[:min(len(ids), namedReferrers)], ", ")
	if len(ids) > namedReferrers {
		named += " and more"
	}
	return apierr.Precondition(&ctrlv1.ErrorDetail{WorkspaceIds: ids[:min(len(ids), namedReferrers)]},
		"%s %s is used by the network policy of workspace %s: %s", kind, id, named, why)
}

// referrersWhere lists the Workspaces among those whose policy names ref
// (kind refKind) with a resolvers entry for which bad holds.
func referrersWhere(tx *store.Tx, refKind, ref string, bad func(entry *ctrlv1.NetworkPolicyResolver) (bool, error)) ([]string, error) {
	ws, err := tx.PolicyReferrers(refKind, ref, maxReferrers)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, wid := range ws {
		w, err := tx.GetWorkspace(wid, false)
		if err != nil {
			return nil, fmt.Errorf("workspace %s of policy_references: %w", wid, err)
		}
		for _, entry := range w.GetSpec().GetNetworkPolicy().GetResolvers() {
			hit, err := bad(entry)
			if err != nil {
				return nil, err
			}
			if hit {
				out = append(out, wid)
				break
			}
		}
	}
	return out, nil
}

// checkUDPUsers refuses an Egress spec without udp_enabled while a policy
// sends a udp Resolver through that Egress: the policy would stop being
// valid under it.
func (s *Service) checkUDPUsers(tx *store.Tx, egressID string, spec *ctrlv1.EgressSpec) error {
	if spec.GetUdpEnabled() {
		return nil
	}
	ws, err := referrersWhere(tx, store.RefEgress, egressID, func(entry *ctrlv1.NetworkPolicyResolver) (bool, error) {
		if entry.GetPath().GetEgressId() != egressID {
			return false, nil
		}
		r, err := tx.GetResolver(entry.GetResolverId(), false)
		if err != nil {
			return false, fmt.Errorf("resolver %s of a policy: %w", entry.GetResolverId(), err)
		}
		return isUDP(r), nil
	})
	if err != nil || len(ws) == 0 {
		return err
	}
	return inUseBy("egress", egressID, ws, "a udp Resolver goes through it, so spec.udp_enabled must stay set")
}

// checkResolverUsers refuses a Resolver spec the policies naming it would
// not be valid under: udp through an Egress without udp_enabled, or a
// direct path to a special-purpose address.
func (s *Service) checkResolverUsers(tx *store.Tx, next *ctrlv1.Resolver) error {
	id := next.GetResolverId()
	ws, err := referrersWhere(tx, store.RefResolver, id, func(entry *ctrlv1.NetworkPolicyResolver) (bool, error) {
		if entry.GetResolverId() != id {
			return false, nil
		}
		via := entry.GetPath().GetEgressId()
		if via == "" {
			return checkDirectUpstream("", next) != nil, nil
		}
		e, err := tx.GetEgress(via, false)
		if err != nil {
			return false, fmt.Errorf("egress %s of a policy: %w", via, err)
		}
		return isUDP(next) && !e.Egress.GetSpec().GetUdpEnabled(), nil
	})
	if err != nil || len(ws) == 0 {
		return err
	}
	return inUseBy("resolver", id, ws, "their policies would not be valid with this spec (udp through an Egress without udp_enabled, or a direct path to a special-purpose address)")
}
