package store

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

// placeIndex mirrors node_placement in memory, so that placement chooses a
// node without reading candidate rows (issue 15, DESIGN "Placement at
// scale"). The table stays the authority: a node chosen here is charged by
// a conditional update that checks every constraint again
// (AllocateCandidate), and a placement that finds nothing here reads the
// table as before.
//
// The mirror is written through: each write of a placement row in this
// process (a registration, a drain, an Allocation charged or released)
// leaves a patch on its transaction, with the values the row has after
// it, and the patches are applied once the transaction commits. Patches
// carry values, not differences, so applying one twice, or after a read
// that already saw its write, changes nothing. On SQLite this process is
// the only writer and its commits are ordered (group.go): the mirror is
// exact. On PostgreSQL other replicas write too, and commits apply their
// patches in any order: the mirror is a hint there, read again whole once
// it is older than maxAge, and a node a conditional charge refuses is read
// again before it is chosen again.
type placeIndex struct {
	mu sync.Mutex
	// rows are the placement rows by node_id, nil until loaded. A row is
	// never changed in place (patches copy it), so callers may keep one.
	rows map[string]*NodePlacement
	// ids are rows' keys in order.
	ids []string
	// stale are nodes to read again before the next choice.
	stale map[string]bool
	// loadedAt is when rows were read whole; maxAge, when set, is how old
	// that may be (PostgreSQL: other replicas' writes are not patched).
	loadedAt time.Time
	maxAge   time.Duration
	// usedAt is when a placement last chose from the mirror: the
	// background reload (reloadIndex) reads it only for a ctrl that places.
	usedAt time.Time
	// reloading says a background reload is reading the table; during are
	// the patches committed meanwhile, applied again over what it read,
	// which may be older than they are.
	reloading bool
	during    []placementPatch
	// busy counts, by node, the charges made through the mirror by this
	// process's transactions still open: IndexedCandidates gives those
	// nodes last, so that concurrent placements spread over the nodes
	// instead of queueing for one row's lock (PostgreSQL) or all trying
	// the node the first of them filled.
	busy map[string]int
}

// placementPatch sets what a committed write left in one node's row.
type placementPatch func(ix *placeIndex)

// patch queues p to be applied once t commits.
func (t *Tx) patch(p placementPatch) {
	if t.index != nil {
		t.patches = append(t.patches, p)
	}
}

// patchRegistration is PutNode's and UpdateNodes's write of a row: the
// registration's fields, the drain and the sums kept.
func (t *Tx) patchRegistration(p *NodePlacement) {
	t.patch(func(ix *placeIndex) {
		if old := ix.rows[p.NodeID]; old != nil {
			p.Draining, p.Allocated = old.Draining, old.Allocated
		}
		ix.set(p)
	})
}

// patchNode is a write of a few fields of nodeID's row.
func (t *Tx) patchNode(nodeID string, change func(p *NodePlacement)) {
	t.patch(func(ix *placeIndex) {
		if old := ix.rows[nodeID]; old != nil {
			p := *old
			change(&p)
			ix.set(&p)
		}
	})
}

// set installs row p. Called with mu held.
func (ix *placeIndex) set(p *NodePlacement) {
	if ix.rows == nil {
		return // not loaded: the load reads it
	}
	if _, ok := ix.rows[p.NodeID]; !ok {
		i, _ := slices.BinarySearch(ix.ids, p.NodeID)
		ix.ids = slices.Insert(ix.ids, i, p.NodeID)
	}
	ix.rows[p.NodeID] = p
}

