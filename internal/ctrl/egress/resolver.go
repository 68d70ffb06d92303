package egress

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/labels"
	"github.com/kibotos/kibotos/internal/store"
)

func getResolver(tx *store.Tx, id string, lock bool) (*ctrlv1.Resolver, error) {
	r, err := tx.GetResolver(id, lock)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierr.NotFound("resolver", id)
	}
	return r, err
}

// CreateResolver stores a new Resolver at revision one.
func (s *Service) CreateResolver(ctx context.Context, req *ctrlv1.CreateResolverRequest) (*ctrlv1.CreateResolverResponse, error) {
	if err := checkResolverSpec("spec", req.GetSpec()); err != nil {
		return nil, err
	}
	if err := labels.ValidateLabels("labels", req.GetLabels()); err != nil {
		return nil, err
	}
	return admit(ctx, s, req.GetCommand(), kindCreateResolver, req, func(tx *store.Tx, now time.Time) (string, *ctrlv1.CreateResolverResponse, error) {
		ts := timestamppb.New(now)
		r := &ctrlv1.Resolver{ResolverId: newID("rsv-"), Spec: req.GetSpec(), Revision: 1, CreatedAt: ts, UpdatedAt: ts, Labels: req.GetLabels()}
		return r.GetResolverId(), &ctrlv1.CreateResolverResponse{Resolver: r}, tx.PutResolver(r)
	})
}

// GetResolver reads one Resolver, deleted ones included.
func (s *Service) GetResolver(ctx context.Context, req *ctrlv1.GetResolverRequest) (*ctrlv1.GetResolverResponse, error) {
	var r *ctrlv1.Resolver
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		r, err = getResolver(tx, req.GetResolverId(), false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.GetResolverResponse{Resolver: r}, nil
}

// ListResolvers pages undeleted Resolvers by resolver_id, narrowed by a
// label selector.
func (s *Service) ListResolvers(ctx context.Context, req *ctrlv1.ListResolversRequest) (*ctrlv1.ListResolversResponse, error) {
	res := &ctrlv1.ListResolversResponse{}
	err := list(ctx, s, req.GetLabelSelector(), req.GetPageSize(), req.GetPageToken(), &res.Resolvers, &res.NextPageToken,
		(*ctrlv1.Resolver).GetResolverId, (*ctrlv1.Resolver).GetLabels, (*store.Tx).ListResolvers)
	return res, err
}

// UpdateResolver replaces a Resolver's spec, CAS on revision. A change
// increases the revision by one and admits its application to every
// running execution whose policy names the Resolver, as UpdateEgress does
// (KindApplyResolverUpdate); the call completes once that is admitted, and
// NetworkPolicyResolverStatus.applied_revision moves as each node confirms.
// The same spec changes nothing.
func (s *Service) UpdateResolver(ctx context.Context, req *ctrlv1.UpdateResolverRequest) (*ctrlv1.UpdateResolverResponse, error) {
	if err := checkResolverSpec("spec", req.GetSpec()); err != nil {
		return nil, err
	}
	followUps := false
	res, err := admit(ctx, s, req.GetCommand(), kindUpdateResolver, req, func(tx *store.Tx, now time.Time) (string, *ctrlv1.UpdateResolverResponse, error) {
		followUps = false // a raced admission runs this again
		r, err := getResolver(tx, req.GetResolverId(), true)
		if err != nil {
			return "", nil, err
		}
		if err := mutable("resolver", r.GetResolverId(), r.GetDeleted(), req.GetExpectedRevision(), r.GetRevision()); err != nil {
			return "", nil, err
		}
		if !proto.Equal(r.GetSpec(), req.GetSpec()) {
			if err := s.checkResolverUsers(tx, &ctrlv1.Resolver{ResolverId: r.GetResolverId(), Spec: req.GetSpec()}); err != nil {
				return "", nil, err
			}
			r.Spec, r.Revision, r.UpdatedAt = req.GetSpec(), r.GetRevision()+1, timestamppb.New(now)
			if err := tx.PutResolver(r); err != nil {
				return "", nil, err
			}
			if followUps, err = admitFollowUps(tx, now, resolverFollowUp(r)); err != nil {
				return "", nil, err
			}
		}
		return r.GetResolverId(), &ctrlv1.UpdateResolverResponse{Resolver: r}, nil
	})
	if err == nil && followUps && s.kick != nil {
		s.kick.Kick()
	}
	return res, err
}

// DeleteResolver marks a Resolver deleted, unless a Workspace's policy
// names it. Deleting a deleted one answers it as it is.
func (s *Service) DeleteResolver(ctx context.Context, req *ctrlv1.DeleteResolverRequest) (*ctrlv1.DeleteResolverResponse, error) {
	return admit(ctx, s, req.GetCommand(), kindDeleteResolver, req, func(tx *store.Tx, now time.Time) (string, *ctrlv1.DeleteResolverResponse, error) {
		r, err := getResolver(tx, req.GetResolverId(), true)
		if err != nil {
			return "", nil, err
		}
		if !r.GetDeleted() {
			if err := inUse(tx, store.RefResolver, r.GetResolverId()); err != nil {
				return "", nil, err
			}
			r.Deleted, r.UpdatedAt = true, timestamppb.New(now)
			if err := tx.PutResolver(r); err != nil {
				return "", nil, err
			}
		}
		return r.GetResolverId(), &ctrlv1.DeleteResolverResponse{Resolver: r}, nil
	})
}
