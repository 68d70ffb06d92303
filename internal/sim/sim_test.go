package sim_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/sim"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/testenv"
)

const (
	mib        = 1 << 20
	simNodes   = 50
	sharedPool = "sim-shared"
)

var ctx = context.Background()

// start runs a ctrl with the simulation's catalog and a fleet of simNodes
// simulated nodes whose default pool is the shared one.
func start(t *testing.T) (*testenv.Cluster, *sim.Fleet) {
	t.Helper()
	c, f, _ := startNodes(t, simNodes)
	return c, f
}

// startNodes is start with nodes simulated nodes, and stops them (at the
// test's end, or before with stop).
func startNodes(t *testing.T, nodes int) (c *testenv.Cluster, f *sim.Fleet, stop func()) {
	t.Helper()
	return startNodesWith(t, nodes, nil)
}

// oneNode is a ctrl with one simulated node, READY, its pool given a
// capacity; configure, when set, completes the fleet's configuration
// (OnCommand, Refuse).
func oneNode(t *testing.T, configure func(*sim.Config)) (*testenv.Cluster, *sim.Fleet) {
	t.Helper()
	c, f, _ := startNodesWith(t, 1, configure)
	testenv.WaitFor(t, "the simulated node READY", func() bool {
		ready, err := readyNodes(c)
		return err == nil && len(ready) == 1
	})
	c.EnsureCapacity(t, sharedPool, sim.DefaultPoolBytes)
	return c, f
}

