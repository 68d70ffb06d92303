package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// RunPlacement runs the store tests of placement (node rows, Allocations,
// settings written under compare-and-swap) against databases from b.
func RunPlacement(t *testing.T, b Backend) {
	for name, fn := range map[string]func(*testing.T, string){
		"PlacementRowFollowsRegistration":    testPlacementRowFollowsRegistration,
		"AllocateChecksSchedulable":          testAllocateChecksSchedulable,
		"CandidatesFilterAndPage":            testCandidatesFilterAndPage,
		"IndexedCandidatesFollowWrites":      testIndexedCandidatesFollowWrites,
		"ListAllocations":                    testListAllocations,
		"ConcurrentAllocationsNeverOverbook": testConcurrentAllocationsNeverOverbook,
		"PutSettingComparesAndSwaps":         testPutSettingComparesAndSwaps,
		"PlacementBackfilled":                testPlacementBackfilled,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.DSN(t))
		})
	}
}

var seen = time.Unix(1_800_000_000, 0).UTC()

// placeableNode is a READY node with a live session, 2 CPUs and 4 GiB.
func placeableNode(id string) *operatorv1.NodeRegistration {
	return &operatorv1.NodeRegistration{
		NodeId: id, Admission: operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED,
		Status:  operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY,
		Session: &operatorv1.NodeSessionSummary{Live: true, LastSeenAt: timestamppb.New(seen), LiveUntil: timestamppb.New(seen.Add(time.Minute))},
		Observation: &operatorv1.NodeObservationSummary{
			Resources:    &operatorv1.NodeResources{CpuMillis: 2000, MemoryBytes: 4 << 30},
			Capabilities: []string{"provider.qemu", "storage.block_file"},
		},
		StoragePools: []*operatorv1.StoragePoolAttachment{
			{NodeId: id, StoragePool: "default", DefaultPool: true, Available: true},
			{NodeId: id, StoragePool: "gone", Available: false},
		},
	}
}

func putNodes(t *testing.T, s *store.Store, nodes ...*operatorv1.NodeRegistration) {
	t.Helper()
	mustTx(t, s, func(tx *store.Tx) error {
		for _, n := range nodes {
			if err := tx.PutNode(n); err != nil {
				return err
			}
		}
		return nil
	})
}

func placementOf(t *testing.T, s *store.Store, id string) *store.NodePlacement {
	t.Helper()
	var p *store.NodePlacement
	mustTx(t, s, func(tx *store.Tx) error {
		var err error
		p, err = tx.GetNodePlacement(id)
		return err
	})
	return p
}

var unit = store.Ratios{CPU: 1000, Memory: 1000}

func allocation(ws, node string, cpu uint64, mem uint64) store.Allocation {
	return store.Allocation{WorkspaceID: ws, InstanceID: ws + ".1", NodeID: node, CPUMillis: cpu, MemoryBytes: mem, AllocatedAt: seen}
}

func allocate(t *testing.T, s *store.Store, a store.Allocation, defaults store.Ratios) bool {
	t.Helper()
	var ok bool
	mustTx(t, s, func(tx *store.Tx) error {
		var err error
		ok, err = tx.Allocate(a, defaults)
		return err
	})
	return ok
}

