package egress

import (
	"errors"
	"fmt"
	"strings"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
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
	lookup := func(id string) (*ctrlv1.Egress, error) {
		if e, ok := egresses[id]; ok {
			return e, nil
		}
		r, err := tx.GetEgress(id, true)
		if errors.Is(err, store.ErrNotFound) || err == nil && r.Egress.GetDeleted() {
			return nil, apierr.NotFound("egress", id)
		} else if err != nil {
			return nil, err
		}
		egresses[id] = r.Egress
		return r.Egress, nil
	}
	for _, e := range p.GetEgresses() {
		if _, err := lookup(e.GetEgressId()); err != nil {
			return err
		}
	}
	for i, entry := range p.GetResolvers() {
		r, err := tx.GetResolver(entry.GetResolverId(), true)
		if errors.Is(err, store.ErrNotFound) || err == nil && r.GetDeleted() {
			return apierr.NotFound("resolver", entry.GetResolverId())
		} else if err != nil {
			return err
		}
		via := entry.GetPath().GetEgressId()
		if via == "" {
			continue
		}
		e, err := lookup(via)
		if err != nil {
			return err
		}
		if isUDP(r) && !e.GetSpec().GetUdpEnabled() {
			return apierr.Invalid(fmt.Sprintf("%s.resolvers[%d].path.egress_id", field, i),
				"resolver %s is udp and egress %s does not have udp_enabled", r.GetResolverId(), via)
		}
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

// udpRoutes lists the Workspaces among those whose policy names ref (kind
// refKind) that send a Resolver through an Egress for which bad(resolver,
// egress) holds. It reads each policy's current records.
func udpRoutes(tx *store.Tx, refKind, ref string, bad func(r *ctrlv1.Resolver, e *ctrlv1.Egress) bool) ([]string, error) {
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
		hit, err := routesBadly(tx, w.GetSpec().GetNetworkPolicy(), bad)
		if err != nil {
			return nil, err
		}
		if hit {
			out = append(out, wid)
		}
	}
	return out, nil
}

func routesBadly(tx *store.Tx, p *ctrlv1.NetworkPolicy, bad func(r *ctrlv1.Resolver, e *ctrlv1.Egress) bool) (bool, error) {
	for _, entry := range p.GetResolvers() {
		via := entry.GetPath().GetEgressId()
		if via == "" {
			continue
		}
		r, err := tx.GetResolver(entry.GetResolverId(), false)
		if err != nil {
			return false, fmt.Errorf("resolver %s of a policy: %w", entry.GetResolverId(), err)
		}
		e, err := tx.GetEgress(via, false)
		if err != nil {
			return false, fmt.Errorf("egress %s of a policy: %w", via, err)
		}
		if bad(r, e.Egress) {
			return true, nil
		}
	}
	return false, nil
}

// checkUDPUsers refuses an Egress spec without udp_enabled while a policy
// sends a udp Resolver through that Egress: the policy would stop being
// valid under it.
func (s *Service) checkUDPUsers(tx *store.Tx, egressID string, spec *ctrlv1.EgressSpec) error {
	if spec.GetUdpEnabled() {
		return nil
	}
	ws, err := udpRoutes(tx, store.RefEgress, egressID, func(r *ctrlv1.Resolver, e *ctrlv1.Egress) bool {
		return e.GetEgressId() == egressID && isUDP(r)
	})
	if err != nil || len(ws) == 0 {
		return err
	}
	return inUseBy("egress", egressID, ws, "a udp Resolver goes through it, so spec.udp_enabled must stay set")
}

// checkResolverUsers refuses making a Resolver udp while a policy sends it
// through an Egress without udp_enabled.
func (s *Service) checkResolverUsers(tx *store.Tx, resolverID string, spec *ctrlv1.ResolverSpec) error {
	if spec.GetProtocol() != ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP {
		return nil
	}
	ws, err := udpRoutes(tx, store.RefResolver, resolverID, func(r *ctrlv1.Resolver, e *ctrlv1.Egress) bool {
		return r.GetResolverId() == resolverID && !e.GetSpec().GetUdpEnabled()
	})
	if err != nil || len(ws) == 0 {
		return err
	}
	return inUseBy("resolver", resolverID, ws, "it goes through an Egress without udp_enabled, so it cannot become udp")
}
