// Package egress is the Egress and Resolver domain: caller-owned proxies and
// DNS upstreams a Workspace's network policy names. It validates and stores
// them, keeps an Egress's password write-only, refuses to delete one a
// policy uses, and checks a policy's references to them.
//
// Every mutation is final at admission. An Egress update that changes the
// Egress stores its drain_seconds with the new revision
// (store.EgressRecord) and, in the same transaction, admits a follow-up
// command (KindApplyEgressUpdate) for each Workspace whose running
// execution forwards through it; the Workspace domain applies those.
package egress

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/labels"
	"github.com/kibotos/kibotos/internal/ctrl/page"
	"github.com/kibotos/kibotos/internal/store"
)

// MaxDrainSeconds bounds UpdateEgressRequest.drain_seconds, as
// UpdateWorkspaceNetworkPolicy bounds its own.
const MaxDrainSeconds = 3600

const (
	kindCreateEgress   = "CreateEgress"
	kindUpdateEgress   = "UpdateEgress"
	kindDeleteEgress   = "DeleteEgress"
	kindCreateResolver = "CreateResolver"
	kindUpdateResolver = "UpdateResolver"
	kindDeleteResolver = "DeleteResolver"
)

// Service is both EgressService and ResolverService.
type Service struct {
	store *store.Store
	now   func() time.Time
	kick  Kicker // nil: the runner polls
}

// New makes the Egress and Resolver domain on s; kick is woken after a
// follow-up command is admitted (nil: the runner finds it at its next poll).
func New(s *store.Store, kick Kicker) *Service { return &Service{store: s, now: time.Now, kick: kick} }

func newID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// admit admits a mutation that is final at once: effect writes it in the
// admitting transaction and returns its target and result.
func admit[R proto.Message](ctx context.Context, s *Service, cmd *ctrlv1.CommandMetadata, kind string, req proto.Message,
	effect func(tx *store.Tx, now time.Time) (string, R, error)) (R, error) {
	var res R
	if err := command.ValidateID("command.command_id", cmd); err != nil {
		return res, err
	}
	now := s.now()
	err := command.Do(ctx, s.store, func(tx *store.Tx) error {
		out, err := command.Admit(tx, now, cmd.GetCommandId(), kind, req, func() (command.Effect, error) {
			target, r, err := effect(tx, now)
			return command.Effect{Target: target, Result: r}, err
		})
		if err == nil {
			res = out.(R)
		}
		return err
	})
	return res, err
}

// commandInput is req as its command is recorded: the password replaced by
// a digest salted with the command id, so that the commands table keeps no
// password (not even one rotated away since) while a replay with another
// password is still other input (already_exists).
func commandInput[M interface {
	proto.Message
	GetSpec() *ctrlv1.EgressSpec
	GetCommand() *ctrlv1.CommandMetadata
}](req M) proto.Message {
	p := req.GetSpec().GetPassword()
	if p == "" {
		return req
	}
	out := proto.Clone(req).(M)
	sum := sha256.Sum256([]byte(out.GetCommand().GetCommandId() + "\x00" + p))
	out.GetSpec().Password = "sha256:" + hex.EncodeToString(sum[:])
	return out
}

// view is e as the API shows it: without its password, saying whether one
// is stored.
func view(e *ctrlv1.Egress) *ctrlv1.Egress {
	out := proto.Clone(e).(*ctrlv1.Egress)
	out.PasswordSet = out.GetSpec().GetPassword() != ""
	if out.Spec != nil {
		out.Spec.Password = ""
	}
	return out
}

func getEgress(tx *store.Tx, id string, lock bool) (*store.EgressRecord, error) {
	r, err := tx.GetEgress(id, lock)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierr.NotFound("egress", id)
	}
	return r, err
}

// CreateEgress stores a new Egress at revision one.
func (s *Service) CreateEgress(ctx context.Context, req *ctrlv1.CreateEgressRequest) (*ctrlv1.CreateEgressResponse, error) {
	if err := checkEgressSpec("spec", req.GetSpec()); err != nil {
		return nil, err
	}
	if err := labels.ValidateLabels("labels", req.GetLabels()); err != nil {
		return nil, err
	}
	return admit(ctx, s, req.GetCommand(), kindCreateEgress, commandInput(req), func(tx *store.Tx, now time.Time) (string, *ctrlv1.CreateEgressResponse, error) {
		ts := timestamppb.New(now)
		e := &ctrlv1.Egress{EgressId: newID("egr-"), Spec: req.GetSpec(), Revision: 1, CreatedAt: ts, UpdatedAt: ts, Labels: req.GetLabels()}
		if err := tx.PutEgress(&store.EgressRecord{Egress: e}); err != nil {
			return "", nil, err
		}
		return e.GetEgressId(), &ctrlv1.CreateEgressResponse{Egress: view(e)}, nil
	})
}

