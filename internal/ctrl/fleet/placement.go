package fleet

import (
	"errors"
	"fmt"
	"strings"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/capability"
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
	// LayerInDefaultPool says its first writable layer, with no Volume to
	// go beside, goes to the node's own default pool: a node that names
	// none cannot take it.
	LayerInDefaultPool bool
	// Node, when set, is the only candidate (CreateWorkspaceOnNode,
	// StartWorkspaceOnNode).
	Node string
	// Capabilities are the Workspace's capabilities.required: a node
	// advertising every one is a candidate.
	Capabilities []string
	// New says the Workspace was admitted in the placement's own
	// transaction: it holds no Allocation yet, and none is read.
	New bool
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

// firstCandidates and candidateBatch are how many placement rows a
// placement reads at first and, once those are all taken, at a time after:
// the first candidate the query returns fits nearly always (the query
// checks room and state; only capabilities, pools and a concurrent charge
// remain), so reading 64 rows to take one was most of a placement's store
// time.
const (
	firstCandidates = 4
	candidateBatch  = 64
)

// Place picks a node for p and charges its Allocation there, in tx. A node
// is a candidate when it is admitted, not isolated, has a live session,
// is READY and not draining, its clock is within tolerance, its memory is
// not tight, it runs VMs and block files, it reaches every pool of p, and
// its schedulable resources (host resources times the ratio in effect)
// minus its Allocations hold p's request. The first candidate by node_id
// is taken. A placement already charged for p's Instance answers its node
// again (a retried step, a restarted ctrl). When no node takes p, refusal
// says why: node by node for the first few, by count of each reason for
// the rest (refuse).
func (f *Fleet) Place(tx *store.Tx, p Placement) (*Placed, *Refusal, error) {
	var held *store.Allocation
	err := store.ErrNotFound // a new Workspace holds none
	if !p.New {
		held, err = tx.GetAllocation(p.WorkspaceID)
	}
	switch {
	case err == nil && held.InstanceID == p.InstanceID:
		row, err := tx.GetNodePlacement(held.NodeID)
		if err != nil {
			return nil, nil, err
		}
		return &Placed{NodeID: held.NodeID, DefaultPool: row.DefaultPool}, nil, nil
	case errors.Is(err, store.ErrNotFound):
		held = nil
	case err != nil:
		return nil, nil, err
	}
	d, _, err := readDefaults(tx)
	if err != nil {
		return nil, nil, err
	}
	defaults := ratiosOf(d)
	now := f.now()
	q := store.CandidateQuery{
		Limit: firstCandidates, LiveAt: f.LiveAt(now), Fit: true, Defaults: defaults,
		Request: store.Resources{CPUMillis: uint64(p.CPUMillis), MemoryBytes: p.MemoryBytes}, Pools: nonEmpty(p.Pools),
		DefaultPool: p.LayerInDefaultPool,
	}
	if p.Node != "" {
		row, err := tx.GetNodePlacement(p.Node)
		if err == nil {
			placed, err := f.charge(tx, row, &held, p, q, now)
			if placed != nil || err != nil {
				return placed, nil, err
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, nil, err
		}
	} else {
		if placed, err := f.placeIndexed(tx, &held, p, q, now); placed != nil || err != nil {
			return placed, nil, err
		}
		// None the mirror chose took it: the table decides (on PostgreSQL
		// the mirror may be behind another replica's writes).
		for {
			batch, err := tx.PlacementCandidates(q)
			if err != nil {
				return nil, nil, err
			}
			for _, row := range batch {
				placed, err := f.charge(tx, row, &held, p, q, now)
				if placed != nil || err != nil {
					return placed, nil, err
				}
			}
			if len(batch) < q.Limit {
				break
			}
			q.After, q.Limit = batch[len(batch)-1].NodeID, candidateBatch
		}
	}
	refusal, err := f.refuse(tx, p, defaults, now)
	return nil, refusal, err
}

// indexedTries bounds the nodes a placement tries from the mirror before
// it reads the table: a node the mirror shows with room but the table
// refuses is behind, and so may the next few be.
const indexedTries = 4

// placeIndexed places p on the first node by node_id that the placement
// mirror shows able to take it (store.IndexedCandidates), charged by a
// conditional update that checks every constraint in the table. It answers
// nil when none it tried took p.
func (f *Fleet) placeIndexed(tx *store.Tx, held **store.Allocation, p Placement, q store.CandidateQuery, now time.Time) (*Placed, error) {
	q.Limit = indexedTries
	rows, err := tx.IndexedCandidates(q)
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		if class, _ := unfit(row, p, q.Defaults, q.LiveAt); class != store.UnfitNone {
			continue // a capability the query does not check: the row is not behind
		}
		placed, err := f.charge(tx, row, held, p, q, now)
		if placed != nil || err != nil {
			return placed, err
		}
		tx.Stale(row.NodeID)
	}
	return nil, nil
}

// charge charges p's Allocation to row's node when the node takes it:
// every constraint checked on row (a capability the query does not check
// among them), and checked again with the room in the one conditional
// update that charges it (AllocateCandidate), since on PostgreSQL row may
// have been read before another transaction drained, isolated or filled
// the node. *held is the Workspace's earlier Allocation (nil for none):
// released by the first try to charge, whether or not it takes, and then
// nil.
func (f *Fleet) charge(tx *store.Tx, row *store.NodePlacement, held **store.Allocation, p Placement, q store.CandidateQuery, now time.Time) (*Placed, error) {
	if class, _ := unfit(row, p, q.Defaults, q.LiveAt); class != store.UnfitNone {
		return nil, nil
	}
	pool, ok, err := tx.AllocateCandidate(*held, p.on(row.NodeID, now), q, append([]string{capability.BlockFile}, p.Capabilities...), capability.Providers)
	if err != nil {
		return nil, err
	}
	*held = nil
	if !ok {
		return nil, nil
	}
	return &Placed{NodeID: row.NodeID, DefaultPool: pool}, nil
}

// on is p's Allocation on node nodeID, made at now.
func (p Placement) on(nodeID string, now time.Time) store.Allocation {
	return store.Allocation{
		WorkspaceID: p.WorkspaceID, InstanceID: p.InstanceID, NodeID: nodeID,
		CPUMillis: uint64(p.CPUMillis), MemoryBytes: p.MemoryBytes, AllocatedAt: now,
	}
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

// maxNamed bounds how many nodes a refusal names; the others are counted
// by what keeps them from it.
const maxNamed = 8

// refuse says why no node took p: for a pinned placement, why its node
// did not; otherwise node by node for the first maxNamed nodes by node_id,
// and by count of each reason for the rest. It reads at most maxNamed
// placement rows and one aggregate over all of them, however large the
// fleet (only when a placement fails).
func (f *Fleet) refuse(tx *store.Tx, p Placement, defaults store.Ratios, now time.Time) (*Refusal, error) {
	liveAt := f.LiveAt(now)
	r := &Refusal{Reason: ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE}
	if p.Node != "" {
		row, err := tx.GetNodePlacement(p.Node)
		if errors.Is(err, store.ErrNotFound) {
			r.Message = fmt.Sprintf("node %s is not registered", p.Node)
			return r, nil
		} else if err != nil {
			return nil, err
		}
		class, why := unfit(row, p, defaults, liveAt)
		if short(class) {
			r.Reason = ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED
		}
		r.Message = fmt.Sprintf("node %s cannot run it (%d cpu_millis, %d MiB): %s: %s", p.Node, p.CPUMillis, p.MemoryBytes>>20, p.Node, why)
		return r, nil
	}
	counts, err := tx.CountUnfit(store.UnfitQuery{
		LiveAt: liveAt, VMCapabilities: capability.Providers, BlockFileCapability: capability.BlockFile, Capabilities: p.Capabilities,
		Pools: p.Pools, DefaultPool: p.LayerInDefaultPool, Request: store.Resources{CPUMillis: uint64(p.CPUMillis), MemoryBytes: p.MemoryBytes}, Defaults: defaults,
	})
	if err != nil {
		return nil, err
	}
	total := 0
	for class, n := range counts {
		total += n
		if short(class) {
			r.Reason = ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED
		}
	}
	if total == 0 {
		r.Message = "no node can run it: no node is registered"
		return r, nil
	}
	named, err := tx.ListNodePlacements("", maxNamed)
	if err != nil {
		return nil, err
	}
	var reasons []string
	for _, row := range named {
		class, why := unfit(row, p, defaults, liveAt)
		counts[class]--
		reasons = append(reasons, row.NodeID+": "+why)
	}
	if rest := total - len(named); rest > 0 {
		reasons = append(reasons, fmt.Sprintf("and %d more: %s", rest, countedReasons(counts)))
	}
	r.Message = fmt.Sprintf("no node can run it (%d cpu_millis, %d MiB): %s", p.CPUMillis, p.MemoryBytes>>20, strings.Join(reasons, "; "))
	return r, nil
}

// short reports whether what a node lacks is room (schedulable
// resources, or host memory it judges tight) rather than the right state
// or reach: such a refusal is RESOURCE_EXHAUSTED. A node that fits now had
// its room taken by a concurrent placement.
func short(class store.Unfit) bool {
	return class == store.UnfitMemoryTight || class == store.UnfitRoom || class == store.UnfitNone
}

// unfitOrder lists the classes in the order unfit checks them, and what
// each means for many nodes.
var unfitOrder = []struct {
	class store.Unfit
	what  string
}{
	{store.UnfitNotAdmitted, "not admitted"},
	{store.UnfitIsolated, "isolated"},
	{store.UnfitNotLive, "without a live control session"},
	{store.UnfitDraining, "draining"},
	{store.UnfitSyncing, "syncing"},
	{store.UnfitClockSkewed, "with a clock beyond the allowed skew"},
	{store.UnfitNoVMs, "running no VMs"},
	{store.UnfitNoBlockFiles, "handling no block files"},
	{store.UnfitCapability, "lacking a required capability"},
	{store.UnfitPool, "not reaching every storage pool"},
	{store.UnfitNoDefaultPool, "naming no default storage pool for the writable layer"},
	{store.UnfitMemoryTight, "with tight host memory"},
	{store.UnfitRoom, "without the room"},
	{store.UnfitNone, "whose room a concurrent placement took"},
}

// countedReasons says how many nodes each reason keeps, in unfit's order.
func countedReasons(counts map[store.Unfit]int) string {
	var parts []string
	for _, u := range unfitOrder {
		if n := counts[u.class]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, u.what))
		}
	}
	return strings.Join(parts, ", ")
}