// startNodesWith is startNodes with the fleet's configuration completed by
// configure, when set.
func startNodesWith(t *testing.T, nodes int, configure func(*sim.Config)) (c *testenv.Cluster, f *sim.Fleet, stop func()) {
	t.Helper()
	c = testenv.New(t)
	if err := sim.RegisterCatalog(ctx, c.Ctrl.Catalog(), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	grant, err := sim.CreateGrant(ctx, c.Enrollment, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	fctx, cancel := context.WithCancel(ctx)
	cfg := sim.Config{
		Endpoint: c.Ctrl.NodeEndpoint, Grant: grant, Nodes: nodes, NodesPerConnection: 20,
		SharedPool: sharedPool, SharedPoolDefault: true, Logger: testenv.Logger(),
	}
	if configure != nil {
		configure(&cfg)
	}
	f, err = sim.Start(fctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceFunc(func() {
		cancel()
		f.Wait()
	})
	t.Cleanup(stop)
	return c, f, stop
}

// readyNodes lists the registrations that are READY.
func readyNodes(c *testenv.Cluster) ([]*operatorv1.NodeRegistration, error) {
	var out []*operatorv1.NodeRegistration
	token := ""
	for {
		res, err := c.Nodes.ListNodeRegistrations(ctx, connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{
			PageSize: 1000, PageToken: token, Statuses: []operatorv1.NodeRegistrationStatus{operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY},
		}))
		if err != nil {
			return nil, err
		}
		out = append(out, res.Msg.GetRegistrations()...)
		if token = res.Msg.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

func TestSimulatedNodesBecomeReadyAndSaySo(t *testing.T) {
	c, f := start(t)
	var ready []*operatorv1.NodeRegistration
	testenv.WaitFor(t, fmt.Sprintf("%d simulated nodes READY", simNodes), func() bool {
		var err error
		ready, err = readyNodes(c)
		return err == nil && len(ready) == simNodes
	})
	// Observations and clock measurements of many sessions share
	// transactions; each still lands on its own node's registration.
	testenv.WaitFor(t, "a clock measurement and a second observation of every node", func() bool {
		all, err := readyNodes(c)
		if err != nil || len(all) != simNodes {
			return false
		}
		for _, n := range all {
			if n.GetSession().GetClock().GetMeasuredAt() == nil || n.GetObservation().GetObservationVersion() < 2 {
				return false
			}
		}
		return true
	})
	if got := f.Connections(); got != simNodes/20+1 {
		t.Errorf("the fleet uses %d connections, want %d (20 nodes a connection)", got, simNodes/20+1)
	}
	if got := f.Established(); got != simNodes {
		t.Errorf("%d sessions established, want %d", got, simNodes)
	}
	for _, n := range ready {
		if !strings.HasPrefix(n.GetNodeId(), "sim-") || !strings.HasPrefix(n.GetSession().GetAgentVersion(), "sim-") {
			t.Errorf("node %s (agent %q) does not say it is a simulation", n.GetNodeId(), n.GetSession().GetAgentVersion())
		}
		caps := strings.Join(n.GetObservation().GetCapabilities(), " ")
		if !strings.Contains(caps, sim.Capability) || strings.Contains(caps, "provider.qemu") {
			t.Errorf("node %s advertises %q, want %s and no real provider", n.GetNodeId(), caps, sim.Capability)
		}
		pools := map[string]bool{}
		for _, a := range n.GetStoragePools() {
			pools[a.GetStoragePool()] = a.GetDefaultPool()
		}
		if def, ok := pools[sharedPool]; !ok || !def || len(pools) != 2 {
			t.Errorf("node %s declares pools %v, want its own and %s as default", n.GetNodeId(), pools, sharedPool)
		}
		if n.GetObservation().GetResources().GetMemoryBytes() != sim.DefaultResources.GetMemoryBytes() {
			t.Errorf("node %s offers %v", n.GetNodeId(), n.GetObservation().GetResources())
		}
	}
}

// nodeRunning is the simulated node that runs an execution of workspace,
// or "" when none does.
func nodeRunning(f *sim.Fleet, workspace string) (string, int) {
	found, count := "", 0
	for _, id := range f.NodeIDs() {
		for _, instance := range f.Running(id) {
			if strings.HasPrefix(instance, workspace+".") {
				found = id
				count++
			}
		}
	}
	return found, count
}

func waitState(t *testing.T, c *testenv.Cluster, id string, want ctrlv1.WorkspaceState) *ctrlv1.Workspace {
	t.Helper()
	var w *ctrlv1.Workspace
	testenv.WaitFor(t, fmt.Sprintf("Workspace %s %s", id, want), func() bool {
		res, err := c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
		if err != nil {
			return false
		}
		w = res.Msg.GetWorkspace()
		if w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED {
			t.Fatalf("Workspace %s FAILED: %v", id, w.GetFailure())
		}
		return w.GetState() == want
	})
	return w
}

func TestWorkspacesRunOnSimulatedNodes(t *testing.T) {
	c, f := start(t)
	testenv.WaitFor(t, "simulated nodes READY", func() bool {
		ready, err := readyNodes(c)
		return err == nil && len(ready) == simNodes
	})
	// A pool takes no new objects until it has a capacity.
	c.EnsureCapacity(t, sharedPool, sim.DefaultPoolBytes)
	const n = 10
	ids := make([]string, n)
	for i := range ids {
		spec := &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{MemoryBytes: 256 * mib}}
		if i%2 == 1 { // the others get the API's default: a NEW Volume, here in the shared pool
			spec.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
		}
		res, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
			Command: &ctrlv1.CommandMetadata{CommandId: fmt.Sprintf("sim-create-%d", i)}, Spec: spec,
		}))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = res.Msg.GetWorkspace().GetWorkspaceId()
	}
	for i, id := range ids {
		w := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
		node, count := nodeRunning(f, id)
		if count != 1 || !strings.HasPrefix(node, "sim-") {
			t.Fatalf("Workspace %s is AVAILABLE with %d executions on simulated nodes (%q)", id, count, node)
		}
		layer := &nodev1.BlockFileRef{StoragePool: sharedPool, Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_WRITABLE_LAYER, ObjectId: id}
		if !f.HasBlockFile(layer) {
			t.Errorf("Workspace %s: no writable layer in the shared pool", id)
		}
		if b := w.GetSpec().GetVolume(); i%2 == 0 && !f.HasBlockFile(&nodev1.BlockFileRef{
			StoragePool: sharedPool, Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME, ObjectId: b.GetVolumeId(),
		}) {
			t.Errorf("Workspace %s: its Volume %q has no block file in the shared pool", id, b.GetVolumeId())
		}
	}

	stopped, deleted := ids[0], ids[1]
	if _, err := c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "sim-stop"}, WorkspaceId: stopped,
	})); err != nil {
		t.Fatal(err)
	}
	w := waitState(t, c, stopped, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	if d := w.GetLastStop().GetDurability(); d != ctrlv1.StopDurability_STOP_DURABILITY_CONFIRMED {
		t.Errorf("stop durability %v, want CONFIRMED (a simulated guest always syncs)", d)
	}
	if node, _ := nodeRunning(f, stopped); node != "" {
		t.Errorf("stopped Workspace %s still runs on %s", stopped, node)
	}

	if _, err := c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "sim-delete"}, WorkspaceId: deleted,
	})); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, deleted, ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED)
	if node, _ := nodeRunning(f, deleted); node != "" {
		t.Errorf("deleted Workspace %s still runs on %s", deleted, node)
	}
	if f.HasBlockFile(&nodev1.BlockFileRef{StoragePool: sharedPool, Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_WRITABLE_LAYER, ObjectId: deleted}) {
		t.Errorf("deleted Workspace %s: its writable layer is still in the pool", deleted)
	}
}

