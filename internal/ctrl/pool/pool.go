// Package pool is the storage pool domain: the pools nodes declare, the
// capacity placement admits new Volumes and writable layers against, the
// operator's declaration that a pool is lost, and the objects living in a
// pool.
//
// A pool is known once a node registration names it (store.PutNode records
// it) and stays known for good. Its attachments are read from the
// registrations of the admitted nodes that declare it. What it reserves is
// summed from the objects living in it: the declared capacity of every
// Volume and writable layer whose deletion was not admitted. An object
// whose deletion was admitted and whose block file a node has not removed
// yet is a removal waiting on the pool (cleanup_count): it takes space but
// reserves nothing.
package pool

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/page"
	"github.com/kibotos/kibotos/internal/store"
)

// Waker wakes the commands waiting for something outside ctrl.
type Waker interface {
	WakeWaiting(ctx context.Context) error
}

// Service is the storage pool domain.
type Service struct {
	store *store.Store
	waker Waker
	log   *slog.Logger
	now   func() time.Time
	// moveWait is the longest a move call waits.
	moveWait time.Duration
	// fleet's nodes copy the block files of moves; kick drives the move
	// commands.
	fleet *fleet.Fleet
	kick  *command.Runner
}

// New makes the pool domain, whole: runner drives its commands (moves
// too) and wakes those waiting for a pool, f's nodes copy the block files
// of moves (the Fleet tells the Service their progress: make it in
// fleet.Deps.Moves to hear it). moveWait is the longest a move call waits for its move to
// settle; zero is MoveWait (one minute).
func New(s *store.Store, runner *command.Runner, f *fleet.Fleet, log *slog.Logger, moveWait time.Duration) *Service {
	if moveWait <= 0 {
		moveWait = MoveWait
	}
	svc := &Service{store: s, waker: runner, log: log, now: time.Now, moveWait: moveWait, fleet: f, kick: runner}
	runner.Handle(kindMoveVolume, svc.runMove)
	runner.Handle(kindMoveLayer, svc.runMove)
	runner.Handle(kindRemoveCopy, svc.runRemoveCopy)
	return svc
}

var namePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`)

// ValidName reports whether name can be a storage pool id.
func ValidName(name string) bool { return namePattern.MatchString(name) }

// checkName validates the storage_pool field of a request.
func checkName(field, name string) error {
	switch {
	case name == "":
		return apierr.Invalid(field, "is required")
	case !ValidName(name):
		return apierr.Invalid(field, "is not a storage pool name")
	}
	return nil
}

// read reads a known pool or answers not_found.
func read(tx *store.Tx, name string, lock bool) (*store.StoragePool, error) {
	p, err := tx.GetStoragePool(name, lock)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierr.NotFound("storage pool", name)
	}
	return p, err
}

// members are the pool's attachments: one for each admitted node that
// declares it (isolated ones included; revoked and retired nodes are no
// members).
func members(nodes []*operatorv1.NodeRegistration, name string) []*operatorv1.StoragePoolAttachment {
	var out []*operatorv1.StoragePoolAttachment
	for _, n := range nodes {
		if n.GetAdmission() != operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED {
			continue
		}
		for _, a := range n.GetStoragePools() {
			if a.GetStoragePool() == name {
				out = append(out, proto.Clone(a).(*operatorv1.StoragePoolAttachment))
			}
		}
	}
	return out
}

// view is the pool as the API shows it.
func view(tx *store.Tx, p *store.StoragePool, nodes []*operatorv1.NodeRegistration) (*operatorv1.StoragePool, error) {
	usage, err := tx.StoragePoolUsage(p.Name)
	if err != nil {
		return nil, err
	}
	held, err := holders(tx, p.Name)
	if err != nil {
		return nil, err
	}
	out := &operatorv1.StoragePool{
		StoragePool: p.Name, Version: p.Version, FirstDeclaredAt: timestamppb.New(p.FirstDeclaredAt),
		ReservedBytes: usage.ReservedBytes, VolumeCount: usage.Volumes, RetainedLayerCount: usage.Layers, CleanupCount: usage.Removals,
		Attachments: members(nodes, p.Name),
	}
	if p.CapacityBytes > 0 {
		out.CapacityBytes = proto.Uint64(p.CapacityBytes)
	}
	if p.Lost() {
		out.LostAt = timestamppb.New(p.LostAt)
		out.ReservedBytes = 0 // a lost pool reserves nothing
	}
	for _, a := range out.Attachments {
		out.DefaultPool = out.DefaultPool || a.GetDefaultPool()
		a.HeldObjectCount = held[a.GetNodeId()]
		if p.Lost() {
			a.Available = false // its id never comes back into use
		}
	}
	return out, nil
}

// readView reads one pool as the API shows it.
func readView(tx *store.Tx, name string) (*operatorv1.StoragePool, error) {
	p, err := read(tx, name, false)
	if err != nil {
		return nil, err
	}
	nodes, err := tx.AllNodes()
	if err != nil {
		return nil, err
	}
	return view(tx, p, nodes)
}

// GetStoragePool reads one pool.
func (s *Service) GetStoragePool(ctx context.Context, req *operatorv1.GetStoragePoolRequest) (*operatorv1.GetStoragePoolResponse, error) {
	if err := checkName("storage_pool", req.GetStoragePool()); err != nil {
		return nil, err
	}
	res := &operatorv1.GetStoragePoolResponse{}
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		res.Pool, err = readView(tx, req.GetStoragePool())
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// ListStoragePools pages every pool ever declared, lost ones included, by
// name.
func (s *Service) ListStoragePools(ctx context.Context, req *operatorv1.ListStoragePoolsRequest) (*operatorv1.ListStoragePoolsResponse, error) {
	after, err := page.After(req.GetPageToken(), "")
	if err != nil {
		return nil, err
	}
	res := &operatorv1.ListStoragePoolsResponse{}
	err = s.store.Tx(ctx, func(tx *store.Tx) error {
		rows, next, err := page.Collect(page.Size(req.GetPageSize()), after, "",
			func(p *store.StoragePool) string { return p.Name },
			func(*store.StoragePool) bool { return true }, tx.ListStoragePools)
		if err != nil {
			return err
		}
		nodes, err := tx.AllNodes()
		if err != nil {
			return err
		}
		for _, p := range rows {
			v, err := view(tx, p, nodes)
			if err != nil {
				return err
			}
			res.Pools = append(res.Pools, v)
		}
		res.NextPageToken = next
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}