// unfit says why row cannot take p now: its class (store.UnfitNone when
// it can) and a message with the details. store.CountUnfit checks the same
// constraints, in the same order, in SQL.
func unfit(row *store.NodePlacement, p Placement, defaults store.Ratios, liveAt time.Time) (store.Unfit, string) {
	switch {
	case !row.Admitted:
		return store.UnfitNotAdmitted, "not admitted (revoked or retired)"
	case row.Isolated:
		return store.UnfitIsolated, "isolated"
	case !row.Live || row.LiveUntil.Before(liveAt):
		return store.UnfitNotLive, "no live control session"
	case row.Draining:
		return store.UnfitDraining, "draining"
	case !row.Ready:
		return store.UnfitSyncing, "syncing"
	case row.ClockSkewed:
		return store.UnfitClockSkewed, "its clock is beyond the allowed skew"
	case !RunsVMs(row):
		return store.UnfitNoVMs, "runs no VMs (capability " + capability.QEMU + ")"
	case !row.Has(capability.BlockFile):
		return store.UnfitNoBlockFiles, "handles no block files (capability " + capability.BlockFile + ")"
	}
	for _, c := range p.Capabilities {
		if !row.Has(c) {
			return store.UnfitCapability, "does not offer required capability " + c
		}
	}
	for _, pool := range p.Pools {
		if pool != "" && !row.Reaches(pool) {
			return store.UnfitPool, fmt.Sprintf("does not reach storage pool %q", pool)
		}
	}
	if p.LayerInDefaultPool && row.DefaultPool == "" {
		return store.UnfitNoDefaultPool, "names no default storage pool for the new writable layer (node --pool NAME=DIR,default)"
	}
	if row.MemoryTight {
		return store.UnfitMemoryTight, "its host's memory is tight"
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
		return store.UnfitRoom, fmt.Sprintf("%d of %d schedulable cpu_millis free", free(cpu, row.Allocated.CPUMillis), cpu)
	case row.Allocated.MemoryBytes+p.MemoryBytes > mem:
		return store.UnfitRoom, fmt.Sprintf("%d of %d schedulable MiB free", free(mem, row.Allocated.MemoryBytes)>>20, mem>>20)
	}
	// Room was taken between the candidate read and the charge.
	return store.UnfitNone, "its room was taken by a concurrent placement"
}

func free(schedulable, allocated uint64) uint64 {
	if allocated > schedulable {
		return 0
	}
	return schedulable - allocated
}
