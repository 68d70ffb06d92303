package fleet_test

import (
	"os"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

// onEachDatabase runs fn against a real ctrl on SQLite and on PostgreSQL:
// what these tests check is written by the store in one transaction.
func onEachDatabase(t *testing.T, fn func(t *testing.T, c *testenv.Cluster)) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			dsn := b.DSN(t)
			fn(t, testenv.New(t, fastFleet(), func(cfg *ctrl.Config) { cfg.Database = dsn }))
		})
	}
}

// RetireNode refuses a node that is neither DRAINED nor isolated in its
// current incarnation: one whose session is merely lost, one whose
// admission was revoked, one that was isolated and came back with a new
// incarnation. Nothing is written.
func TestRetireRefusesANodeNeitherDrainedNorIsolated(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, c *testenv.Cluster) {
		e := &lifecycleEnv{c}
		lost := c.StartNode(t, "node-lost", "", "")
		revoked := c.StartNode(t, "node-revoked", "", "")
		back := c.StartNode(t, "node-back", "", "")

		lost.Stop(t)
		c.WaitStatus(t, "node-lost", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		revokeEnrolled(t, c, "node-revoked")
		revoked.Stop(t)
		back.Stop(t)
		c.WaitStatus(t, "node-back", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		isolate(t, c, "node-back")
		c.StartNode(t, "node-back", back.StateDir, back.PoolDir).Stop(t) // a new incarnation, not isolated
		c.WaitStatus(t, "node-back", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)

		for _, id := range []string{"node-lost", "node-revoked", "node-back"} {
			before := c.Registration(t, id)
			if before.GetIsolated() {
				t.Fatalf("%s reads isolated: %v", id, before)
			}
			_, err := e.retire("retire-"+id, id)
			wantCode(t, "retiring "+id+" ("+before.GetStatus().String()+", not isolated)", err, connect.CodeFailedPrecondition, "")
			if after := c.Registration(t, id); after.GetRegistrationVersion() != before.GetRegistrationVersion() || after.GetAdmission() == operatorv1.NodeAdmission_NODE_ADMISSION_RETIRED {
				t.Errorf("a refused retirement changed %s: %v", id, after)
			}
		}
	})
}

// A retired node stops being a member of every pool it declared, shared
// or not, and its pending enrollment grants read REVOKED; its tombstone
// keeps the pools it declared, as history.
func TestRetireLeavesEveryPoolAndRevokesPendingGrants(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, c *testenv.Cluster) {
		e := &lifecycleEnv{c}
		shared := t.TempDir()
		c.StartNodeWithPools(t, "node-a", "", node.Pool{Name: "shared", Dir: shared, Default: true}, node.Pool{Name: "alone", Dir: t.TempDir()})
		c.StartNodeWithPools(t, "node-b", "", node.Pool{Name: "shared", Dir: shared, Default: true})
		c.Grant(t, "node-a")
		if _, err := e.drain("drain-a", "node-a"); err != nil {
			t.Fatal(err)
		}
		res, err := e.retire("retire-a", "node-a")
		if err != nil {
			t.Fatal(err)
		}

		members := func(pool string) []string {
			got, err := c.Nodes.GetStoragePool(ctx, connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: pool}))
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, a := range got.Msg.GetPool().GetAttachments() {
				ids = append(ids, a.GetNodeId())
			}
			return ids
		}
		if got := members("shared"); !slices.Equal(got, []string{"node-b"}) {
			t.Errorf("members of shared after node-a retired: %v, want node-b alone", got)
		}
		if got := members("alone"); len(got) != 0 {
			t.Errorf("members of alone after its only node retired: %v, want none", got)
		}
		var pools []string
		for _, a := range res.GetRegistration().GetStoragePools() {
			pools = append(pools, a.GetStoragePool())
		}
		if !slices.Equal(pools, []string{"shared", "alone"}) {
			t.Errorf("storage_pools of the tombstone: %v, want the pools node-a declared", pools)
		}

		grants, err := c.Enrollment.ListEnrollmentGrants(ctx, connect.NewRequest(&operatorv1.ListEnrollmentGrantsRequest{NodeId: "node-a", IncludeInactive: true}))
		if err != nil {
			t.Fatal(err)
		}
		var revoked int
		for _, g := range grants.Msg.GetGrants() {
			if g.GetState() == operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_ACTIVE {
				t.Errorf("grant %s bound to the retired node is still active", g.GetGrantId())
			}
			if g.GetState() == operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_REVOKED {
				revoked++
			}
		}
		if revoked != 1 || res.GetRevokedEnrollmentGrants() != 1 {
			t.Errorf("%d grants read REVOKED, %d counted; want the one pending grant: %v", revoked, res.GetRevokedEnrollmentGrants(), grants.Msg.GetGrants())
		}
	})
}

