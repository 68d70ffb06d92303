package fleet

import (
	"errors"
	"fmt"
	"strings"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// Placement is what one execution needs of a node.
type Placement struct {
	// WorkspaceID and InstanceID name the execution the Allocation is for.
	WorkspaceID, InstanceID string
	// CPUMillis and MemoryBytes are what it reserves (its ResourceRequest).
	CPUMillis   uint32
	MemoryBytes uint64
	// Pools are the pools its objects live in; empty names are ignored.
	Pools []string
	// Node, when set, is the only candidate (CreateWorkspaceOnNode,
	// StartWorkspaceOnNode).
	Node string
}

// Placed is the node a placement chose, and that node's own default pool.
type Placed struct {
	NodeID, DefaultPool string
}

// Refusal says why no node took a placement. Reason is RESOURCE_EXHAUSTED
// when some node meets every other constraint but has no room (or its
// memory is tight), UNAVAILABLE otherwise.
type Refusal struct {
	Reason  ctrlv1.FailureReason
	Message string
}

// Failure is the refusal as a placement failure: both reasons are
// retryable, as room frees and nodes come back.
func (r *Refusal) Failure() *ctrlv1.WorkspaceFailure {
	return &ctrlv1.WorkspaceFailure{Stage: ctrlv1.FailureStage_FAILURE_STAGE_PLACING, Reason: r.Reason, Retryable: true, Message: r.Message}
}

// candidateBatch is how many placement rows a placement reads at a time.
const candidateBatch = 64

// Place picks a node for p and charges its Allocation there, in tx. A node
// is a candidate when it is admitted, not isolated, has a live session,
// is READY and not draining, its clock is within tolerance, its memory is
// not tight, it runs VMs and block files, it reaches every pool of p, and
// its schedulable resources (host resources times the ratio in effect)
// minus its Allocations hold p's request. The first candidate by node_id
// is taken. A placement already charged for p's Instance answers its node
// again (a retried step, a restarted ctrl). When no node takes p, refusal
// says why, node by node.
func (f *Fleet) Place(tx *store.Tx, p Placement) (*Placed, *Refusal, error) {
	if a, err := tx.GetAllocation(p.WorkspaceID); err == nil && a.InstanceID == p.InstanceID {
		row, err := tx.GetNodePlacement(a.NodeID)
		if err != nil {
			return nil, nil, err
		}
		return &Placed{NodeID: a.NodeID, DefaultPool: row.DefaultPool}, nil, nil
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, nil, err
	}
	d, _, err := readDefaults(tx)
	if err != nil {
		return nil, nil, err
	}
	defaults := ratiosOf(d)
	now := f.now()
	if p.Node != "" {
		row, err := tx.GetNodePlacement(p.Node)
		if err == nil {
			placed, err := f.charge(tx, row, p, defaults, now)
			if placed != nil || err != nil {
				return placed, nil, err
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, nil, err
		}
	} else {
		q := store.CandidateQuery{
			Limit: candidateBatch, LiveSince: now.Add(-f.liveWindow()), Fit: true, Defaults: defaults,
			Request: store.Resources{CPUMillis: uint64(p.CPUMillis), MemoryBytes: p.MemoryBytes}, Pools: nonEmpty(p.Pools),
		}
		for {
			batch, err := tx.PlacementCandidates(q)
			if err != nil {
				return nil, nil, err
			}
			for _, row := range batch {
				placed, err := f.charge(tx, row, p, defaults, now)
				if placed != nil || err != nil {
					return placed, nil, err
				}
			}
			if len(batch) < q.Limit {
				break
			}
			q.After = batch[len(batch)-1].NodeID
		}
	}
	refusal, err := f.refuse(tx, p, defaults, now)
	return nil, refusal, err
}

// charge charges p's Allocation to row's node when the node takes it:
// every constraint checked, and the room charged in one conditional update.
func (f *Fleet) charge(tx *store.Tx, row *store.NodePlacement, p Placement, defaults store.Ratios, now time.Time) (*Placed, error) {
	if why, _ := unfit(row, p, defaults, now.Add(-f.liveWindow())); why != "" {
		return nil, nil
	}
	ok, err := tx.Allocate(store.Allocation{
		WorkspaceID: p.WorkspaceID, InstanceID: p.InstanceID, NodeID: row.NodeID,
		CPUMillis: uint64(p.CPUMillis), MemoryBytes: p.MemoryBytes, AllocatedAt: now,
	}, defaults)
	if !ok || err != nil {
		return nil, err
	}
	return &Placed{NodeID: row.NodeID, DefaultPool: row.DefaultPool}, nil
}

func nonEmpty(in []string) []string {
	var out []string
	for _, s := range in {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// maxNamed bounds how many nodes a refusal names.
const maxNamed = 8

// refuse says, node by node, why none took p. It reads every placement row
// (only when a placement fails).
func (f *Fleet) refuse(tx *store.Tx, p Placement, defaults store.Ratios, now time.Time) (*Refusal, error) {
	var rows []*store.NodePlacement
	if p.Node != "" {
		row, err := tx.GetNodePlacement(p.Node)
		if errors.Is(err, store.ErrNotFound) {
			return &Refusal{Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, Message: fmt.Sprintf("node %s is not registered", p.Node)}, nil
		} else if err != nil {
			return nil, err
		}
		rows = []*store.NodePlacement{row}
	} else {
		after := ""
		for {
			batch, err := tx.ListNodePlacements(after, 500)
			if err != nil {
				return nil, err
			}
			rows = append(rows, batch...)
			if len(batch) < 500 {
				break
			}
			after = batch[len(batch)-1].NodeID
		}
	}
	r := &Refusal{Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE}
	var reasons []string
	for _, row := range rows {
		why, room := unfit(row, p, defaults, now.Add(-f.liveWindow()))
		if why == "" {
			// Room was taken between the candidate read and the charge.
			why, room = "its room was taken by a concurrent placement", true
		}
		if room {
			r.Reason = ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED
		}
		reasons = append(reasons, row.NodeID+": "+why)
	}
	switch {
	case len(reasons) == 0:
		r.Message = "no node can run it: no node is registered"
		return r, nil
	case len(reasons) > maxNamed:
		reasons = append(reasons[:maxNamed], fmt.Sprintf("and %d more", len(reasons)-maxNamed))
	}
	what := "no node can run it"
	if p.Node != "" {
		what = "node " + p.Node + " cannot run it"
	}
	r.Message = fmt.Sprintf("%s (%d cpu_millis, %d MiB): %s", what, p.CPUMillis, p.MemoryBytes>>20, strings.Join(reasons, "; "))
	return r, nil
}

// unfit says why row cannot take p now, or "" when it can; room is true
// when what is missing is room (schedulable resources, or host memory the
// node judges tight) rather than the node's state or reach.
func unfit(row *store.NodePlacement, p Placement, defaults store.Ratios, liveSince time.Time) (why string, room bool) {
	switch {
	case !row.Admitted:
		return "not admitted (revoked or retired)", false
	case row.Isolated:
		return "isolated", false
	case !row.Live || row.LastSeenAt.Before(liveSince):
		return "no live control session", false
	case row.Draining:
		return "draining", false
	case !row.Ready:
		return "syncing", false
	case row.ClockSkewed:
		return "its clock is beyond the allowed skew", false
	case !row.Has(CapabilityQEMU) && !row.Has(CapabilitySim):
		return "runs no VMs (capability " + CapabilityQEMU + ")", false
	case !row.Has(CapabilityBlockFile):
		return "handles no block files (capability " + CapabilityBlockFile + ")", false
	}
	for _, pool := range p.Pools {
		if pool != "" && !row.Reaches(pool) {
			return fmt.Sprintf("does not reach storage pool %q", pool), false
		}
	}
	if row.MemoryTight {
		return "its host's memory is tight", true
	}
	cpuRatio, memRatio := defaults.CPU, defaults.Memory
	if row.CPURatio > 0 {
		cpuRatio = row.CPURatio
	}
	if row.MemoryRatio > 0 {
		memRatio = row.MemoryRatio
	}
	cpu, mem := scale(row.CPUMillis, cpuRatio), scale(row.MemoryBytes, memRatio)
	switch {
	case row.Allocated.CPUMillis+uint64(p.CPUMillis) > cpu:
		return fmt.Sprintf("%d of %d schedulable cpu_millis free", free(cpu, row.Allocated.CPUMillis), cpu), true
	case row.Allocated.MemoryBytes+p.MemoryBytes > mem:
		return fmt.Sprintf("%d of %d schedulable MiB free", free(mem, row.Allocated.MemoryBytes)>>20, mem>>20), true
	}
	return "", false
}

func free(schedulable, allocated uint64) uint64 {
	if allocated > schedulable {
		return 0
	}
	return schedulable - allocated
}