func testPlacementRowFollowsRegistration(t *testing.T, dsn string) {
	s := Open(t, dsn)
	n := placeableNode("node-a")
	n.Overcommit = &operatorv1.NodeOvercommit{Cpu: &operatorv1.OvercommitRatio{Thousandths: 4000, Source: operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE}}
	n.Session.Clock = &operatorv1.NodeClockObservation{ExceedsTolerance: true}
	n.MemoryTight = &operatorv1.NodeMemoryTight{ThresholdBytes: 1}
	putNodes(t, s, n)
	p := placementOf(t, s, "node-a")
	want := fmt.Sprint(&store.NodePlacement{
		NodeID: "node-a", Admitted: true, Live: true, Ready: true, ClockSkewed: true, MemoryTight: true, LastSeenAt: seen,
		LiveUntil: seen.Add(time.Minute),
		CPUMillis: 2000, MemoryBytes: 4 << 30, CPURatio: 4000, Capabilities: []string{"provider.qemu", "storage.block_file"},
		Pools: []string{"default"}, DefaultPool: "default",
	})
	if got := fmt.Sprint(p); got != want {
		t.Errorf("placement row\n got %s\nwant %s", got, want)
	}
	if !p.Has("provider.qemu") || p.Has("provider.sim") || !p.Reaches("default") || p.Reaches("gone") {
		t.Errorf("capabilities %v, pools %v", p.Capabilities, p.Pools)
	}

	// The drain and the Allocations' sums survive a new registration.
	mustTx(t, s, func(tx *store.Tx) error { return tx.SetNodeDraining("node-a", true) })
	if !allocate(t, s, allocation("ws-a", "node-a", 500, 1<<30), unit) {
		t.Fatal("an allocation that fits was refused")
	}
	n.Isolated, n.Session.Live, n.Session.Clock, n.MemoryTight = true, false, nil, nil
	n.Admission = operatorv1.NodeAdmission_NODE_ADMISSION_REVOKED
	putNodes(t, s, n)
	p = placementOf(t, s, "node-a")
	if !p.Draining || p.Allocated != (store.Resources{CPUMillis: 500, MemoryBytes: 1 << 30, DiskBytes: store.ExecutionDiskBytes, Count: 1}) {
		t.Errorf("after PutNode: draining %v, allocated %+v", p.Draining, p.Allocated)
	}
	if p.Admitted || !p.Isolated || p.Live || p.ClockSkewed || p.MemoryTight {
		t.Errorf("after PutNode: %+v", p)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		if _, err := tx.GetNodePlacement("node-none"); err != store.ErrNotFound {
			t.Errorf("placement of an unknown node: %v, want not found", err)
		}
		return nil
	})
}

func testAllocateChecksSchedulable(t *testing.T, dsn string) {
	s := Open(t, dsn)
	putNodes(t, s, placeableNode("node-a"))
	if !allocate(t, s, allocation("ws-a", "node-a", 1500, 3<<30), unit) {
		t.Fatal("1500 of 2000 cpu_millis was refused")
	}
	if allocate(t, s, allocation("ws-b", "node-a", 1000, 1<<20), unit) {
		t.Error("1500 + 1000 cpu_millis fit in 2000")
	}
	if allocate(t, s, allocation("ws-b", "node-a", 100, 2<<30), unit) {
		t.Error("3 GiB + 2 GiB fit in 4 GiB")
	}
	if allocate(t, s, allocation("ws-b", "node-none", 0, 0), unit) {
		t.Error("an allocation on an unknown node was made")
	}
	// A higher default ratio makes room; a node override wins over it.
	if !allocate(t, s, allocation("ws-b", "node-a", 1000, 1<<20), store.Ratios{CPU: 1500, Memory: 1000}) {
		t.Error("2500 cpu_millis did not fit in 2000 x 1.5")
	}
	n := placeableNode("node-a")
	n.Overcommit = &operatorv1.NodeOvercommit{Cpu: &operatorv1.OvercommitRatio{Thousandths: 1000, Source: operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE}}
	putNodes(t, s, n)
	if allocate(t, s, allocation("ws-c", "node-a", 1, 0), store.Ratios{CPU: 16000, Memory: 16000}) {
		t.Error("the node's 1x override did not hold against the 16x default")
	}
	// Allocating again for a Workspace replaces its Allocation.
	if !allocate(t, s, allocation("ws-b", "node-a", 500, 1<<20), unit) {
		t.Error("replacing ws-b's 1000 cpu_millis with 500 did not fit")
	}
	if got := placementOf(t, s, "node-a").Allocated; got != (store.Resources{CPUMillis: 2000, MemoryBytes: 3<<30 + 1<<20, DiskBytes: 2 * store.ExecutionDiskBytes, Count: 2}) {
		t.Errorf("allocated %+v, want 2000 cpu_millis, 3 GiB + 1 MiB, two executions' disk, 2 allocations", got)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.ReleaseAllocation("ws-a", "ws-a.other"); err != nil { // another Instance's: kept
			return err
		}
		if err := tx.ReleaseAllocation("ws-none", ""); err != nil {
			return err
		}
		if a, err := tx.GetAllocation("ws-a"); err != nil || a.CPUMillis != 1500 || a.InstanceID != "ws-a.1" || !a.AllocatedAt.Equal(seen) {
			t.Errorf("ws-a's allocation: %+v %v", a, err)
		}
		return tx.ReleaseAllocation("ws-a", "ws-a.1")
	})
	if got := placementOf(t, s, "node-a").Allocated; got != (store.Resources{CPUMillis: 500, MemoryBytes: 1 << 20, DiskBytes: store.ExecutionDiskBytes, Count: 1}) {
		t.Errorf("allocated after a release %+v", got)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		n, err := tx.ReleaseNodeAllocations("node-a")
		if err != nil || n != 1 {
			t.Errorf("released %d, %v; want 1", n, err)
		}
		if _, err := tx.GetAllocation("ws-b"); err != store.ErrNotFound {
			t.Errorf("ws-b's allocation after the node's release: %v", err)
		}
		sums, err := tx.NodeAllocations()
		if err != nil || len(sums) != 0 {
			t.Errorf("sums after the release: %v %v", sums, err)
		}
		return err
	})
}