// A pool only the retired node reached has no member until another host
// declares it; its objects wait for that host: a Volume deleted meanwhile
// keeps its block file until a new host reaching the pool removes it.
func TestAPoolARetiredNodeAloneReachedWaitsForAnotherHost(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, c *testenv.Cluster) {
		e := &lifecycleEnv{c}
		a := c.StartNode(t, "node-a", "", "")
		created, err := c.Volumes.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{Command: cmd("vol-1"), Spec: &ctrlv1.VolumeSpec{CapacityBytes: 64 << 20}}))
		if err != nil {
			t.Fatal(err)
		}
		id := created.Msg.GetVolume().GetVolumeId()
		volume := func() *ctrlv1.Volume {
			res, err := c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: id}))
			if err != nil {
				t.Fatal(err)
			}
			return res.Msg.GetVolume()
		}
		testenv.WaitFor(t, "the Volume AVAILABLE", func() bool { return volume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE })
		if _, err := e.drain("drain-a", "node-a"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.retire("retire-a", "node-a"); err != nil {
			t.Fatal(err)
		}
		pool := func() *operatorv1.StoragePool {
			res, err := c.Nodes.GetStoragePool(ctx, connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: "default"}))
			if err != nil {
				t.Fatal(err)
			}
			return res.Msg.GetPool()
		}
		if p := pool(); len(p.GetAttachments()) != 0 {
			t.Fatalf("pool of the retired node: %v, want no member", p)
		}
		if _, err := c.Volumes.DeleteVolume(ctx, connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: cmd("del-1"), VolumeId: id})); err != nil {
			t.Fatal(err)
		}
		// No node reaches the pool: nothing can remove the block file.
		if _, err := os.Stat(a.PoolFile(id)); err != nil {
			t.Errorf("the block file with no node reaching its pool: %v", err)
		}

		c.StartNode(t, "node-b", "", a.PoolDir) // another host reaching the same pool
		if p := pool(); len(p.GetAttachments()) != 1 || p.GetAttachments()[0].GetNodeId() != "node-b" {
			t.Errorf("pool once node-b declares it: %v, want node-b its member", p)
		}
		testenv.WaitFor(t, "the Volume DELETED", func() bool { return volume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_DELETED })
		testenv.WaitFor(t, "node-b to remove the block file", func() bool {
			_, err := os.Stat(a.PoolFile(id))
			return os.IsNotExist(err)
		})
		testenv.WaitFor(t, "the pool to keep no copy", func() bool { return pool().GetCleanupCount() == 0 })
	})
}

// Isolation releases every Allocation charged to the node: its allocated
// reads zero and no placement is left on it.
func TestIsolationReleasesEveryAllocationChargedToTheNode(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, c *testenv.Cluster) {
		n := c.StartNode(t, "node-a", "", "")
		p := placer{t, c}
		for _, id := range []string{"create-1", "create-2"} {
			p.wantPlaced(workspaceWaiting(t, c, id), fleet.Placement{CPUMillis: 100, MemoryBytes: 128 << 20, Node: "node-a"}, "node-a")
		}
		if got := c.Registration(t, "node-a").GetAllocated(); got.GetCpuMillis() != 200 || got.GetMemoryBytes() != 256<<20 {
			t.Fatalf("allocated before the isolation: %v", got)
		}
		n.Stop(t)
		c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		res, err := c.Nodes.IsolateNode(ctx, connect.NewRequest(&operatorv1.IsolateNodeRequest{
			Command: cmd("iso-1"), NodeId: "node-a", Incarnation: c.Registration(t, "node-a").GetIncarnation(),
		}))
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Msg.GetRegistration().GetAllocated(); got.GetCpuMillis() != 0 || got.GetMemoryBytes() != 0 {
			t.Errorf("allocated in the isolation's answer: %v, want nothing", got)
		}
		if got := c.Registration(t, "node-a").GetAllocated(); got.GetCpuMillis() != 0 || got.GetMemoryBytes() != 0 {
			t.Errorf("allocated after the isolation: %v, want nothing", got)
		}
		left, err := c.Nodes.ListWorkspacePlacements(ctx, connect.NewRequest(&operatorv1.ListWorkspacePlacementsRequest{
			Filter: &operatorv1.ListWorkspacePlacementsRequest_NodeId{NodeId: "node-a"},
		}))
		if err != nil || len(left.Msg.GetWorkspacePlacements()) != 0 {
			t.Errorf("placements on the isolated node: %v %v, want none", left, err)
		}
	})
}

// ListNodeRegistrations is ordered by node_id with retired tombstones
// included; GetNodeRegistration answers what the list gives for the same
// node, and a node_id that is not one is invalid_argument.
func TestListIsOrderedAndGetAnswersWhatTheListGives(t *testing.T) {
	onEachDatabase(t, func(t *testing.T, c *testenv.Cluster) {
		for _, id := range []string{"node-c", "node-a", "node-b"} {
			c.StartNode(t, id, "", "").Stop(t)
			c.WaitStatus(t, id, operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		}
		isolate(t, c, "node-b")
		if _, err := (&lifecycleEnv{c}).retire("retire-b", "node-b"); err != nil {
			t.Fatal(err)
		}
		list, err := c.Nodes.ListNodeRegistrations(ctx, connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, reg := range list.Msg.GetRegistrations() {
			ids = append(ids, reg.GetNodeId())
			if got := c.Registration(t, reg.GetNodeId()); !proto.Equal(got, reg) {
				t.Errorf("GetNodeRegistration(%s)\n %v\nListNodeRegistrations gave\n %v", reg.GetNodeId(), got, reg)
			}
		}
		if !slices.Equal(ids, []string{"node-a", "node-b", "node-c"}) {
			t.Errorf("registrations in the order %v, want by node_id, the retired node-b included", ids)
		}
		for _, bad := range []string{"", "Node_A"} {
			_, err := c.Nodes.GetNodeRegistration(ctx, connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: bad}))
			wantCode(t, "GetNodeRegistration("+bad+")", err, connect.CodeInvalidArgument, "node_id")
		}
	})
}
