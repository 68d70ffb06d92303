package fleet

import (
	"context"
	"errors"
	"math"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/telemetry"
)

// Overcommit ratios are in thousandths, each in [MinRatio, MaxRatio].
const (
	MinRatio = 1
	MaxRatio = 16000
)

// settingOvercommit is the settings row of the cluster-wide defaults.
const settingOvercommit = "overcommit_defaults"

// builtinDefaults are the defaults until an operator sets some: 1x for
// both, version 1, no updated_at.
func builtinDefaults() *operatorv1.OvercommitDefaults {
	return &operatorv1.OvercommitDefaults{CpuThousandths: 1000, MemoryThousandths: 1000, Version: 1}
}

// readDefaults reads the cluster-wide defaults and the stored bytes they
// came from (nil for the built-in ones).
func readDefaults(tx *store.Tx) (*operatorv1.OvercommitDefaults, []byte, error) {
	b, err := tx.Setting(settingOvercommit)
	if errors.Is(err, store.ErrNotFound) {
		return builtinDefaults(), nil, nil
	} else if err != nil {
		return nil, nil, err
	}
	d := &operatorv1.OvercommitDefaults{}
	return d, b, proto.Unmarshal(b, d)
}

func ratiosOf(d *operatorv1.OvercommitDefaults) store.Ratios {
	return store.Ratios{CPU: d.GetCpuThousandths(), Memory: d.GetMemoryThousandths()}
}

// checkRatio refuses a ratio outside [1, 16000], naming its field.
func checkRatio(field string, v uint32) error {
	if v < MinRatio || v > MaxRatio {
		return apierr.Invalid(field, "must lie in [%d, %d] thousandths (1000 is 1x); got %d", MinRatio, MaxRatio, v)
	}
	return nil
}

// GetOvercommitDefaults returns the cluster-wide ratios.
func (f *Fleet) GetOvercommitDefaults(ctx context.Context, _ *operatorv1.GetOvercommitDefaultsRequest) (*operatorv1.GetOvercommitDefaultsResponse, error) {
	res := &operatorv1.GetOvercommitDefaultsResponse{}
	err := f.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		res.Defaults, _, err = readDefaults(tx)
		return err
	})
	return res, err
}

