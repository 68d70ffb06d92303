package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
)

// NodePlacement is what placement reads of one node (table
// node_placement): the registration's fields it filters on, and the sum of
// the Allocations charged to the node.
type NodePlacement struct {
	NodeID string
	// Admitted: admission ADMITTED. Isolated: the current incarnation is
	// isolated. Live: the stored session says live (LiveUntil says until
	// when). Ready: reconciled (status READY as stored).
	Admitted, Isolated, Live, Ready bool
	// ClockSkewed: the latest clock measurement exceeds the tolerance.
	ClockSkewed bool
	// MemoryTight: the node judges its host's memory tight.
	MemoryTight bool
	Draining    bool
	// LastSeenAt is when ctrl last wrote a message of the session heard;
	// LiveUntil the holder's lease on it (LiveUntil).
	LastSeenAt time.Time
	LiveUntil  time.Time
	// CPUMillis and MemoryBytes are the host resources the node reports.
	CPUMillis   uint64
	MemoryBytes uint64
	// CPURatio and MemoryRatio are the node's overrides, 0 when it follows
	// the cluster-wide default.
	CPURatio, MemoryRatio uint32
	Capabilities          []string
	// Pools are the pools the node reports available; DefaultPool its own
	// default.
	Pools       []string
	DefaultPool string
	// Allocated sums the node's Allocations.
	Allocated Resources
}

// Resources is an amount of CPU and memory placement reserves, and the
// host disk the executions reserve outside the storage pools.
type Resources struct {
	CPUMillis   uint64
	MemoryBytes uint64
	// DiskBytes is ExecutionDiskBytes per Allocation.
	DiskBytes uint64
	// Count is how many Allocations make the sum.
	Count int
}

// ExecutionDiskBytes is the host disk outside every storage pool that each
// Allocation reserves for its execution's own state on the node: its run
// directory, with the VMM's pid file, the guest agent's socket, the
// console log and the VMM's error output. Every execution reserves the
// same, so a node's sum is this times its Allocations and needs no column
// of its own. Volumes and writable layers reserve in their pools instead.
const ExecutionDiskBytes = 64 << 20

// allocatedResources is the sum of count Allocations of cpu and memory.
func allocatedResources(cpu, memory, count int64) Resources {
	return Resources{CPUMillis: uint64(cpu), MemoryBytes: uint64(memory), DiskBytes: uint64(count) * ExecutionDiskBytes, Count: int(count)}
}

// Has reports whether the node advertises capability c.
func (p *NodePlacement) Has(c string) bool { return slices.Contains(p.Capabilities, c) }

// Reaches reports whether the node reports pool available.
func (p *NodePlacement) Reaches(pool string) bool { return slices.Contains(p.Pools, pool) }

// placementOf derives the placement row of a registration.
func placementOf(n *operatorv1.NodeRegistration) *NodePlacement {
	p := &NodePlacement{
		NodeID:      n.GetNodeId(),
		Admitted:    n.GetAdmission() == operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED,
		Isolated:    n.GetIsolated(),
		Live:        n.GetSession().GetLive(),
		Ready:       n.GetStatus() == operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY,
		ClockSkewed: n.GetSession().GetClock().GetExceedsTolerance(),
		MemoryTight: n.GetMemoryTight() != nil,
		CPUMillis:   uint64(n.GetObservation().GetResources().GetCpuMillis()),
		MemoryBytes: n.GetObservation().GetResources().GetMemoryBytes(),
		CPURatio:    overrideOf(n.GetOvercommit().GetCpu()),
		MemoryRatio: overrideOf(n.GetOvercommit().GetMemory()),
	}
	if s := n.GetSession().GetLastSeenAt(); s != nil {
		p.LastSeenAt = s.AsTime()
	}
	p.LiveUntil = LiveUntil(n.GetSession())
	p.Capabilities = n.GetObservation().GetCapabilities()
	for _, a := range n.GetStoragePools() {
		if a.GetAvailable() {
			p.Pools = append(p.Pools, a.GetStoragePool())
		}
		if a.GetDefaultPool() {
			p.DefaultPool = a.GetStoragePool()
		}
	}
	return p
}

