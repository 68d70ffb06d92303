package fleet_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/testenv"
)

// placer places through the fleet of a real ctrl whose nodes are real
// agents: the rules are checked on the registrations their sessions write.
type placer struct {
	t *testing.T
	c *testenv.Cluster
}

// place places Workspace ws (one Instance per call) and returns the node
// chosen, or the refusal.
func (p placer) place(ws string, req fleet.Placement) (string, *fleet.Refusal) {
	p.t.Helper()
	req.WorkspaceID, req.InstanceID = ws, ws+"."+time.Now().Format("150405.000000000")
	var id string
	var refusal *fleet.Refusal
	err := p.c.Ctrl.Store().Tx(ctx, func(tx *store.Tx) error {
		placed, why, err := p.c.Ctrl.Fleet().Place(tx, req)
		if placed != nil {
			id = placed.NodeID
		}
		refusal = why
		return err
	})
	if err != nil {
		p.t.Fatal(err)
	}
	return id, refusal
}

// wantPlaced fails unless ws goes to node.
func (p placer) wantPlaced(ws string, req fleet.Placement, node string) {
	p.t.Helper()
	if got, refusal := p.place(ws, req); got != node {
		p.t.Errorf("%s placed on %q (refusal %v), want %s", ws, got, refusal, node)
	}
}

// wantRefused fails unless ws is refused for reason, naming want.
func (p placer) wantRefused(ws string, req fleet.Placement, reason ctrlv1.FailureReason, want string) {
	p.t.Helper()
	got, refusal := p.place(ws, req)
	switch {
	case got != "":
		p.t.Errorf("%s placed on %s, want it refused (%s)", ws, got, want)
	case refusal.Reason != reason || !strings.Contains(refusal.Message, want):
		p.t.Errorf("%s refused with %v %q, want %v naming %q", ws, refusal.Reason, refusal.Message, reason, want)
	case refusal.Failure().GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING || !refusal.Failure().GetRetryable():
		p.t.Errorf("%s: failure %v, want retryable at PLACING", ws, refusal.Failure())
	}
}

func (p placer) release(ws string) {
	p.t.Helper()
	if err := p.c.Ctrl.Store().Tx(ctx, func(tx *store.Tx) error { return tx.ReleaseAllocation(ws, "") }); err != nil {
		p.t.Fatal(err)
	}
}

func hostCPU(t *testing.T, c *testenv.Cluster, id string) uint32 {
	t.Helper()
	cpu := c.Registration(t, id).GetObservation().GetResources().GetCpuMillis()
	if cpu == 0 {
		t.Fatalf("node %s reports no CPU", id)
	}
	return cpu
}