func testCandidatesFilterAndPage(t *testing.T, dsn string) {
	s := Open(t, dsn)
	var nodes []*operatorv1.NodeRegistration
	variant := func(id string, change func(n *operatorv1.NodeRegistration)) {
		n := placeableNode(id)
		change(n)
		nodes = append(nodes, n)
	}
	variant("a-ready", func(*operatorv1.NodeRegistration) {})
	variant("b-revoked", func(n *operatorv1.NodeRegistration) { n.Admission = operatorv1.NodeAdmission_NODE_ADMISSION_REVOKED })
	variant("c-isolated", func(n *operatorv1.NodeRegistration) { n.Isolated = true })
	variant("d-offline", func(n *operatorv1.NodeRegistration) { n.Session.Live = false })
	variant("e-silent", func(n *operatorv1.NodeRegistration) { // its holder's lease passed
		n.Session.LastSeenAt, n.Session.LiveUntil = timestamppb.New(seen.Add(-time.Hour)), timestamppb.New(seen.Add(-time.Second))
	})
	variant("f-syncing", func(n *operatorv1.NodeRegistration) {
		n.Status = operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_SYNCING
	})
	variant("g-skewed", func(n *operatorv1.NodeRegistration) {
		n.Session.Clock = &operatorv1.NodeClockObservation{ExceedsTolerance: true}
	})
	variant("h-tight", func(n *operatorv1.NodeRegistration) { n.MemoryTight = &operatorv1.NodeMemoryTight{} })
	variant("i-draining", func(*operatorv1.NodeRegistration) {})
	variant("j-small", func(n *operatorv1.NodeRegistration) { n.Observation.Resources.CpuMillis = 500 })
	variant("k-ready", func(*operatorv1.NodeRegistration) {})
	// Records written before leases: live for 75 s after last seen.
	variant("l-unleased", func(n *operatorv1.NodeRegistration) {
		n.Session.LastSeenAt, n.Session.LiveUntil = timestamppb.New(seen.Add(-time.Minute)), nil
	})
	variant("m-unleased-lapsed", func(n *operatorv1.NodeRegistration) {
		n.Session.LastSeenAt, n.Session.LiveUntil = timestamppb.New(seen.Add(-76*time.Second)), nil
	})
	putNodes(t, s, nodes...)
	mustTx(t, s, func(tx *store.Tx) error { return tx.SetNodeDraining("i-draining", true) })

	// The table and the mirror placement chooses from (IndexedCandidates)
	// answer every query alike.
	ids := func(q store.CandidateQuery) string {
		table := candidateIDs(t, s, q, (*store.Tx).PlacementCandidates)
		if mirror := candidateIDs(t, s, q, (*store.Tx).IndexedCandidates); mirror != table {
			t.Errorf("the mirror's candidates %q, the table's %q (%+v)", mirror, table, q)
		}
		return table
	}
	fit := store.CandidateQuery{Limit: 2, LiveAt: seen, Fit: true, Request: store.Resources{CPUMillis: 1000, MemoryBytes: 1 << 30}, Defaults: unit}
	if got := ids(fit); got != "a-ready k-ready l-unleased" {
		t.Errorf("candidates for an execution: %s", got)
	}
	fit.Defaults.CPU = 2000
	if got := ids(fit); got != "a-ready j-small k-ready l-unleased" {
		t.Errorf("candidates at 2x CPU: %s", got)
	}
	// Pool work needs no room and goes to syncing, skewed and tight nodes
	// too; draining ones are asked for apart.
	if got := ids(store.CandidateQuery{Limit: 3, LiveAt: seen}); got != "a-ready f-syncing g-skewed h-tight j-small k-ready l-unleased" {
		t.Errorf("candidates for pool work: %s", got)
	}
	if got := ids(store.CandidateQuery{Limit: 3, LiveAt: seen, Pools: []string{"default"}}); got != "a-ready f-syncing g-skewed h-tight j-small k-ready l-unleased" {
		t.Errorf("candidates reaching pool default: %s", got)
	}
	if got := ids(store.CandidateQuery{Limit: 3, LiveAt: seen, Pools: []string{"default", "gone"}}); got != "" {
		t.Errorf("candidates reaching pool gone (unavailable everywhere): %s", got)
	}
	if got := ids(store.CandidateQuery{Limit: 3, LiveAt: seen, Pools: []string{"defaul"}}); got != "" {
		t.Errorf("candidates reaching pool defaul (a prefix of one): %s", got)
	}
	if got := ids(store.CandidateQuery{Limit: 3, LiveAt: seen, Draining: true}); got != "i-draining" {
		t.Errorf("draining candidates: %s", got)
	}
	var all []*store.NodePlacement
	mustTx(t, s, func(tx *store.Tx) error {
		var err error
		all, err = tx.ListNodePlacements("b-revoked", 3)
		return err
	})
	if len(all) != 3 || all[0].NodeID != "c-isolated" || all[2].NodeID != "e-silent" {
		t.Errorf("ListNodePlacements after b-revoked: %v", all)
	}
}

