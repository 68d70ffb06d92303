package fleet_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/testenv"
)

func wantCode(t *testing.T, what string, err error, code connect.Code, field string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Errorf("%s: %v, want %v", what, err, code)
	} else if field != "" && apierr.FieldOf(err) != field {
		t.Errorf("%s: field %q, want %q", what, apierr.FieldOf(err), field)
	}
}

// The cluster-wide defaults: built-in 1x at version 1, replaced under the
// version read, ratios in [1, 16000], replayed by command_id.
func TestOvercommitDefaults(t *testing.T) {
	c := testenv.New(t, fastFleet())
	got, err := c.Nodes.GetOvercommitDefaults(ctx, connect.NewRequest(&operatorv1.GetOvercommitDefaultsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	d := got.Msg.GetDefaults()
	if d.GetCpuThousandths() != 1000 || d.GetMemoryThousandths() != 1000 || d.GetVersion() != 1 || d.GetUpdatedAt() != nil {
		t.Errorf("built-in defaults: %v", d)
	}
	set := func(id string, version uint64, cpu, memory uint32) (*operatorv1.OvercommitDefaults, error) {
		res, err := c.Nodes.SetOvercommitDefaults(ctx, connect.NewRequest(&operatorv1.SetOvercommitDefaultsRequest{
			Command: cmd(id), ExpectedVersion: version, CpuThousandths: cpu, MemoryThousandths: memory,
		}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetDefaults(), nil
	}
	for _, bad := range []struct {
		cpu, memory uint32
		field       string
	}{{0, 1000, "cpu_thousandths"}, {16001, 1000, "cpu_thousandths"}, {1000, 0, "memory_thousandths"}, {1000, 16001, "memory_thousandths"}} {
		_, err := set("bad", 1, bad.cpu, bad.memory)
		wantCode(t, "ratios out of range", err, connect.CodeInvalidArgument, bad.field)
	}
	_, err = set("", 1, 1000, 1000)
	wantCode(t, "no command_id", err, connect.CodeInvalidArgument, "command.command_id")
	_, err = set("stale", 7, 2000, 2000)
	wantCode(t, "a stale version", err, connect.CodeFailedPrecondition, "")

	d, err = set("set-1", 1, 1, 16000)
	if err != nil || d.GetCpuThousandths() != 1 || d.GetMemoryThousandths() != 16000 || d.GetVersion() != 2 || d.GetUpdatedAt() == nil {
		t.Fatalf("set: %v %v", d, err)
	}
	if again, err := set("set-1", 1, 1, 16000); err != nil || !proto.Equal(again, d) {
		t.Errorf("replay: %v %v", again, err)
	}
	_, err = set("set-1", 2, 1500, 1500)
	wantCode(t, "set-1 with other input", err, connect.CodeAlreadyExists, "")
	if same, err := set("set-2", 2, 1, 16000); err != nil || same.GetVersion() != 2 {
		t.Errorf("the same ratios again: %v %v, want version 2 unchanged", same, err)
	}
	// Nothing refused above changed the defaults.
	got, _ = c.Nodes.GetOvercommitDefaults(ctx, connect.NewRequest(&operatorv1.GetOvercommitDefaultsRequest{}))
	if !proto.Equal(got.Msg.GetDefaults(), d) {
		t.Errorf("defaults now %v, want %v", got.Msg.GetDefaults(), d)
	}
}

// A node's overrides: each ratio with its source, a ratio left out
// clearing its override, registration_version advancing on a change; the
// rules of a node command (version, retired, unknown).
func TestSetNodeOvercommit(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c := testenv.New(t, db, fastFleet())
		n := c.StartNode(t, "node-a", "", "")
		reg := c.Registration(t, "node-a")
		host := reg.GetObservation().GetResources()
		set := func(id string, version uint64, cpu, memory *uint32) (*operatorv1.NodeRegistration, error) {
			res, err := c.Nodes.SetNodeOvercommit(ctx, connect.NewRequest(&operatorv1.SetNodeOvercommitRequest{
				Command: cmd(id), NodeId: "node-a", ExpectedRegistrationVersion: version, CpuThousandths: cpu, MemoryThousandths: memory,
			}))
			if err != nil {
				return nil, err
			}
			return res.Msg.GetRegistration(), nil
		}
		_, err := set("bad", reg.GetRegistrationVersion(), ptr(uint32(0)), nil)
		wantCode(t, "a zero ratio", err, connect.CodeInvalidArgument, "cpu_thousandths")
		_, err = set("bad", reg.GetRegistrationVersion(), nil, ptr(uint32(16001)))
		wantCode(t, "a ratio above 16000", err, connect.CodeInvalidArgument, "memory_thousandths")
		_, err = set("stale", reg.GetRegistrationVersion()+5, ptr(uint32(2000)), nil)
		wantCode(t, "a stale registration_version", err, connect.CodeFailedPrecondition, "")

		got, err := set("set-1", reg.GetRegistrationVersion(), ptr(uint32(2500)), nil)
		if err != nil {
			t.Fatal(err)
		}
		o := got.GetOvercommit()
		if o.GetCpu().GetThousandths() != 2500 || o.GetCpu().GetSource() != operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE ||
			o.GetMemory().GetThousandths() != 1000 || o.GetMemory().GetSource() != operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_DEFAULT {
			t.Errorf("overcommit with a CPU override: %v", o)
		}
		if got.GetSchedulable().GetCpuMillis() != host.GetCpuMillis()*5/2 || got.GetSchedulable().GetMemoryBytes() != host.GetMemoryBytes() ||
			got.GetSchedulable().GetDiskBytes() != host.GetDiskBytes() {
			t.Errorf("schedulable %v of host %v at 2.5x CPU", got.GetSchedulable(), host)
		}
		if got.GetRegistrationVersion() != reg.GetRegistrationVersion()+1 {
			t.Errorf("registration_version %d after a change, want %d", got.GetRegistrationVersion(), reg.GetRegistrationVersion()+1)
		}
		if again, err := set("set-1", reg.GetRegistrationVersion(), ptr(uint32(2500)), nil); err != nil || again.GetOvercommit().GetCpu().GetThousandths() != 2500 {
			t.Errorf("replay: %v %v", again, err)
		}
		// The new default applies to the resource the node does not override.
		setDefaults(t, c, "defaults-1", 1, 3000, 4000)
		reg = c.Registration(t, "node-a")
		if reg.GetOvercommit().GetCpu().GetThousandths() != 2500 || reg.GetOvercommit().GetMemory().GetThousandths() != 4000 {
			t.Errorf("after new defaults: %v", reg.GetOvercommit())
		}
		cleared, err := set("clear", reg.GetRegistrationVersion(), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cpu := cleared.GetOvercommit().GetCpu(); cpu.GetThousandths() != 3000 || cpu.GetSource() != operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_DEFAULT {
			t.Errorf("CPU once its override is cleared: %v, want the 3x default", cpu)
		}
		if unchanged, err := set("clear-again", cleared.GetRegistrationVersion(), nil, nil); err != nil || unchanged.GetRegistrationVersion() != cleared.GetRegistrationVersion() {
			t.Errorf("clearing nothing: %v %v, want the registration unchanged", unchanged, err)
		}

		_, err = c.Nodes.SetNodeOvercommit(ctx, connect.NewRequest(&operatorv1.SetNodeOvercommitRequest{Command: cmd("unknown"), NodeId: "node-z"}))
		wantCode(t, "an unknown node", err, connect.CodeNotFound, "")
		n.Stop(t)
		c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		isolate(t, c, "node-a")
		if _, err := c.Nodes.RetireNode(ctx, connect.NewRequest(&operatorv1.RetireNodeRequest{Command: cmd("retire"), NodeId: "node-a"})); err != nil {
			t.Fatal(err)
		}
		_, err = set("retired", c.Registration(t, "node-a").GetRegistrationVersion(), ptr(uint32(2000)), nil)
		wantCode(t, "a retired node", err, connect.CodeFailedPrecondition, "")
	})
}

func isolate(t *testing.T, c *testenv.Cluster, id string) {
	t.Helper()
	if _, err := c.Nodes.IsolateNode(ctx, connect.NewRequest(&operatorv1.IsolateNodeRequest{
		Command: cmd("isolate-" + id), NodeId: id, Incarnation: c.Registration(t, id).GetIncarnation(),
	})); err != nil {
		t.Fatal(err)
	}
}

// workspaceWaiting creates a Workspace whose create waits before
// placement (a template but no platform is registered), so that a test can
// place it.
func workspaceWaiting(t *testing.T, c *testenv.Cluster, id string) string {
	t.Helper()
	c.EnsureTemplate(t)
	res, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: cmd(id), Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: 100, MemoryBytes: 128 << 20}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetWorkspace().GetWorkspaceId()
}

// ListWorkspacePlacements: exactly one filter, rows ordered by
// workspace_id with the Workspace's state, Instance and Allocation, a
// page token bound to its filter, not_found for a node or Workspace that
// does not exist and an empty page for an unknown Instance.
func TestListWorkspacePlacements(t *testing.T) {
	c := testenv.New(t, fastFleet())
	c.StartNode(t, "node-a", "", "")
	c.StartNode(t, "node-b", "", "")
	p := placer{t, c}
	var ids []string
	for i, node := range []string{"node-a", "node-a", "node-a", "node-b"} {
		ws := workspaceWaiting(t, c, "create-"+string(rune('1'+i)))
		p.wantPlaced(ws, fleet.Placement{CPUMillis: 100, MemoryBytes: 128 << 20, Node: node}, node)
		ids = append(ids, ws)
	}
	idle := workspaceWaiting(t, c, "create-idle") // not placed: no row
	list := func(req *operatorv1.ListWorkspacePlacementsRequest) (*operatorv1.ListWorkspacePlacementsResponse, error) {
		res, err := c.Nodes.ListWorkspacePlacements(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	byNode := func(id, token string, size uint32) (*operatorv1.ListWorkspacePlacementsResponse, error) {
		return list(&operatorv1.ListWorkspacePlacementsRequest{Filter: &operatorv1.ListWorkspacePlacementsRequest_NodeId{NodeId: id}, PageSize: size, PageToken: token})
	}
	first, err := byNode("node-a", "", 2)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := byNode("node-a", first.GetNextPageToken(), 2)
	if err != nil {
		t.Fatal(err)
	}
	rows := append(first.GetWorkspacePlacements(), rest.GetWorkspacePlacements()...)
	if len(rows) != 3 || first.GetNextPageToken() == "" || rest.GetNextPageToken() != "" {
		t.Fatalf("node-a's placements in pages of 2: %v then %v", first, rest)
	}
	for i, r := range rows {
		if i > 0 && rows[i-1].GetWorkspaceId() >= r.GetWorkspaceId() {
			t.Errorf("rows not ordered by workspace_id: %v", rows)
		}
		if r.GetNodeId() != "node-a" || r.GetWorkspaceState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING ||
			r.GetAllocation().GetCpuMillis() != 100 || r.GetAllocation().GetMemoryBytes() != 128<<20 ||
			r.GetAllocation().GetDiskBytes() != store.ExecutionDiskBytes || r.GetAllocatedAt() == nil ||
			!strings.HasPrefix(r.GetInstanceId(), r.GetWorkspaceId()+".") {
			t.Errorf("row %v", r)
		}
	}
	one, err := list(&operatorv1.ListWorkspacePlacementsRequest{Filter: &operatorv1.ListWorkspacePlacementsRequest_WorkspaceId{WorkspaceId: ids[3]}})
	if err != nil || len(one.GetWorkspacePlacements()) != 1 || one.GetWorkspacePlacements()[0].GetNodeId() != "node-b" {
		t.Errorf("by workspace: %v %v", one, err)
	}
	instance := one.GetWorkspacePlacements()[0].GetInstanceId()
	if byInstance, err := list(&operatorv1.ListWorkspacePlacementsRequest{Filter: &operatorv1.ListWorkspacePlacementsRequest_InstanceId{InstanceId: instance}}); err != nil ||
		len(byInstance.GetWorkspacePlacements()) != 1 || byInstance.GetWorkspacePlacements()[0].GetWorkspaceId() != ids[3] {
		t.Errorf("by instance: %v %v", byInstance, err)
	}
	if none, err := list(&operatorv1.ListWorkspacePlacementsRequest{Filter: &operatorv1.ListWorkspacePlacementsRequest_WorkspaceId{WorkspaceId: idle}}); err != nil || len(none.GetWorkspacePlacements()) != 0 {
		t.Errorf("a Workspace not placed: %v %v, want no row", none, err)
	}
	if none, err := list(&operatorv1.ListWorkspacePlacementsRequest{Filter: &operatorv1.ListWorkspacePlacementsRequest_InstanceId{InstanceId: "ws-none.abc"}}); err != nil || len(none.GetWorkspacePlacements()) != 0 {
		t.Errorf("an unknown instance: %v %v, want an empty page", none, err)
	}
	_, err = list(&operatorv1.ListWorkspacePlacementsRequest{})
	wantCode(t, "no filter", err, connect.CodeInvalidArgument, "filter")
	_, err = byNode("node-z", "", 0)
	wantCode(t, "an unknown node", err, connect.CodeNotFound, "")
	_, err = list(&operatorv1.ListWorkspacePlacementsRequest{Filter: &operatorv1.ListWorkspacePlacementsRequest_WorkspaceId{WorkspaceId: "ws-none"}})
	wantCode(t, "an unknown workspace", err, connect.CodeNotFound, "")
	_, err = byNode("node-b", first.GetNextPageToken(), 2)
	wantCode(t, "node-a's token with node-b", err, connect.CodeInvalidArgument, "page_token")
	_, err = list(&operatorv1.ListWorkspacePlacementsRequest{Filter: &operatorv1.ListWorkspacePlacementsRequest_WorkspaceId{WorkspaceId: ids[0]}, PageToken: first.GetNextPageToken()})
	wantCode(t, "a node filter's token with a workspace filter", err, connect.CodeInvalidArgument, "page_token")

	// Stopping what was placed (here: deleting the Workspace whose create
	// waits) releases its Allocation.
	if _, err := c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: cmd("delete-3"), WorkspaceId: ids[3]})); err != nil {
		t.Fatal(err)
	}
	if after, err := byNode("node-b", "", 0); err != nil || len(after.GetWorkspacePlacements()) != 0 {
		t.Errorf("node-b's placements after its Workspace was deleted: %v %v", after, err)
	}
}

func createOnNode(c *testenv.Cluster, id, node string, cpu uint32) (*operatorv1.CreateWorkspaceOnNodeResponse, error) {
	res, err := c.Nodes.CreateWorkspaceOnNode(ctx, connect.NewRequest(&operatorv1.CreateWorkspaceOnNodeRequest{NodeId: node, Request: &ctrlv1.CreateWorkspaceRequest{
		Command: cmd(id), Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: cpu, MemoryBytes: 128 << 20}},
	}}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func commandOf(t *testing.T, c *testenv.Cluster, id string) *ctrlv1.WorkspaceCommand {
	t.Helper()
	res, err := c.Workspaces.GetWorkspaceCommand(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{CommandId: id}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetCommand()
}

// CreateWorkspaceOnNode's admission: the node is part of the command's
// input, an unknown node admits nothing; a pinned node that does not fit
// fails the creation at PLACING as an ordinary placement that finds no
// node does, once the placement timeout passed, and no other node is
// chosen.
func TestCreateWorkspaceOnNodeAdmissionAndRefusal(t *testing.T) {
	eachDatabase(t, func(t *testing.T, db testenv.Option) {
		c := testenv.New(t, db, testenv.WithFleet(fleet.Config{
			ObservationInterval: 200 * time.Millisecond, ClockProbeInterval: 100 * time.Millisecond, ClockTolerance: time.Second,
			PlacementTimeout: 2 * time.Second,
		}))
		c.StartNode(t, "node-a", "", "")
		c.StartNode(t, "node-b", "", "")
		c.UnbootableCatalog(t)

		_, err := createOnNode(c, "create-z", "node-z", 100)
		wantCode(t, "an unknown node", err, connect.CodeNotFound, "")
		if _, err := c.Workspaces.GetWorkspaceCommand(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{CommandId: "create-z"})); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("the command refused for an unknown node: %v, want not_found (never admitted)", err)
		}
		_, err = createOnNode(c, "create-bad", "Node_A", 100)
		wantCode(t, "a malformed node_id", err, connect.CodeInvalidArgument, "node_id")

		// More CPU than node-b has: it fails, though node-a is no better and
		// node-b is the only candidate anyway.
		huge := 16 * hostCPU(t, c, "node-b")
		created, err := createOnNode(c, "create-1", "node-b", huge)
		if err != nil {
			t.Fatal(err)
		}
		ws := created.GetResponse().GetWorkspace().GetWorkspaceId()
		if again, err := createOnNode(c, "create-1", "node-b", huge); err != nil || again.GetResponse().GetWorkspace().GetWorkspaceId() != ws {
			t.Errorf("replay: %v %v", again, err)
		}
		_, err = createOnNode(c, "create-1", "node-a", huge)
		wantCode(t, "create-1 with another node", err, connect.CodeAlreadyExists, "")
		_, err = c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
			Command: cmd("create-1"), Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: huge, MemoryBytes: 128 << 20}},
		}))
		wantCode(t, "create-1 sent to CreateWorkspace", err, connect.CodeAlreadyExists, "")

		testenv.WaitFor(t, "the pinned create to wait for its node", func() bool {
			return strings.Contains(commandOf(t, c, "create-1").GetWaitingFor(), "node node-b cannot run it")
		})
		testenv.WaitFor(t, "the pinned create to fail", func() bool {
			return commandOf(t, c, "create-1").GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED
		})
		cmdNow := commandOf(t, c, "create-1")
		f := cmdNow.GetFailure()
		if cmdNow.GetKind() != ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_CREATE || f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING ||
			f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED || !f.GetRetryable() || !strings.Contains(f.GetMessage(), "node-b:") ||
			strings.Contains(f.GetMessage(), "node-a") {
			t.Errorf("the pinned create's command: %v", cmdNow)
		}
		res, err := c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: ws}))
		if err != nil || res.Msg.GetWorkspace().GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED ||
			res.Msg.GetWorkspace().GetFailure().GetReason() != ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED {
			t.Errorf("the Workspace: %v %v, want FAILED, resource_exhausted", res.Msg.GetWorkspace(), err)
		}

		// An ordinary create that fits nowhere fails the same way, naming
		// every node.
		plain, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
			Command: cmd("create-2"), Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: huge, MemoryBytes: 128 << 20}},
		}))
		if err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "the ordinary create to fail", func() bool {
			return commandOf(t, c, "create-2").GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED
		})
		if f := commandOf(t, c, "create-2").GetFailure(); f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING ||
			f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED || !strings.Contains(f.GetMessage(), "node-a:") || !strings.Contains(f.GetMessage(), "node-b:") {
			t.Errorf("the ordinary create's failure: %v", f)
		}

		// StartWorkspaceOnNode follows the same rules: its node is part of
		// the input, an unknown node admits nothing.
		start := func(id, node string) error {
			_, err := c.Nodes.StartWorkspaceOnNode(ctx, connect.NewRequest(&operatorv1.StartWorkspaceOnNodeRequest{
				NodeId: node, Request: &ctrlv1.StartWorkspaceRequest{Command: cmd(id), WorkspaceId: plain.Msg.GetWorkspace().GetWorkspaceId()},
			}))
			return err
		}
		wantCode(t, "a start on an unknown node", start("start-z", "node-z"), connect.CodeNotFound, "")
		if err := start("start-1", "node-a"); err != nil {
			t.Fatal(err)
		}
		wantCode(t, "start-1 with another node", start("start-1", "node-b"), connect.CodeAlreadyExists, "")
		_, err = c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd("start-1"), WorkspaceId: plain.Msg.GetWorkspace().GetWorkspaceId()}))
		wantCode(t, "start-1 sent to StartWorkspace", err, connect.CodeAlreadyExists, "")
		testenv.WaitFor(t, "the pinned start to fail", func() bool {
			return commandOf(t, c, "start-1").GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED
		})
		if f := commandOf(t, c, "start-1").GetFailure(); f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING || strings.Contains(f.GetMessage(), "node-b") {
			t.Errorf("the pinned start's failure: %v", f)
		}
	})
}
