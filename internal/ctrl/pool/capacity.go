package pool

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/telemetry"
)

// Refusal is why a pool takes no new object of some size.
type Refusal struct {
	Code    connect.Code
	Reason  ctrlv1.FailureReason
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// API is the refusal as an API error at stage.
func (r *Refusal) API(stage ctrlv1.FailureStage) error {
	return apierr.New(r.Code, &ctrlv1.ErrorDetail{Stage: stage, Reason: r.Reason}, "%s", r.Message)
}

// Failure is the refusal as a command's failure at stage.
func (r *Refusal) Failure(stage ctrlv1.FailureStage, now time.Time) *ctrlv1.WorkspaceFailure {
	return &ctrlv1.WorkspaceFailure{Stage: stage, Reason: r.Reason, Message: r.Message, FailedAt: timestamppb.New(now)}
}

// Reserve admits a new object of size bytes in pool, inside the caller's
// transaction, which then stores the object: the object's own record is
// the reservation (the store keeps each pool's sum of them as a counter,
// so this costs the same however many objects the pool holds). It returns the
// refusal when the pool takes no such object: a pool declared lost
// (failed_precondition), one with no capacity set, or one whose capacity
// the object would exceed (resource_exhausted). The pool's row lock
// serialises reservations in one pool across ctrl replicas. A transaction
// that reserves in a pool again (a batch of admissions) is answered from
// its count of what it reserved there, checked once its rows are written
// (store.Tx.ReservedInPool).
func Reserve(tx *store.Tx, pool string, bytes uint64) (*Refusal, error) {
	p, reserved, err := tx.StoragePoolForReservation(pool)
	if errors.Is(err, store.ErrNotFound) {
		p = &store.StoragePool{Name: pool}
	} else if err != nil {
		return nil, err
	}
	switch {
	case p.Lost():
		return &Refusal{Code: connect.CodeFailedPrecondition, Reason: ctrlv1.FailureReason_FAILURE_REASON_CONFLICT,
			Message: fmt.Sprintf("storage pool %q was declared lost: its id never comes back into use", pool)}, nil
	case p.CapacityBytes == 0:
		return &Refusal{Code: connect.CodeResourceExhausted, Reason: ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED,
			Message: fmt.Sprintf("storage pool %q has no capacity set, so it takes no new objects: an operator sets one (kibotos pool set-capacity %s BYTES)", pool, pool)}, nil
	}
	if reserved+bytes > p.CapacityBytes || reserved+bytes < bytes {
		return &Refusal{Code: connect.CodeResourceExhausted, Reason: ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED,
			Message: fmt.Sprintf("storage pool %q has no room for %d bytes: %d of its %d bytes are reserved", pool, bytes, reserved, p.CapacityBytes)}, nil
	}
	// The transaction's next reservation in the pool counts these bytes
	// without reading it again (store.Tx.ReservedInPool).
	tx.ReservedInPool(pool, bytes)
	return nil, nil
}

const kindSetCapacity = "SetStoragePoolCapacity"

// SetStoragePoolCapacity replaces a pool's capacity at the version the
// caller read. It evicts nothing: a capacity below what is reserved only
// stops new objects. A replay answers the pool as it stands now.
func (s *Service) SetStoragePoolCapacity(ctx context.Context, req *operatorv1.SetStoragePoolCapacityRequest) (*operatorv1.SetStoragePoolCapacityResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	if err := checkName("storage_pool", req.GetStoragePool()); err != nil {
		return nil, err
	}
	switch {
	case req.GetExpectedVersion() == 0:
		return nil, apierr.Invalid("expected_version", "is required: the pool version the caller read (StoragePool.version)")
	case req.GetCapacityBytes() == 0:
		return nil, apierr.Invalid("capacity_bytes", "must be greater than zero")
	case req.GetCapacityBytes() > math.MaxInt64:
		return nil, apierr.Invalid("capacity_bytes", "must be at most %d", int64(math.MaxInt64))
	}
	res := &operatorv1.SetStoragePoolCapacityResponse{}
	err := command.Do(ctx, s.store, func(tx *store.Tx) error {
		_, err := command.Admit(tx, s.now(), req.GetCommand().GetCommandId(), kindSetCapacity, req, func() (command.Effect, error) {
			p, err := read(tx, req.GetStoragePool(), true)
			if err != nil {
				return command.Effect{}, err
			}
			switch {
			case p.Lost():
				return command.Effect{}, apierr.Precondition(nil, "storage pool %q was declared lost; it takes no capacity", p.Name)
			case req.GetExpectedVersion() != p.Version:
				return command.Effect{}, apierr.Precondition(nil, "expected_version %d is not storage pool %q's current version %d", req.GetExpectedVersion(), p.Name, p.Version)
			}
			if req.GetCapacityBytes() != p.CapacityBytes {
				if err := tx.SetStoragePoolCapacity(p.Name, req.GetCapacityBytes()); err != nil {
					return command.Effect{}, err
				}
			}
			v, err := readView(tx, p.Name)
			return command.Effect{Target: p.Name, Result: &operatorv1.SetStoragePoolCapacityResponse{Pool: v}}, err
		})
		if err != nil {
			return err
		}
		// New or replayed, the answer is the pool as it stands now.
		res.Pool, err = readView(tx, req.GetStoragePool())
		return err
	})
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(telemetry.WithCommandID(ctx, req.GetCommand().GetCommandId()), "storage pool capacity set", "storage_pool", req.GetStoragePool(), "capacity_bytes", req.GetCapacityBytes(), "version", res.GetPool().GetVersion())
	return res, nil
}