// candidateIDs pages every candidate of q through read.
func candidateIDs(t *testing.T, s *store.Store, q store.CandidateQuery, read func(*store.Tx, store.CandidateQuery) ([]*store.NodePlacement, error)) string {
	t.Helper()
	var out []string
	mustTx(t, s, func(tx *store.Tx) error {
		out = nil
		for {
			batch, err := read(tx, q)
			if err != nil {
				return err
			}
			for _, p := range batch {
				out = append(out, p.NodeID)
			}
			if len(batch) < q.Limit {
				return nil
			}
			q.After = batch[len(batch)-1].NodeID
		}
	})
	return strings.Join(out, " ")
}

// The placement mirror follows every write of this process once it
// commits, and none that rolled back; a charge through it is checked in
// the table, which refuses what the mirror does not yet know; a node
// marked stale is read again. On PostgreSQL a second Store stands for
// another replica, whose writes the mirror does not hear.
func testIndexedCandidatesFollowWrites(t *testing.T, dsn string) {
	s := Open(t, dsn)
	putNodes(t, s, placeableNode("node-a"), placeableNode("node-b"))
	q := store.CandidateQuery{Limit: 8, LiveAt: seen, Fit: true, Request: store.Resources{CPUMillis: 1500, MemoryBytes: 1 << 30}, Defaults: unit,
		Pools: []string{"default"}}
	want := func(step, ids string) {
		t.Helper()
		if got := candidateIDs(t, s, q, (*store.Tx).IndexedCandidates); got != ids {
			t.Errorf("%s: the mirror's candidates %q, want %q", step, got, ids)
		}
	}
	charge := func(tx *store.Tx, ws, node string) (bool, error) {
		pool, ok, err := tx.AllocateCandidate(nil, allocation(ws, node, 1500, 1<<30), q, []string{"storage.block_file"}, []string{"provider.qemu"})
		if ok && pool != "default" {
			t.Errorf("charged %s on %s: default pool %q", ws, node, pool)
		}
		return ok, err
	}
	want("loaded", "node-a node-b")
	mustTx(t, s, func(tx *store.Tx) error {
		if ok, err := charge(tx, "ws-1", "node-a"); !ok || err != nil {
			t.Errorf("charge ws-1 on node-a: %v, %v", ok, err)
		}
		return nil
	})
	want("node-a charged", "node-b")
	undone := errors.New("undone")
	if err := s.Tx(ctx, func(tx *store.Tx) error {
		if _, err := charge(tx, "ws-2", "node-b"); err != nil {
			return err
		}
		return undone
	}); !errors.Is(err, undone) {
		t.Fatal(err)
	}
	want("a charge rolled back", "node-b")
	mustTx(t, s, func(tx *store.Tx) error { return tx.ReleaseAllocation("ws-1", "") })
	want("node-a released", "node-a node-b")
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.SetNodeDraining("node-a", true); err != nil {
			return err
		}
		// Not yet in the mirror, refused by the table all the same.
		if ok, err := charge(tx, "ws-3", "node-a"); ok || err != nil {
			t.Errorf("charge on node-a, draining in this transaction: %v, %v", ok, err)
		}
		return nil
	})
	want("node-a draining", "node-b")
	mustTx(t, s, func(tx *store.Tx) error { return tx.SetNodeDraining("node-a", false) })
	offline := placeableNode("node-b")
	offline.Session.Live = false
	putNodes(t, s, offline)
	want("node-b offline", "node-a")
	putNodes(t, s, placeableNode("node-b"), placeableNode("node-c"))
	want("node-b back, node-c new", "node-a node-b node-c")
	// A transaction that read its own write into the mirror and then
	// rolled back leaves nothing of it there.
	if err := s.Tx(ctx, func(tx *store.Tx) error {
		if err := tx.PutNode(offline); err != nil {
			return err
		}
		tx.Stale("node-b")
		if _, err := tx.IndexedCandidates(q); err != nil {
			return err
		}
		return undone
	}); !errors.Is(err, undone) {
		t.Fatal(err)
	}
	want("node-b offline, rolled back", "node-a node-b node-c")
	// A node charged by a transaction still open comes last, so that
	// concurrent placements spread; once it ended, node_id orders again.
	small := q
	small.Request.CPUMillis = 100
	mustTx(t, s, func(tx *store.Tx) error {
		if ok, err := charge(tx, "ws-6", "node-a"); !ok || err != nil {
			t.Errorf("charge ws-6 on node-a: %v, %v", ok, err)
		}
		rows, err := tx.IndexedCandidates(small)
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.NodeID)
		}
		if got := strings.Join(ids, " "); got != "node-b node-c node-a" {
			t.Errorf("candidates while node-a is being charged: %q", got)
		}
		return err
	})
	if got := candidateIDs(t, s, small, (*store.Tx).IndexedCandidates); got != "node-a node-b node-c" {
		t.Errorf("candidates once the charge committed: %q", got)
	}
	mustTx(t, s, func(tx *store.Tx) error { return tx.ReleaseAllocation("ws-6", "") })
	if !strings.HasPrefix(dsn, "postgres") {
		return // SQLite: no other process may write
	}
	other := Open(t, dsn)
	mustTx(t, other, func(tx *store.Tx) error {
		if ok, err := tx.Allocate(allocation("ws-4", "node-a", 1500, 1<<30), unit); !ok || err != nil {
			t.Errorf("the other replica's charge on node-a: %v, %v", ok, err)
		}
		return nil
	})
	want("charged by another replica", "node-a node-b node-c")
	mustTx(t, s, func(tx *store.Tx) error {
		if ok, err := charge(tx, "ws-5", "node-a"); ok || err != nil {
			t.Errorf("charge on node-a, full in the table: %v, %v", ok, err)
		}
		tx.Stale("node-a")
		return nil
	})
	want("node-a read again", "node-b node-c")
}