// GetEgress reads one Egress, deleted ones included.
func (s *Service) GetEgress(ctx context.Context, req *ctrlv1.GetEgressRequest) (*ctrlv1.GetEgressResponse, error) {
	var e *store.EgressRecord
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		e, err = getEgress(tx, req.GetEgressId(), false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.GetEgressResponse{Egress: view(e.Egress)}, nil
}

// ListEgresses pages undeleted Egresses by egress_id, narrowed by a label
// selector.
func (s *Service) ListEgresses(ctx context.Context, req *ctrlv1.ListEgressesRequest) (*ctrlv1.ListEgressesResponse, error) {
	res := &ctrlv1.ListEgressesResponse{}
	err := list(ctx, s, req.GetLabelSelector(), req.GetPageSize(), req.GetPageToken(), &res.Egresses, &res.NextPageToken,
		(*ctrlv1.Egress).GetEgressId, (*ctrlv1.Egress).GetLabels, (*store.Tx).ListEgresses)
	for i, e := range res.GetEgresses() {
		res.Egresses[i] = view(e)
	}
	return res, err
}

// list is what both lists share: a label selector and page tokens bound
// to it.
func list[T any](ctx context.Context, s *Service, selector string, size uint32, token string, out *[]T, next *string,
	key func(T) string, labelsOf func(T) map[string]string, fetch func(tx *store.Tx, after string, n int) ([]T, error)) error {
	sel, err := labels.Parse(selector)
	if err != nil {
		return err
	}
	filter := sel.String()
	after, err := page.After(token, filter)
	if err != nil {
		return err
	}
	return s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		*out, *next, err = page.Collect(page.Size(size), after, filter, key,
			func(r T) bool { return sel.Matches(labelsOf(r)) },
			func(after string, n int) ([]T, error) { return fetch(tx, after, n) })
		return err
	})
}

// UpdateEgress replaces an Egress's spec, CAS on revision. A change
// increases the revision by one, stores drain_seconds with it and admits
// its application to every running execution whose policy names the
// Egress (admitFollowUps); the call completes once that is admitted, and
// NetworkPolicyEgressStatus.applied_revision moves as each node confirms.
// The same spec (password included) changes nothing.
func (s *Service) UpdateEgress(ctx context.Context, req *ctrlv1.UpdateEgressRequest) (*ctrlv1.UpdateEgressResponse, error) {
	if err := checkEgressSpec("spec", req.GetSpec()); err != nil {
		return nil, err
	}
	if req.GetDrainSeconds() > MaxDrainSeconds {
		return nil, apierr.Invalid("drain_seconds", "must be at most %d", MaxDrainSeconds)
	}
	followUps := false
	res, err := admit(ctx, s, req.GetCommand(), kindUpdateEgress, commandInput(req), func(tx *store.Tx, now time.Time) (string, *ctrlv1.UpdateEgressResponse, error) {
		followUps = false // a raced admission runs this again
		r, err := getEgress(tx, req.GetEgressId(), true)
		if err != nil {
			return "", nil, err
		}
		e := r.Egress
		if err := mutable("egress", e.GetEgressId(), e.GetDeleted(), req.GetExpectedRevision(), e.GetRevision()); err != nil {
			return "", nil, err
		}
		if !proto.Equal(e.GetSpec(), req.GetSpec()) {
			if err := s.checkUDPUsers(tx, e.GetEgressId(), req.GetSpec()); err != nil {
				return "", nil, err
			}
			e.Spec, e.Revision, e.UpdatedAt = req.GetSpec(), e.GetRevision()+1, timestamppb.New(now)
			r.DrainSeconds = req.GetDrainSeconds()
			if err := tx.PutEgress(r); err != nil {
				return "", nil, err
			}
			if followUps, err = admitFollowUps(tx, now, egressFollowUp(e, req.GetDrainSeconds())); err != nil {
				return "", nil, err
			}
		}
		return e.GetEgressId(), &ctrlv1.UpdateEgressResponse{Egress: view(e)}, nil
	})
	if err == nil && followUps && s.kick != nil {
		s.kick.Kick()
	}
	return res, err
}

// mutable refuses a deleted record and a stale expected revision.
func mutable(kind, id string, deleted bool, expected, current uint64) error {
	if deleted {
		return apierr.Precondition(nil, "%s %s is deleted", kind, id)
	}
	if expected != current {
		return apierr.Precondition(&ctrlv1.ErrorDetail{Field: "expected_revision"},
			"expected_revision %d is stale: the current revision is %d", expected, current)
	}
	return nil
}

// DeleteEgress marks an Egress deleted, unless a Workspace's policy names
// it. Deleting a deleted one answers it as it is.
func (s *Service) DeleteEgress(ctx context.Context, req *ctrlv1.DeleteEgressRequest) (*ctrlv1.DeleteEgressResponse, error) {
	return admit(ctx, s, req.GetCommand(), kindDeleteEgress, req, func(tx *store.Tx, now time.Time) (string, *ctrlv1.DeleteEgressResponse, error) {
		r, err := getEgress(tx, req.GetEgressId(), true)
		if err != nil {
			return "", nil, err
		}
		e := r.Egress
		if !e.GetDeleted() {
			if err := inUse(tx, store.RefEgress, e.GetEgressId()); err != nil {
				return "", nil, err
			}
			e.Deleted, e.UpdatedAt = true, timestamppb.New(now)
			if err := tx.PutEgress(r); err != nil {
				return "", nil, err
			}
		}
		return e.GetEgressId(), &ctrlv1.DeleteEgressResponse{Egress: view(e)}, nil
	})
}