// Schedulable CPU is the host's times the ratio in effect, less what the
// Allocations there reserve: placement takes the first node by node_id
// with room, refuses as resource_exhausted naming each node's free room
// when none has, follows new ratios at once and evicts nothing when they
// are lowered.
func TestPlacementAdmitsAgainstSchedulableResources(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c := testenv.New(t, db, fastFleet())
		c.StartNode(t, "node-a", "", "")
		c.StartNode(t, "node-b", "", "")
		p := placer{t, c}
		host := hostCPU(t, c, "node-a")
		big := fleet.Placement{CPUMillis: host * 3 / 4, MemoryBytes: 256 << 20}

		p.wantPlaced("ws-1", big, "node-a")
		p.wantPlaced("ws-2", big, "node-b") // node-a has a quarter left
		p.wantRefused("ws-3", big, ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED, "schedulable cpu_millis free")
		reg := c.Registration(t, "node-a")
		if reg.GetAllocated().GetCpuMillis() != big.CPUMillis || reg.GetAllocated().GetMemoryBytes() != 256<<20 ||
			reg.GetAllocated().GetDiskBytes() != store.ExecutionDiskBytes {
			t.Errorf("allocated on node-a: %v, want ws-1's request and one execution's disk", reg.GetAllocated())
		}
		if reg.GetSchedulable().GetCpuMillis() != host || reg.GetOvercommit().GetCpu().GetSource() != operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_DEFAULT {
			t.Errorf("schedulable %v, overcommit %v: want the host's CPU at the 1x default", reg.GetSchedulable(), reg.GetOvercommit())
		}
		// Memory counts as CPU does.
		p.wantRefused("ws-3", fleet.Placement{MemoryBytes: reg.GetSchedulable().GetMemoryBytes()}, ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED, "schedulable MiB free")

		// 2x CPU by default: node-a takes ws-3 now, without any restart.
		d := setDefaults(t, c, "defaults-1", 1, 2000, 1000)
		p.wantPlaced("ws-3", big, "node-a")
		if got := c.Registration(t, "node-a").GetSchedulable().GetCpuMillis(); got != 2*host {
			t.Errorf("schedulable CPU at 2x: %d, want %d", got, 2*host)
		}
		// Back to 1x: nothing is evicted, node-a reads more allocated than
		// schedulable and takes nothing new.
		setDefaults(t, c, "defaults-2", d.GetVersion(), 1000, 1000)
		reg = c.Registration(t, "node-a")
		if reg.GetAllocated().GetCpuMillis() != 2*big.CPUMillis || reg.GetAllocated().GetCpuMillis() <= reg.GetSchedulable().GetCpuMillis() ||
			reg.GetAllocated().GetDiskBytes() != 2*store.ExecutionDiskBytes {
			t.Errorf("after lowering the ratio: allocated %v, schedulable %v; want both Allocations kept, beyond schedulable", reg.GetAllocated(), reg.GetSchedulable())
		}
		p.wantRefused("ws-4", fleet.Placement{CPUMillis: 1, Node: "node-a"}, ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED, "node node-a cannot run it")

		// node-b's own 4x override wins over the default.
		setNode(t, c, "node-b", ptr(uint32(4000)), nil)
		p.wantPlaced("ws-4", fleet.Placement{CPUMillis: 2 * host}, "node-b")
		p.release("ws-4")
		setNode(t, c, "node-b", nil, nil) // cleared: 1x again
		p.wantRefused("ws-4", fleet.Placement{CPUMillis: 2 * host, Node: "node-b"}, ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED, "node-b")

		// Released room is free again.
		p.release("ws-1")
		p.release("ws-3")
		p.wantPlaced("ws-5", big, "node-a")
	})
}

// A node is a candidate only when admitted, READY, not draining, its
// clock within tolerance, its memory not tight, and reaching every pool
// the Workspace's objects live in; a pinned placement has that node as its
// only candidate and says why it does not fit.
func TestPlacementSkipsNodesThatFailAConstraint(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c := testenv.New(t, db, fastFleet())
		fast := t.TempDir()
		c.StartNode(t, "node-a", "", "")
		c.StartNodeWithPools(t, "node-b", "", node.Pool{Name: "default", Dir: t.TempDir(), Default: true}, node.Pool{Name: "fast", Dir: fast})
		// node-c's host has less memory available than its threshold, always.
		c.StartNodeWith(t, "node-c", "", func(cfg *node.Config) { cfg.MemoryTightThreshold = 1 << 62 },
			node.Pool{Name: "default", Dir: t.TempDir(), Default: true})
		// node-d's clock runs an hour ahead until the test sets it right.
		var skew atomic.Int64
		skew.Store(int64(time.Hour))
		c.StartNodeWith(t, "node-d", "", func(cfg *node.Config) {
			cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
		}, node.Pool{Name: "default", Dir: t.TempDir(), Default: true})
		p := placer{t, c}
		small := fleet.Placement{CPUMillis: 1, MemoryBytes: 128 << 20}
		on := func(id string, pools ...string) fleet.Placement {
			q := small
			q.Node, q.Pools = id, pools
			return q
		}

		// Pools: only node-b reaches "fast".
		p.wantPlaced("ws-1", fleet.Placement{Pools: []string{"fast", "default"}}, "node-b")
		p.wantRefused("ws-2", on("node-a", "fast"), ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, `does not reach storage pool "fast"`)
		p.wantRefused("ws-2", fleet.Placement{Pools: []string{"nowhere"}}, ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, `node-a: does not reach storage pool "nowhere"; node-b:`)

		// Memory tight: the node reports it and takes nothing.
		reg := c.Registration(t, "node-c")
		if reg.GetMemoryTight() == nil || reg.GetMemoryTight().GetThresholdBytes() != 1<<62 {
			t.Errorf("memory_tight of node-c: %v", reg.GetMemoryTight())
		}
		p.wantRefused("ws-2", on("node-c"), ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED, "memory is tight")

		// Clock beyond tolerance, then back within it. The registration
		// shows a measurement as it is taken; placement reads it once
		// written, a moment later: the test waits for both.
		written := func(skewed bool) func() bool {
			return func() bool {
				var row *store.NodePlacement
				mustTx(t, c.Ctrl.Store(), func(tx *store.Tx) error {
					rows, err := tx.ListNodePlacements("node-c", 1)
					if len(rows) == 1 && rows[0].NodeID == "node-d" {
						row = rows[0]
					}
					return err
				})
				return row != nil && row.ClockSkewed == skewed
			}
		}
		testenv.WaitFor(t, "node-d's clock measured beyond tolerance", func() bool {
			return c.Registration(t, "node-d").GetSession().GetClock().GetExceedsTolerance()
		})
		testenv.WaitFor(t, "node-d's clock written beyond tolerance", written(true))
		p.wantRefused("ws-2", on("node-d"), ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, "clock is beyond the allowed skew")
		skew.Store(0)
		testenv.WaitFor(t, "node-d's clock back within tolerance", func() bool {
			clock := c.Registration(t, "node-d").GetSession().GetClock()
			return clock != nil && !clock.GetExceedsTolerance()
		})
		testenv.WaitFor(t, "node-d's clock written back within tolerance", written(false))
		p.wantPlaced("ws-2", on("node-d"), "node-d")

		// Drained: skipped, also when pinned.
		if _, err := c.Nodes.DrainNode(ctx, connect.NewRequest(&operatorv1.DrainNodeRequest{Command: cmd("drain-a"), NodeId: "node-a"})); err != nil {
			t.Fatal(err)
		}
		p.wantRefused("ws-3", on("node-a"), ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, "draining")
		p.wantPlaced("ws-3", small, "node-b")

		// A node whose session is lost is no candidate.
		c.StartNode(t, "node-e", "", "").Stop(t)
		c.WaitStatus(t, "node-e", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		p.wantRefused("ws-4", on("node-e"), ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, "no live control session")
		p.wantRefused("ws-4", on("node-z"), ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, "node node-z is not registered")
	})
}