func testListAllocations(t *testing.T, dsn string) {
	s := Open(t, dsn)
	putNodes(t, s, placeableNode("node-a"), placeableNode("node-b"))
	for _, a := range []store.Allocation{
		allocation("ws-c", "node-a", 100, 1<<20), allocation("ws-a", "node-a", 100, 1<<20), allocation("ws-b", "node-b", 100, 1<<20),
	} {
		if !allocate(t, s, a, unit) {
			t.Fatalf("%+v refused", a)
		}
	}
	list := func(f store.AllocationFilter, after string, limit int) string {
		var out []string
		mustTx(t, s, func(tx *store.Tx) error {
			got, err := tx.ListAllocations(f, after, limit)
			for _, a := range got {
				out = append(out, a.WorkspaceID+"@"+a.NodeID)
			}
			return err
		})
		return strings.Join(out, " ")
	}
	for _, c := range []struct {
		f     store.AllocationFilter
		after string
		limit int
		want  string
	}{
		{store.AllocationFilter{NodeID: "node-a"}, "", 10, "ws-a@node-a ws-c@node-a"},
		{store.AllocationFilter{NodeID: "node-a"}, "ws-a", 10, "ws-c@node-a"},
		{store.AllocationFilter{NodeID: "node-a"}, "", 1, "ws-a@node-a"},
		{store.AllocationFilter{WorkspaceID: "ws-b"}, "", 10, "ws-b@node-b"},
		{store.AllocationFilter{InstanceID: "ws-c.1"}, "", 10, "ws-c@node-a"},
		{store.AllocationFilter{InstanceID: "ws-c.2"}, "", 10, ""},
	} {
		if got := list(c.f, c.after, c.limit); got != c.want {
			t.Errorf("ListAllocations(%+v, %q, %d) = %q, want %q", c.f, c.after, c.limit, got, c.want)
		}
	}
}