// A start's answer carries the execution's report, which ctrl records as
// its first guest observation, so the node's observations that say the
// same rewrite nothing (issue 15). Two Workspaces on the one node: through
// the node's observations after both starts the first Workspace keeps the
// guest observation its start recorded.
func TestAStartsReportIsItsFirstObservation(t *testing.T) {
	c, _ := oneNode(t, nil)
	first := createWithoutVolume(t, c, "report-first")
	obs := waitState(t, c, first, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE).GetGuestObservation()
	if obs.GetCondition() != ctrlv1.GuestCondition_GUEST_CONDITION_RESPONDING || obs.GetObservedAt() == nil {
		t.Fatalf("guest observation at the start %v, want RESPONDING, observed", obs)
	}
	waitExecutions(t, c, 1)
	waitState(t, c, createWithoutVolume(t, c, "report-second"), ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	waitExecutions(t, c, 2)
	if got := waitState(t, c, first, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE).GetGuestObservation(); !proto.Equal(got, obs) {
		t.Errorf("an observation saying what the start reported rewrote the guest observation: %v, was %v", got, obs)
	}
}

// How many executions a node runs is served from memory by the ctrl
// holding the node's session, with the newest observation's time and
// version (issue 15): the observations that follow starts write nothing,
// and the session's end writes what was served, so that the versions go
// on from it.
func TestExecutionCountsAreServedFromMemory(t *testing.T) {
	c, _, stop := startNodes(t, 1)
	var ready *operatorv1.NodeRegistration
	testenv.WaitFor(t, "the simulated node READY", func() bool {
		nodes, err := readyNodes(c)
		if err == nil && len(nodes) == 1 {
			ready = nodes[0]
		}
		return ready != nil
	})
	id := ready.GetNodeId()
	c.EnsureCapacity(t, sharedPool, sim.DefaultPoolBytes)
	for i := range 3 {
		waitState(t, c, createWithoutVolume(t, c, fmt.Sprintf("count-%d", i)), ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	}
	waitExecutions(t, c, 3)
	served := c.Registration(t, id).GetObservation()
	if served.GetObservationVersion() <= ready.GetObservation().GetObservationVersion() ||
		!served.GetObservedAt().AsTime().After(ready.GetObservation().GetObservedAt().AsTime()) {
		t.Errorf("observation served after three starts %v, want a later version and time than %v", served, ready.GetObservation())
	}
	if stored := storedObservation(t, c, id); stored.GetExecutionCount() != 0 {
		t.Errorf("the stored registration counts %d executions, want the 0 of the node's first observation: an observation after a start was written", stored.GetExecutionCount())
	}

	stop()
	testenv.WaitFor(t, "the node's session ended", func() bool { return !c.Registration(t, id).GetSession().GetLive() })
	stored := storedObservation(t, c, id)
	if stored.GetExecutionCount() != 3 || stored.GetObservationVersion() < served.GetObservationVersion() {
		t.Errorf("stored at the session's end %v, want 3 executions and a version not before the %d served", stored, served.GetObservationVersion())
	}
}

// storedObservation reads the node's observation summary as its
// registration stores it, not as a replica serves it.
func storedObservation(t *testing.T, c *testenv.Cluster, nodeID string) *operatorv1.NodeObservationSummary {
	t.Helper()
	var n *operatorv1.NodeRegistration
	if err := c.Ctrl.Store().Tx(ctx, func(tx *store.Tx) error {
		var err error
		n, err = tx.GetNode(nodeID, false)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n.GetObservation()
}

// restart stops Workspace id and starts it again (commands "stop"+n and
// "start"+n), and returns it once AVAILABLE.
func restart(t *testing.T, c *testenv.Cluster, id, n string) *ctrlv1.Workspace {
	t.Helper()
	if _, err := c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: "stop" + n}, WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	if _, err := c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: "start" + n}, WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	return waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
}

func createWithoutVolume(t *testing.T, c *testenv.Cluster, commandID string) string {
	t.Helper()
	res, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: commandID}, Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{MemoryBytes: 256 * mib},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetWorkspace().GetWorkspaceId()
}

// waitExecutions waits until the one node's registration was written with
// n executions: the observation after the last start was.
func waitExecutions(t *testing.T, c *testenv.Cluster, n uint32) {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("the node's observation of %d executions written", n), func() bool {
		ready, err := readyNodes(c)
		return err == nil && len(ready) == 1 && ready[0].GetObservation().GetExecutionCount() == n
	})
}

// TestARampStartsTheNodesOverIt: with Ramp, node i of n starts no sooner
// than Ramp×i/n after Start, so the instants a fleet reports at spread as
// a real fleet's do; a negative ramp is refused.
func TestARampStartsTheNodesOverIt(t *testing.T) {
	c := testenv.New(t)
	grant, err := sim.CreateGrant(ctx, c.Enrollment, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sim.Config{Endpoint: c.Ctrl.NodeEndpoint, Grant: grant, Nodes: 2, Logger: testenv.Logger()}
	cfg.Ramp = -time.Second
	if _, err := sim.Start(ctx, cfg); err == nil || !strings.Contains(err.Error(), "ramp") {
		t.Fatalf("a negative ramp: err %v, want one naming the ramp", err)
	}
	const ramp = 4 * time.Second
	cfg.Ramp = ramp
	fctx, cancel := context.WithCancel(ctx)
	t0 := time.Now()
	f, err := sim.Start(fctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); f.Wait() })
	testenv.WaitFor(t, "both simulated nodes' sessions established", func() bool { return f.Established() == 2 })
	if took := time.Since(t0); took < ramp/2 {
		t.Errorf("both nodes were up %v after Start, before the second's start at %v", took, ramp/2)
	}
}