// overrideOf is a node's own ratio as its stored record keeps it: present
// only for an override.
// legacyLiveWindow is how long after its last_seen_at a session recorded
// live without live_until (written before leases were) is live: the window
// every replica allowed then, with the default timings.
const legacyLiveWindow = 75 * time.Second

// LiveUntil is until when a session recorded live is live to a replica
// that does not hold it: its holder's lease (live_until), or for a record
// written before leases, legacyLiveWindow after it was last seen. Zero for
// a session not recorded live.
func LiveUntil(s *operatorv1.NodeSessionSummary) time.Time {
	switch {
	case !s.GetLive():
		return time.Time{}
	case s.GetLiveUntil() != nil:
		return s.GetLiveUntil().AsTime()
	case s.GetLastSeenAt() != nil:
		return s.GetLastSeenAt().AsTime().Add(legacyLiveWindow)
	}
	return time.Time{}
}

func overrideOf(r *operatorv1.OvercommitRatio) uint32 {
	if r.GetSource() == operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE {
		return r.GetThousandths()
	}
	return 0
}

// putPlacement writes the placement row of a registration, keeping its
// drain and its Allocations' sums.
func (t *Tx) putPlacement(n *operatorv1.NodeRegistration) error {
	p := placementOf(n)
	if _, err := t.exec(placementUpsert(1), placementArgs(p)...); err != nil {
		return err
	}
	t.patchRegistration(p)
	return nil
}

// placementFields are the columns of node_placement a registration fills,
// in placementArgs' order; node_id first.
var placementFields = []string{"node_id", "admitted", "isolated", "live", "ready", "clock_skewed", "memory_tight",
	"last_seen_at", "live_until", "cpu_millis", "memory_bytes", "cpu_ratio", "memory_ratio", "capabilities", "pools", "default_pool"}

// placementUpsert is the statement writing rows placement rows, keeping
// their drains and their Allocations' sums.
func placementUpsert(rows int) string { return placementUpsertOf(placementFields, rows) }

// placementUpsertOf is placementUpsert of the columns fields.
func placementUpsertOf(fields []string, rows int) string {
	values := strings.TrimSuffix(strings.Repeat("("+marks(len(fields))+"), ", rows), ", ")
	set := make([]string, 0, len(fields)-1)
	for _, f := range fields[1:] {
		set = append(set, f+" = excluded."+f)
	}
	return "INSERT INTO node_placement (" + strings.Join(fields, ", ") + ") VALUES " + values +
		" ON CONFLICT (node_id) DO UPDATE SET " + strings.Join(set, ", ")
}

// placementArgs are the values of placement row p, as placementUpsert
// takes them.
func placementArgs(p *NodePlacement) []any {
	return []any{p.NodeID, boolInt(p.Admitted), boolInt(p.Isolated), boolInt(p.Live), boolInt(p.Ready), boolInt(p.ClockSkewed),
		boolInt(p.MemoryTight), nanos(p.LastSeenAt), nanos(p.LiveUntil), int64(p.CPUMillis), int64(p.MemoryBytes), int64(p.CPURatio),
		int64(p.MemoryRatio), strings.Join(p.Capabilities, ","), strings.Join(p.Pools, ","), p.DefaultPool}
}

const placementColumns = `SELECT node_id, admitted, isolated, live, ready, clock_skewed, memory_tight, draining, last_seen_at,
	live_until, cpu_millis, memory_bytes, cpu_ratio, memory_ratio, capabilities, pools, default_pool,
	allocated_cpu_millis, allocated_memory_bytes, allocations FROM node_placement`