// Placements racing for the last room on one node: exactly as many fit
// as the node holds (on PostgreSQL the transactions really overlap).
func testConcurrentAllocationsNeverOverbook(t *testing.T, dsn string) {
	s := Open(t, dsn)
	putNodes(t, s, placeableNode("node-a"))
	var wg sync.WaitGroup
	var mu sync.Mutex
	made := 0
	for i := range 12 {
		wg.Go(func() {
			var ok bool
			err := s.Tx(ctx, func(tx *store.Tx) error {
				var err error
				ok, err = tx.Allocate(allocation(fmt.Sprintf("ws-%02d", i), "node-a", 400, 1<<20), unit)
				return err
			})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				made++
			}
		})
	}
	wg.Wait()
	if made != 5 {
		t.Errorf("%d allocations of 400 cpu_millis made on 2000, want 5", made)
	}
	if got := placementOf(t, s, "node-a").Allocated; got.CPUMillis != 2000 || got.Count != 5 {
		t.Errorf("allocated %+v", got)
	}
}

func testPutSettingComparesAndSwaps(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		if _, err := tx.InitSetting("ratio", []byte("v1")); err != nil {
			return err
		}
		if ok, err := tx.PutSetting("ratio", []byte("v0"), []byte("v2")); err != nil || ok {
			t.Errorf("a put over a stale value: %v %v", ok, err)
		}
		if ok, err := tx.PutSetting("ratio", []byte("v1"), []byte("v2")); err != nil || !ok {
			t.Errorf("a put over the current value: %v %v", ok, err)
		}
		v, err := tx.Setting("ratio")
		if string(v) != "v2" {
			t.Errorf("setting %q", v)
		}
		return err
	})
}

// testPlacementBackfilled takes a database back to before migration 8 with
// a registration and a running execution; opening it again finds the
// node's placement row and the execution's Allocation (and migration 17
// adds the session's lease to the row again).
func testPlacementBackfilled(t *testing.T, dsn string) {
	s := Open(t, dsn)
	putNodes(t, s, placeableNode("node-a"))
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.SetNodeDraining("node-a", true); err != nil {
			return err
		}
		if err := tx.PutWorkspace(&ctrlv1.Workspace{WorkspaceId: "ws-a", Spec: &ctrlv1.WorkspaceSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 1500, MemoryBytes: 256 << 20},
		}}); err != nil {
			return err
		}
		return tx.PutRuntime(runtimeOn("ws-a", "node-a"))
	})
	s.Close()
	db, _ := openRaw(t, dsn)
	execRaw(t, db, "DROP TABLE allocations", "DROP TABLE node_placement", "DELETE FROM schema_migrations WHERE version IN (8, 17)")
	db.Close()
	again := Open(t, dsn)
	p := placementOf(t, again, "node-a")
	if !p.Admitted || !p.Draining || !p.LiveUntil.Equal(seen.Add(time.Minute)) || p.Allocated != (store.Resources{CPUMillis: 1500, MemoryBytes: 256 << 20, DiskBytes: store.ExecutionDiskBytes, Count: 1}) {
		t.Errorf("backfilled placement row %+v", p)
	}
	mustTx(t, again, func(tx *store.Tx) error {
		a, err := tx.GetAllocation("ws-a")
		if err != nil || a.NodeID != "node-a" || a.InstanceID != "ws-a.1" {
			t.Errorf("backfilled allocation %+v %v", a, err)
		}
		return err
	})
}