// SetOvercommitDefaults replaces both cluster-wide ratios at the version
// the caller read. The next placement uses them; nothing placed is
// evicted. The same ratios again change nothing, not even the version.
func (f *Fleet) SetOvercommitDefaults(ctx context.Context, req *operatorv1.SetOvercommitDefaultsRequest) (*operatorv1.SetOvercommitDefaultsResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	if err := checkRatio("cpu_thousandths", req.GetCpuThousandths()); err != nil {
		return nil, err
	}
	if err := checkRatio("memory_thousandths", req.GetMemoryThousandths()); err != nil {
		return nil, err
	}
	var out proto.Message
	err := command.Do(ctx, f.store, func(tx *store.Tx) error {
		now := f.now()
		var err error
		out, err = command.Admit(tx, now, req.GetCommand().GetCommandId(), "SetOvercommitDefaults", req, func() (command.Effect, error) {
			d, err := f.replaceDefaults(tx, req)
			return command.Effect{Target: settingOvercommit, Result: &operatorv1.SetOvercommitDefaultsResponse{Defaults: d}}, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	res := out.(*operatorv1.SetOvercommitDefaultsResponse)
	f.log.InfoContext(telemetry.WithCommandID(ctx, req.GetCommand().GetCommandId()), "overcommit defaults set", "cpu_thousandths", res.GetDefaults().GetCpuThousandths(),
		"memory_thousandths", res.GetDefaults().GetMemoryThousandths(), "version", res.GetDefaults().GetVersion())
	_ = f.waker.WakeWaiting(context.WithoutCancel(ctx)) // placements waiting for room may fit now
	return res, nil
}

func (f *Fleet) replaceDefaults(tx *store.Tx, req *operatorv1.SetOvercommitDefaultsRequest) (*operatorv1.OvercommitDefaults, error) {
	cur, old, err := readDefaults(tx)
	if err != nil {
		return nil, err
	}
	if req.GetExpectedVersion() != cur.GetVersion() {
		return nil, apierr.Precondition(nil, "expected_version %d is not the overcommit defaults' current version %d", req.GetExpectedVersion(), cur.GetVersion())
	}
	if cur.GetCpuThousandths() == req.GetCpuThousandths() && cur.GetMemoryThousandths() == req.GetMemoryThousandths() {
		return cur, nil
	}
	if old == nil {
		// The first change: store the built-in defaults, so the swap below
		// has a row to compare with (two replicas agree on one).
		if old, err = tx.InitSetting(settingOvercommit, mustMarshal(cur)); err != nil {
			return nil, err
		}
	}
	next := &operatorv1.OvercommitDefaults{
		CpuThousandths: req.GetCpuThousandths(), MemoryThousandths: req.GetMemoryThousandths(),
		Version: cur.GetVersion() + 1, UpdatedAt: timestamppb.New(f.now()),
	}
	swapped, err := tx.PutSetting(settingOvercommit, old, mustMarshal(next))
	if err != nil {
		return nil, err
	}
	if !swapped {
		return nil, apierr.Precondition(nil, "the overcommit defaults changed concurrently; read them again")
	}
	return next, nil
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(err) // a message of numbers and a timestamp always marshals
	}
	return b
}

// SetNodeOvercommit replaces one node's overrides; a ratio left out
// clears its override, so the node follows the default again. The
// overrides are part of the registration: a change advances
// registration_version.
func (f *Fleet) SetNodeOvercommit(ctx context.Context, req *operatorv1.SetNodeOvercommitRequest) (*operatorv1.SetNodeOvercommitResponse, error) {
	for _, r := range []struct {
		field string
		v     *uint32
	}{{"cpu_thousandths", req.CpuThousandths}, {"memory_thousandths", req.MemoryThousandths}} {
		if r.v != nil {
			if err := checkRatio(r.field, *r.v); err != nil {
				return nil, err
			}
		}
	}
	expected := req.GetExpectedRegistrationVersion()
	out, err := f.nodeCommand(ctx, req.GetCommand(), "SetNodeOvercommit", req.GetNodeId(), &expected, req,
		func(c *nodeChange) (proto.Message, error) {
			want := overrides(req.CpuThousandths, req.MemoryThousandths)
			if !proto.Equal(want, overrides(ratioOverride(c.n.GetOvercommit().GetCpu()), ratioOverride(c.n.GetOvercommit().GetMemory()))) {
				c.n.Overcommit = want
				c.touched()
				if err := c.tx.PutNode(c.n); err != nil {
					return nil, err
				}
			}
			n, err := f.viewOf(c)
			return &operatorv1.SetNodeOvercommitResponse{Registration: n}, err
		})
	if err != nil {
		return nil, err
	}
	f.log.InfoContext(telemetry.WithCommandID(ctx, req.GetCommand().GetCommandId()), "node overcommit set", "node_id", req.GetNodeId(), "cpu_thousandths", req.CpuThousandths, "memory_thousandths", req.MemoryThousandths)
	_ = f.waker.WakeWaiting(context.WithoutCancel(ctx))
	return out.(*operatorv1.SetNodeOvercommitResponse), nil
}

// overrides is the stored form of a node's overrides: source NODE for
// each present, nil when there is none.
func overrides(cpu, memory *uint32) *operatorv1.NodeOvercommit {
	if cpu == nil && memory == nil {
		return nil
	}
	o := &operatorv1.NodeOvercommit{}
	if cpu != nil {
		o.Cpu = &operatorv1.OvercommitRatio{Thousandths: *cpu, Source: operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE}
	}
	if memory != nil {
		o.Memory = &operatorv1.OvercommitRatio{Thousandths: *memory, Source: operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE}
	}
	return o
}

func ratioOverride(r *operatorv1.OvercommitRatio) *uint32 {
	if r.GetSource() != operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE {
		return nil
	}
	v := r.GetThousandths()
	return &v
}

// effective is the ratio in effect: the node's override, or the default.
func effective(override *operatorv1.OvercommitRatio, def uint32) *operatorv1.OvercommitRatio {
	if override.GetSource() == operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE {
		return &operatorv1.OvercommitRatio{Thousandths: override.GetThousandths(), Source: operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE}
	}
	return &operatorv1.OvercommitRatio{Thousandths: def, Source: operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_DEFAULT}
}

// scale is amount times a ratio in thousandths, as placement computes it
// (integer division, rounding down).
func scale(amount uint64, thousandths uint32) uint64 {
	return amount * uint64(thousandths) / 1000
}

// fillResources sets n's overcommit (the ratios in effect and their
// source), schedulable (host resources times them; disk never
// overcommitted) and allocated (its Allocations' sum).
func fillResources(n *operatorv1.NodeRegistration, defaults *operatorv1.OvercommitDefaults, allocated store.Resources) {
	n.Overcommit = &operatorv1.NodeOvercommit{
		Cpu:    effective(n.GetOvercommit().GetCpu(), defaults.GetCpuThousandths()),
		Memory: effective(n.GetOvercommit().GetMemory(), defaults.GetMemoryThousandths()),
	}
	host := n.GetObservation().GetResources()
	n.Schedulable = &operatorv1.NodeResources{
		CpuMillis:   uint32(min(scale(uint64(host.GetCpuMillis()), n.Overcommit.Cpu.GetThousandths()), math.MaxUint32)),
		MemoryBytes: scale(host.GetMemoryBytes(), n.Overcommit.Memory.GetThousandths()),
		DiskBytes:   host.GetDiskBytes(),
	}
	n.Allocated = &operatorv1.NodeResources{
		CpuMillis: uint32(min(allocated.CPUMillis, math.MaxUint32)), MemoryBytes: allocated.MemoryBytes, DiskBytes: allocated.DiskBytes,
	}
}