// committed applies a committed transaction's patches.
func (ix *placeIndex) committed(patches []placementPatch) {
	if len(patches) == 0 {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, p := range patches {
		p(ix)
	}
	if ix.reloading {
		ix.during = append(ix.during, patches...)
	}
}

// forget marks nodes to be read again, or everything when nodes is nil: a
// transaction that read rows into the mirror was rolled back, and what it
// read may have included its own writes (or, on SQLite, those of the
// group it was in).
func (ix *placeIndex) forget(nodes []string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if nodes == nil {
		ix.rows, ix.ids, ix.stale = nil, nil, nil
		return
	}
	if ix.rows == nil {
		return
	}
	for _, id := range nodes {
		ix.stale[id] = true
	}
}

// Stale marks nodeID to be read again before it is chosen again: a
// conditional charge refused it, so the mirror's row was not the table's.
func (t *Tx) Stale(nodeID string) {
	if t.index != nil {
		t.index.forget([]string{nodeID})
	}
}

// IndexedCandidates is PlacementCandidates answered from the mirror: the
// nodes it holds that meet q, by node_id, those this process is charging
// in other open transactions last. They may have changed since (on
// PostgreSQL, by another replica): charge one with AllocateCandidate, which
// checks q's constraints in the table. The mirror is read first when this
// process has none yet, when it is older than its maximum age, and for the
// nodes marked stale, in t.
func (t *Tx) IndexedCandidates(q CandidateQuery) ([]*NodePlacement, error) {
	ix := t.index
	if ix == nil {
		return t.PlacementCandidates(q)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.usedAt = time.Now()
	if err := t.refresh(ix); err != nil {
		return nil, err
	}
	i, found := slices.BinarySearch(ix.ids, q.After)
	if found {
		i++
	}
	var out, busy []*NodePlacement
	for ; i < len(ix.ids) && len(out) < q.Limit; i++ {
		p := ix.rows[ix.ids[i]]
		switch {
		case !q.admits(p):
		case ix.busy[p.NodeID] > 0:
			if len(busy) < q.Limit {
				busy = append(busy, p)
			}
		default:
			out = append(out, p)
		}
	}
	return append(out, busy[:min(len(busy), q.Limit-len(out))]...), nil
}

// charging counts a charge on nodeID by t until t ends (settle).
func (t *Tx) charging(nodeID string) {
	ix := t.index
	if ix == nil {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.busy == nil {
		ix.busy = map[string]int{}
	}
	ix.busy[nodeID]++
	t.charged = append(t.charged, nodeID)
}

// settle ends the charges of a transaction that ended (committed or not).
func (ix *placeIndex) settle(charged []string) {
	if len(charged) == 0 {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, id := range charged {
		if ix.busy[id]--; ix.busy[id] <= 0 {
			delete(ix.busy, id)
		}
	}
}

// refresh reads the mirror whole, or its stale rows. Called with mu held.
// A mirror older than its maximum age is read again in the background
// (reloadIndex), not here, where the placements behind this one would
// wait for it: only one that is far older (the background reads failing)
// is read whole here.
func (t *Tx) refresh(ix *placeIndex) error {
	if ix.rows == nil || ix.maxAge > 0 && time.Since(ix.loadedAt) > reloadBackstop*ix.maxAge {
		return t.load(ix)
	}
	if len(ix.stale) == 0 {
		return nil
	}
	ids := make([]string, 0, len(ix.stale))
	for id := range ix.stale {
		ids = append(ids, id)
	}
	t.read = append(t.read, ids...)
	for len(ids) > 0 {
		n := min(len(ids), 500)
		rows, err := t.query(placementColumns+" WHERE node_id IN ("+marks(n)+")", anys(ids[:n])...)
		if err != nil {
			return err
		}
		got, err := scanPlacements(rows)
		if err != nil {
			return err
		}
		for _, p := range got {
			ix.set(p)
		}
		ids = ids[n:]
	}
	clear(ix.stale)
	return nil
}

// load reads every placement row into the mirror. Called with mu held.
func (t *Tx) load(ix *placeIndex) error {
	at := time.Now()
	rows, ids, err := t.readPlacements()
	if err != nil {
		return err
	}
	ix.rows, ix.ids, ix.stale, ix.loadedAt = rows, ids, map[string]bool{}, at
	t.read = nil
	t.readAll = true
	return nil
}

// readPlacements reads every placement row, by node_id.
func (t *Tx) readPlacements() (map[string]*NodePlacement, []string, error) {
	rows := map[string]*NodePlacement{}
	var ids []string
	for after := ""; ; {
		page, err := t.ListNodePlacements(after, 1000)
		if err != nil {
			return nil, nil, err
		}
		for _, p := range page {
			rows[p.NodeID] = p
			ids = append(ids, p.NodeID)
		}
		if len(page) < 1000 {
			return rows, ids, nil
		}
		after = page[len(page)-1].NodeID
	}
}

// reloadBackstop is how many maximum ages old a mirror may grow before a
// placement reads it whole itself.
const reloadBackstop = 3

// reloadDue reports whether the mirror is to be read again in the
// background: it is older than its maximum age, and a placement used it
// since it was read (a ctrl that does not place reads nothing). It marks
// the reload begun.
func (ix *placeIndex) reloadDue(now time.Time) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.reloading || ix.maxAge == 0 || ix.rows == nil || now.Sub(ix.loadedAt) < ix.maxAge || ix.usedAt.Before(ix.loadedAt) {
		return false
	}
	ix.reloading = true
	return true
}

// reloaded installs what a background reload that began at at read (rows
// nil: it failed), with the patches committed while it read applied again
// over it; the nodes marked stale stay so.
func (ix *placeIndex) reloaded(rows map[string]*NodePlacement, ids []string, at time.Time) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	during := ix.during
	ix.reloading, ix.during = false, nil
	if rows == nil || ix.rows == nil || ix.loadedAt.After(at) {
		return // failed; forgotten meanwhile (the next placement reads it); or read whole since
	}
	ix.rows, ix.ids, ix.loadedAt = rows, ids, at
	for _, p := range during {
		p(ix)
	}
}

// reloadIndex reads the mirror again whenever it is due (reloadDue),
// until ctx ends (PostgreSQL: other replicas' writes reach it no other
// way). It reads in a transaction of its own, outside the mirror's lock.
func (s *Store) reloadIndex(ctx context.Context) {
	tick := time.NewTicker(s.index.maxAge / reloadChecks)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.reloadIndexOnce(ctx)
	}
}

// reloadChecks is how many times within the maximum age reloadIndex
// looks whether a reload is due.
const reloadChecks = 3

// reloadIndexOnce reads the mirror again if it is due.
func (s *Store) reloadIndexOnce(ctx context.Context) {
	at := time.Now()
	if !s.index.reloadDue(at) {
		return
	}
	var rows map[string]*NodePlacement
	var ids []string
	err := s.Snapshot(ctx, func(tx *Tx) error {
		var err error
		rows, ids, err = tx.readPlacements()
		return err
	})
	if err != nil {
		rows, ids = nil, nil
	}
	s.index.reloaded(rows, ids, at)
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// admits is q's condition (PlacementCandidates' WHERE clause) on p, in
// memory, with the same integer arithmetic.
func (q CandidateQuery) admits(p *NodePlacement) bool {
	if !p.Admitted || p.Isolated || !p.Live || p.LiveUntil.Before(q.LiveAt) || p.Draining != q.Draining {
		return false
	}
	if q.Fit {
		if !p.Ready || p.ClockSkewed || p.MemoryTight || !fitsIn(p, q.Request, q.Defaults) {
			return false
		}
	}
	for _, pool := range q.Pools {
		if pool != "" && !p.Reaches(pool) {
			return false
		}
	}
	return !q.DefaultPool || p.DefaultPool != ""
}

// fitsIn is the SQL condition fits on p.
func fitsIn(p *NodePlacement, r Resources, d Ratios) bool {
	cpuRatio, memRatio := int64(d.CPU), int64(d.Memory)
	if p.CPURatio > 0 {
		cpuRatio = int64(p.CPURatio)
	}
	if p.MemoryRatio > 0 {
		memRatio = int64(p.MemoryRatio)
	}
	return int64(p.Allocated.CPUMillis)+int64(r.CPUMillis) <= int64(p.CPUMillis)*cpuRatio/1000 &&
		int64(p.Allocated.MemoryBytes)+int64(r.MemoryBytes) <= int64(p.MemoryBytes)*memRatio/1000
}

// AllocateCandidate is AllocateAfter for a node IndexedCandidates chose:
// the conditional update checks, besides the room, every constraint of q
// (Request aside: a's own), that the node offers every capability of
// allOf and at least one of anyOf, so a mirror behind the table never
// places where the table would not. It answers the node's default pool as
// the table has it.
func (t *Tx) AllocateCandidate(held *Allocation, a Allocation, q CandidateQuery, allOf, anyOf []string) (string, bool, error) {
	if held != nil {
		if err := t.release(held); err != nil {
			return "", false, err
		}
	}
	cond := ` AND admitted = 1 AND isolated = 0 AND live = 1 AND live_until >= ? AND draining = 0
		AND ready = 1 AND clock_skewed = 0 AND memory_tight = 0 AND ` + fits
	args := []any{nanos(q.LiveAt), int64(a.CPUMillis), int64(q.Defaults.CPU), int64(a.MemoryBytes), int64(q.Defaults.Memory)}
	has := func(column, item string) string {
		args = append(args, listItem(item))
		return t.d.listHas(column)
	}
	for _, pool := range q.Pools {
		if pool != "" {
			cond += " AND " + has("pools", pool)
		}
	}
	if q.DefaultPool {
		cond += " AND default_pool <> ''"
	}
	for _, c := range allOf {
		cond += " AND " + has("capabilities", c)
	}
	if len(anyOf) > 0 {
		var ors []string
		for _, c := range anyOf {
			ors = append(ors, has("capabilities", c))
		}
		cond += " AND (" + strings.Join(ors, " OR ") + ")"
	}
	pool, ok, err := t.charge(a, cond, args...)
	if ok {
		t.charging(a.NodeID)
	}
	return pool, ok, err
}