func scanPlacement(row interface{ Scan(...any) error }) (*NodePlacement, error) {
	p := &NodePlacement{}
	var admitted, isolated, live, ready, skewed, tight, draining, seen, until, cpu, mem, cpuRatio, memRatio, allocCPU, allocMem, count int64
	var caps, pools string
	if err := row.Scan(&p.NodeID, &admitted, &isolated, &live, &ready, &skewed, &tight, &draining, &seen,
		&until, &cpu, &mem, &cpuRatio, &memRatio, &caps, &pools, &p.DefaultPool, &allocCPU, &allocMem, &count); err != nil {
		return nil, err
	}
	p.Admitted, p.Isolated, p.Live, p.Ready = admitted == 1, isolated == 1, live == 1, ready == 1
	p.ClockSkewed, p.MemoryTight, p.Draining = skewed == 1, tight == 1, draining == 1
	p.LastSeenAt, p.LiveUntil = fromNanos(seen), fromNanos(until)
	p.CPUMillis, p.MemoryBytes = uint64(cpu), uint64(mem)
	p.CPURatio, p.MemoryRatio = uint32(cpuRatio), uint32(memRatio)
	p.Capabilities, p.Pools = splitList(caps), splitList(pools)
	p.Allocated = allocatedResources(allocCPU, allocMem, count)
	return p, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func scanPlacements(rows *sql.Rows) ([]*NodePlacement, error) {
	defer rows.Close()
	var out []*NodePlacement
	for rows.Next() {
		p, err := scanPlacement(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// GetNodePlacement reads one node's placement row.
func (t *Tx) GetNodePlacement(id string) (*NodePlacement, error) {
	p, err := scanPlacement(t.queryRow(placementColumns+" WHERE node_id = ?", id))
	return p, noRows(err)
}

// ListNodePlacements pages the placement rows by node_id.
func (t *Tx) ListNodePlacements(after string, limit int) ([]*NodePlacement, error) {
	rows, err := t.query(placementColumns+" WHERE node_id > ? ORDER BY node_id LIMIT ?", after, limit)
	if err != nil {
		return nil, err
	}
	return scanPlacements(rows)
}

// Ratios are the cluster-wide overcommit ratios, in thousandths: what a
// node without its own override follows.
type Ratios struct {
	CPU, Memory uint32
}

// fits is the SQL condition that a node's schedulable resources (host
// resources times its ratio: its override, or else the default) minus
// what its Allocations reserve hold a request. Its arguments are the
// requested CPU, the default CPU ratio, the requested memory and the
// default memory ratio.
const fits = `allocated_cpu_millis + ? <= cpu_millis * (CASE WHEN cpu_ratio > 0 THEN cpu_ratio ELSE ? END) / 1000
	AND allocated_memory_bytes + ? <= memory_bytes * (CASE WHEN memory_ratio > 0 THEN memory_ratio ELSE ? END) / 1000`

// CandidateQuery narrows placement rows to the nodes that may take work.
type CandidateQuery struct {
	// After pages by node_id; Limit bounds the page.
	After string
	Limit int
	// Draining selects draining nodes instead of the others.
	Draining bool
	// LiveAt is when a session must be live (LiveUntil not before it);
	// zero: every session recorded live is.
	LiveAt time.Time
	// Fit, when set, keeps only the nodes where Request fits under
	// Defaults; nodes that are syncing, clock-skewed or memory tight are
	// then left out too: they take no new execution.
	Fit      bool
	Request  Resources
	Defaults Ratios
	// Pools, when given, keeps only the nodes reporting each available. A
	// name that is not a DNS label (as node pools are) is left for the
	// caller's own check.
	Pools []string
	// DefaultPool, when set, keeps only the nodes that name a default pool
	// of their own: a first writable layer with no Volume to go beside
	// goes there.
	DefaultPool bool
}

// PlacementCandidates pages, by node_id, the admitted, not isolated nodes
// with a live session that q selects, reaching every pool of q.
// Capabilities are the caller's to check.
func (t *Tx) PlacementCandidates(q CandidateQuery) ([]*NodePlacement, error) {
	where := " WHERE node_id > ? AND admitted = 1 AND isolated = 0 AND live = 1 AND live_until >= ? AND draining = ?"
	args := []any{q.After, nanos(q.LiveAt), boolInt(q.Draining)}
	if q.Fit {
		where += " AND ready = 1 AND clock_skewed = 0 AND memory_tight = 0 AND " + fits
		args = append(args, int64(q.Request.CPUMillis), int64(q.Defaults.CPU), int64(q.Request.MemoryBytes), int64(q.Defaults.Memory))
	}
	for _, pool := range q.Pools {
		if pool != "" {
			where += " AND " + t.d.listHas("pools")
			args = append(args, listItem(pool))
		}
	}
	if q.DefaultPool {
		where += " AND default_pool <> ''"
	}
	rows, err := t.queryDrained(placementColumns+where+" ORDER BY node_id LIMIT ?", append(args, q.Limit)...)
	if err != nil {
		return nil, err
	}
	return scanPlacements(rows)
}

// Allocation is what one Workspace's Instance reserves on the node it is
// placed on.
type Allocation struct {
	WorkspaceID, InstanceID, NodeID string
	CPUMillis                       uint64
	MemoryBytes                     uint64
	// DiskBytes is ExecutionDiskBytes, whatever the Allocation says when
	// it is made: it is not stored.
	DiskBytes   uint64
	AllocatedAt time.Time
}

// Allocate charges a to its node if it fits there under defaults, and
// reports whether it did. The Workspace's earlier Allocation, if any, is
// released: a Workspace holds at most one. The check and the charge are one
// conditional update, so concurrent placements never overbook a node.
func (t *Tx) Allocate(a Allocation, defaults Ratios) (bool, error) {
	held, err := t.GetAllocation(a.WorkspaceID)
	if errors.Is(err, ErrNotFound) {
		held, err = nil, nil
	}
	if err != nil {
		return false, err
	}
	return t.AllocateAfter(held, a, defaults)
}

// AllocateAfter is Allocate for a caller that read the Workspace's
// Allocation in this transaction already: held (nil when it holds none)
// is released first, whether or not a then fits.
func (t *Tx) AllocateAfter(held *Allocation, a Allocation, defaults Ratios) (bool, error) {
	if held != nil {
		if err := t.release(held); err != nil {
			return false, err
		}
	}
	_, ok, err := t.charge(a, " AND "+fits, int64(a.CPUMillis), int64(defaults.CPU), int64(a.MemoryBytes), int64(defaults.Memory))
	return ok, err
}

// charge adds a to its node's sums when the node's row meets cond (with
// args), records it, and answers the node's default pool.
func (t *Tx) charge(a Allocation, cond string, args ...any) (string, bool, error) {
	pool, err := t.updateSums(a.NodeID, `UPDATE node_placement SET allocated_cpu_millis = allocated_cpu_millis + ?,
		allocated_memory_bytes = allocated_memory_bytes + ?, allocations = allocations + 1 WHERE node_id = ?`+cond,
		append([]any{int64(a.CPUMillis), int64(a.MemoryBytes), a.NodeID}, args...)...)
	if errors.Is(err, ErrNotFound) {
		return "", false, nil
	} else if err != nil {
		return "", false, err
	}
	// Kept to write at the end when t coalesces (keepInsert).
	vals := []any{a.WorkspaceID, a.InstanceID, a.NodeID, int64(a.CPUMillis), int64(a.MemoryBytes), nanos(a.AllocatedAt)}
	if kept, err := t.keepInsert("allocations", allocationCols, vals...); kept || err != nil {
		return pool, err == nil, err
	}
	_, err = t.exec("INSERT INTO allocations (workspace_id, instance_id, node_id, cpu_millis, memory_bytes, allocated_at) VALUES (?, ?, ?, ?, ?, ?)", vals...)
	return pool, err == nil, err
}

var allocationCols = []string{"workspace_id", "instance_id", "node_id", "cpu_millis", "memory_bytes", "allocated_at"}

const allocationColumns = "SELECT workspace_id, instance_id, node_id, cpu_millis, memory_bytes, allocated_at FROM allocations"

func scanAllocation(row interface{ Scan(...any) error }) (*Allocation, error) {
	a := &Allocation{}
	var cpu, mem, at int64
	if err := row.Scan(&a.WorkspaceID, &a.InstanceID, &a.NodeID, &cpu, &mem, &at); err != nil {
		return nil, err
	}
	a.CPUMillis, a.MemoryBytes, a.DiskBytes, a.AllocatedAt = uint64(cpu), uint64(mem), ExecutionDiskBytes, fromNanos(at)
	return a, nil
}

// GetAllocation reads a Workspace's Allocation.
func (t *Tx) GetAllocation(workspaceID string) (*Allocation, error) {
	a, err := scanAllocation(t.queryRow(allocationColumns+" WHERE workspace_id = ?", workspaceID))
	return a, noRows(err)
}

// ReleaseAllocation releases a Workspace's Allocation: the one of instance,
// or whichever it holds when instance is "". Nothing to release is no
// error.
func (t *Tx) ReleaseAllocation(workspaceID, instance string) error {
	a, err := t.GetAllocation(workspaceID)
	if errors.Is(err, ErrNotFound) || (err == nil && instance != "" && a.InstanceID != instance) {
		return nil
	} else if err != nil {
		return err
	}
	return t.release(a)
}

// release deletes Allocation a and takes it off its node's sums.
func (t *Tx) release(a *Allocation) error {
	if _, err := t.exec("DELETE FROM allocations WHERE workspace_id = ?", a.WorkspaceID); err != nil {
		return err
	}
	_, err := t.updateSums(a.NodeID, `UPDATE node_placement SET allocated_cpu_millis = allocated_cpu_millis - ?,
		allocated_memory_bytes = allocated_memory_bytes - ?, allocations = allocations - 1 WHERE node_id = ?`,
		int64(a.CPUMillis), int64(a.MemoryBytes), a.NodeID)
	if errors.Is(err, ErrNotFound) {
		return nil // no placement row: nothing to take off
	}
	return err
}

// updateSums runs an update of nodeID's Allocation sums, patches the
// mirror (placeindex.go) with the sums it left, and answers the node's
// default pool; ErrNotFound when it updated no row.
func (t *Tx) updateSums(nodeID, update string, args ...any) (string, error) {
	var cpu, mem, count int64
	var pool string
	err := t.queryRow(update+" RETURNING allocated_cpu_millis, allocated_memory_bytes, allocations, default_pool", args...).Scan(&cpu, &mem, &count, &pool)
	if err != nil {
		return "", noRows(err)
	}
	sums := allocatedResources(cpu, mem, count)
	t.patchNode(nodeID, func(p *NodePlacement) { p.Allocated = sums })
	return pool, nil
}

// ReleaseNodeAllocations releases every Allocation charged to a node and
// returns how many there were.
func (t *Tx) ReleaseNodeAllocations(nodeID string) (int, error) {
	res, err := t.exec("DELETE FROM allocations WHERE node_id = ?", nodeID)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	if _, err := t.exec("UPDATE node_placement SET allocated_cpu_millis = 0, allocated_memory_bytes = 0, allocations = 0 WHERE node_id = ?", nodeID); err != nil {
		return 0, err
	}
	t.patchNode(nodeID, func(p *NodePlacement) { p.Allocated = Resources{} })
	return int(n), nil
}

// AllocationFilter names the one thing ListAllocations narrows to.
type AllocationFilter struct {
	NodeID, WorkspaceID, InstanceID string
}

// ListAllocations pages the Allocations f selects by workspace_id.
func (t *Tx) ListAllocations(f AllocationFilter, after string, limit int) ([]*Allocation, error) {
	col, val := "node_id", f.NodeID
	switch {
	case f.WorkspaceID != "":
		col, val = "workspace_id", f.WorkspaceID
	case f.InstanceID != "":
		col, val = "instance_id", f.InstanceID
	}
	rows, err := t.query(fmt.Sprintf("%s WHERE %s = ? AND workspace_id > ? ORDER BY workspace_id LIMIT ?", allocationColumns, col), val, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Allocation
	for rows.Next() {
		a, err := scanAllocation(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// NodeAllocations sums the Allocations of each node in ids (every node when
// none is given). A node with none is absent.
func (t *Tx) NodeAllocations(ids ...string) (map[string]Resources, error) {
	q := "SELECT node_id, allocated_cpu_millis, allocated_memory_bytes, allocations FROM node_placement WHERE allocations > 0"
	var args []any
	if len(ids) > 0 {
		q += " AND node_id IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + ")"
		for _, id := range ids {
			args = append(args, id)
		}
	}
	rows, err := t.query(q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]Resources{}
	for rows.Next() {
		var id string
		var cpu, mem, n int64
		if err := rows.Scan(&id, &cpu, &mem, &n); err != nil {
			return nil, err
		}
		out[id] = allocatedResources(cpu, mem, n)
	}
	return out, rows.Err()
}

// PutSetting replaces a shared setting when it still holds old (the bytes
// the caller read), and reports whether it did.
func (t *Tx) PutSetting(name string, old, value []byte) (bool, error) {
	res, err := t.exec("UPDATE settings SET value = ? WHERE name = ? AND value = ?", value, name, old)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// putPlacementBeforeLeases is putPlacement in migration 8, before
// node_placement had live_until (migration 17 adds and fills it).
func (t *Tx) putPlacementBeforeLeases(n *operatorv1.NodeRegistration) error {
	i := slices.Index(placementFields, "live_until")
	fields := slices.Delete(slices.Clone(placementFields), i, i+1)
	_, err := t.exec(placementUpsertOf(fields, 1), slices.Delete(placementArgs(placementOf(n)), i, i+1)...)
	return err
}

// backfillLeases (migration 17) fills each placement row's live_until from
// its registration.
func backfillLeases(tx *sql.Tx, d dialect) error {
	nodes, err := readBodies(tx, "SELECT body FROM nodes", func() *operatorv1.NodeRegistration { return &operatorv1.NodeRegistration{} })
	if err != nil {
		return err
	}
	update := d.rebind("UPDATE node_placement SET live_until = ? WHERE node_id = ?")
	for _, n := range nodes {
		if _, err := tx.Exec(update, nanos(LiveUntil(n.GetSession())), n.GetNodeId()); err != nil {
			return fmt.Errorf("node %s: %w", n.GetNodeId(), err)
		}
	}
	return nil
}

// backfillPlacement (migration 8) writes the placement row of every
// registration and an Allocation for every execution a runtime record
// names, from the bodies written before the tables existed.
func backfillPlacement(tx *sql.Tx, d dialect) error {
	t := &Tx{ctx: context.Background(), tx: tx, d: d}
	nodes, err := readBodies(tx, "SELECT body FROM nodes", func() *operatorv1.NodeRegistration { return &operatorv1.NodeRegistration{} })
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := t.putPlacementBeforeLeases(n); err != nil {
			return err
		}
	}
	if _, err := tx.Exec("UPDATE node_placement SET draining = 1 WHERE node_id IN (SELECT node_id FROM nodes WHERE draining = 1)"); err != nil {
		return err
	}
	runtimes, err := readBodies(tx, "SELECT body FROM workspace_runtime WHERE node_id <> ''", func() *storev1.WorkspaceRuntime { return &storev1.WorkspaceRuntime{} })
	if err != nil {
		return err
	}
	for _, rt := range runtimes {
		w := &ctrlv1.Workspace{}
		if err := t.getBody("workspaces", "workspace_id", rt.GetWorkspaceId(), false, w); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		// A running execution was placed already: it is charged whatever
		// room its node has, as after a lowered ratio.
		res := w.GetSpec().GetResources()
		if _, _, err := t.charge(Allocation{
			WorkspaceID: rt.GetWorkspaceId(), InstanceID: rt.GetInstanceId(), NodeID: rt.GetNodeId(),
			CPUMillis: uint64(res.GetCpuMillis()), MemoryBytes: res.GetMemoryBytes(), AllocatedAt: time.Now(),
		}, ""); err != nil {
			return err
		}
	}
	return nil
}

// readBodies reads every body query returns, before anything is written
// (one connection on SQLite).
func readBodies[M proto.Message](tx *sql.Tx, query string, newMsg func() M) ([]M, error) {
	rows, err := tx.Query(query)
	if err != nil {
		return nil, err
	}
	return scanBodies(rows, newMsg)
}

// Unfit is the first placement constraint a node fails, as placement
// checks them (admission first, room last).
type Unfit string

const (
	UnfitNotAdmitted  Unfit = "not_admitted"
	UnfitIsolated     Unfit = "isolated"
	UnfitNotLive      Unfit = "not_live"
	UnfitDraining     Unfit = "draining"
	UnfitSyncing      Unfit = "syncing"
	UnfitClockSkewed  Unfit = "clock_skewed"
	UnfitNoVMs        Unfit = "no_vms"
	UnfitNoBlockFiles Unfit = "no_block_files"
	// UnfitCapability: the node lacks a capability the Workspace requires.
	UnfitCapability Unfit = "capability"
	UnfitPool       Unfit = "pool"
	// UnfitNoDefaultPool: a first writable layer goes to the node's own
	// default pool, and the node names none.
	UnfitNoDefaultPool Unfit = "no_default_pool"
	UnfitMemoryTight   Unfit = "memory_tight"
	UnfitRoom          Unfit = "room"
	// UnfitNone: the node meets every constraint (its room was taken by a
	// concurrent placement, say).
	UnfitNone Unfit = "none"
)

// UnfitQuery is a placement to classify every node against.
type UnfitQuery struct {
	// LiveAt is when a session must be live, as CandidateQuery.LiveAt.
	LiveAt time.Time
	// VMCapabilities are the capabilities of nodes that run executions:
	// a node needs one of them. BlockFileCapability it needs too.
	VMCapabilities      []string
	BlockFileCapability string
	// Capabilities the Workspace requires: a node needs every one.
	Capabilities []string
	// Pools are the pools the node must report available.
	Pools []string
	// DefaultPool: the node must name a default pool (CandidateQuery's).
	DefaultPool bool
	Request     Resources
	Defaults    Ratios
}

// CountUnfit counts the nodes by the first constraint of q each fails, in
// one aggregate query: a placement that found no node explains itself
// without reading every node's row. The order of the checks is fleet's
// (unfit); a class no node is in is absent.
func (t *Tx) CountUnfit(q UnfitQuery) (map[Unfit]int, error) {
	var args []any
	has := func(column, item string) string {
		args = append(args, listItem(item))
		return t.d.listHas(column)
	}
	anyOf := func(column string, items []string) string {
		if len(items) == 0 {
			return "1 = 0"
		}
		var ors []string
		for _, it := range items {
			ors = append(ors, has(column, it))
		}
		return "(" + strings.Join(ors, " OR ") + ")"
	}
	allOf := func(column string, items []string) string {
		ands := []string{"1 = 1"}
		for _, it := range items {
			ands = append(ands, has(column, it))
		}
		return "(" + strings.Join(ands, " AND ") + ")"
	}
	var when []string
	add := func(cond string, class Unfit) { when = append(when, fmt.Sprintf("WHEN %s THEN '%s'", cond, class)) }
	add("admitted = 0", UnfitNotAdmitted)
	add("isolated = 1", UnfitIsolated)
	args = append(args, nanos(q.LiveAt))
	add("live = 0 OR live_until < ?", UnfitNotLive)
	add("draining = 1", UnfitDraining)
	add("ready = 0", UnfitSyncing)
	add("clock_skewed = 1", UnfitClockSkewed)
	add("NOT "+anyOf("capabilities", q.VMCapabilities), UnfitNoVMs)
	add("NOT "+allOf("capabilities", []string{q.BlockFileCapability}), UnfitNoBlockFiles)
	add("NOT "+allOf("capabilities", q.Capabilities), UnfitCapability)
	var pools []string
	for _, p := range q.Pools {
		if p != "" {
			pools = append(pools, p)
		}
	}
	add("NOT "+allOf("pools", pools), UnfitPool)
	if q.DefaultPool {
		add("default_pool = ''", UnfitNoDefaultPool)
	}
	add("memory_tight = 1", UnfitMemoryTight)
	args = append(args, int64(q.Request.CPUMillis), int64(q.Defaults.CPU), int64(q.Request.MemoryBytes), int64(q.Defaults.Memory))
	add("NOT ("+fits+")", UnfitRoom)
	rows, err := t.query("SELECT why, COUNT(*) FROM (SELECT CASE "+strings.Join(when, " ")+" ELSE '"+string(UnfitNone)+
		"' END AS why FROM node_placement) classified GROUP BY why", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[Unfit]int{}
	for rows.Next() {
		var why string
		var n int64
		if err := rows.Scan(&why, &n); err != nil {
			return nil, err
		}
		out[Unfit(why)] = int(n)
	}
	return out, rows.Err()
}

// listHas is the condition that column, a comma-separated list, holds
// the item its argument names (listItem). Not LIKE: SQLite prepares a
// statement again at every run whose LIKE pattern is a parameter (the
// pattern could change its plan), and its LIKE ignores case where
// PostgreSQL's does not.
func (d dialect) listHas(column string) string {
	return d.position + "(',' || " + column + " || ',', ?) > 0"
}

// listItem is listHas's argument for item.
func listItem(item string) string { return "," + item + "," }
