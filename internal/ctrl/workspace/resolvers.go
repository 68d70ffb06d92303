package workspace

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// resolvedResolvers are policy's resolvers entries with the Resolvers they
// name as ctrl holds them, for the node whose link DNS address forwards to
// them. Admission checked they exist, and one a policy names cannot be
// deleted.
func resolvedResolvers(tx *store.Tx, policy *ctrlv1.NetworkPolicy) ([]*nodev1.ResolvedResolver, error) {
	var out []*nodev1.ResolvedResolver
	for _, e := range policy.GetResolvers() {
		r, err := tx.GetResolver(e.GetResolverId(), false)
		if err != nil {
			return nil, fmt.Errorf("resolver %s of the network policy: %w", e.GetResolverId(), err)
		}
		out = append(out, &nodev1.ResolvedResolver{ResolverId: e.GetResolverId(), Revision: r.GetRevision(), Spec: r.GetSpec(), Path: e.GetPath()})
	}
	return out, nil
}

// resolverStatuses say, for each resolvers entry of a policy the node
// confirmed, the Resolver revision its queries use: the one ctrl sent.
func resolverStatuses(sent []*nodev1.ResolvedResolver) []*ctrlv1.NetworkPolicyResolverStatus {
	var out []*ctrlv1.NetworkPolicyResolverStatus
	for _, r := range sent {
		out = append(out, &ctrlv1.NetworkPolicyResolverStatus{ResolverId: r.GetResolverId(), Path: r.GetPath(), AppliedRevision: r.GetRevision()})
	}
	return out
}

// resolverObservations are the node's current resolver faults as the
// Workspace reports them: an observation stays as it was (observed_at
// included) while its run of failures goes on, a new run is observed now,
// and an entry the node no longer reports failing has none.
func resolverObservations(prev []*ctrlv1.ResolverObservation, faults []*nodev1.ResolverFault, now time.Time) []*ctrlv1.ResolverObservation {
	var out []*ctrlv1.ResolverObservation
	for _, f := range faults {
		i := slices.IndexFunc(prev, func(o *ctrlv1.ResolverObservation) bool {
			return o.GetResolverId() == f.GetResolverId() && proto.Equal(o.GetPath(), f.GetPath()) && o.GetKind() == f.GetKind() &&
				o.GetFailingSince().AsTime().Equal(f.GetFailingSince().AsTime())
		})
		if i >= 0 {
			out = append(out, prev[i])
			continue
		}
		out = append(out, &ctrlv1.ResolverObservation{ResolverId: f.GetResolverId(), Path: f.GetPath(), Kind: f.GetKind(),
			FailingSince: f.GetFailingSince(), ObservedAt: timestamppb.New(now), Message: f.GetMessage()})
	}
	return out
}