// The host readings a node reports are on its registration while its
// session is live, and gone once it is not.
func TestHostUsageWhileTheSessionIsLive(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c := testenv.New(t, db, fastFleet())
		n := c.StartNode(t, "node-a", "", "")
		var u *operatorv1.NodeHostUsage
		testenv.WaitFor(t, "a usage sample", func() bool {
			u = c.Registration(t, "node-a").GetHostUsage()
			return u != nil
		})
		if u.MemoryAvailableBytes == nil || u.GetMemoryAvailableBytes() == 0 || u.VmCpuMillis == nil || u.GetVmCpuMillis() != 0 ||
			u.VmMemoryBytes == nil || u.GetVmMemoryBytes() != 0 || u.GetObservedAt() == nil {
			t.Errorf("host usage of a node running no VM: %v", u)
		}
		if c.Registration(t, "node-a").GetMemoryTight() != nil {
			t.Error("a node with memory to spare reads memory_tight")
		}
		n.Stop(t)
		reg := c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		if reg.GetHostUsage() != nil || reg.GetMemoryTight() != nil {
			t.Errorf("without a live session: host_usage %v, memory_tight %v", reg.GetHostUsage(), reg.GetMemoryTight())
		}
	})
}

func ptr[T any](v T) *T { return &v }

func setDefaults(t *testing.T, c *testenv.Cluster, id string, version uint64, cpu, memory uint32) *operatorv1.OvercommitDefaults {
	t.Helper()
	res, err := c.Nodes.SetOvercommitDefaults(ctx, connect.NewRequest(&operatorv1.SetOvercommitDefaultsRequest{
		Command: cmd(id), ExpectedVersion: version, CpuThousandths: cpu, MemoryThousandths: memory,
	}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetDefaults()
}

func setNode(t *testing.T, c *testenv.Cluster, id string, cpu, memory *uint32) *operatorv1.NodeRegistration {
	t.Helper()
	res, err := c.Nodes.SetNodeOvercommit(ctx, connect.NewRequest(&operatorv1.SetNodeOvercommitRequest{
		Command: cmd("node-" + time.Now().Format("150405.000000000")), NodeId: id,
		ExpectedRegistrationVersion: c.Registration(t, id).GetRegistrationVersion(), CpuThousandths: cpu, MemoryThousandths: memory,
	}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetRegistration()
}
