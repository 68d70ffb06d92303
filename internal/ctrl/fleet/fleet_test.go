package fleet_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/testenv"
)

var ctx = context.Background()

func TestMeasureClock(t *testing.T) {
	sent := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name               string
		rtt, nodeAhead     time.Duration
		tolerance          time.Duration
		offset, uncertaint time.Duration
		exceeds            bool
	}{
		{"in step", 100 * time.Millisecond, 0, time.Second, 0, 50 * time.Millisecond, false},
		{"ahead beyond tolerance", 100 * time.Millisecond, 2 * time.Second, 500 * time.Millisecond, 2 * time.Second, 50 * time.Millisecond, true},
		{"behind beyond tolerance", 20 * time.Millisecond, -time.Second, 500 * time.Millisecond, -time.Second, 10 * time.Millisecond, true},
		// |offset| less its uncertainty is within tolerance: not exceeded.
		{"uncertain", 400 * time.Millisecond, 600 * time.Millisecond, 500 * time.Millisecond, 600 * time.Millisecond, 200 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			received := sent.Add(tc.rtt)
			nodeTime := sent.Add(tc.rtt / 2).Add(tc.nodeAhead) // node clock at the middle of the round trip
			c := fleet.MeasureClock(sent, received, nodeTime, tc.tolerance)
			if c.GetOffset().AsDuration() != tc.offset || c.GetUncertainty().AsDuration() != tc.uncertaint || c.GetExceedsTolerance() != tc.exceeds {
				t.Errorf("got offset %v uncertainty %v exceeds %v", c.GetOffset().AsDuration(), c.GetUncertainty().AsDuration(), c.GetExceedsTolerance())
			}
			if !c.GetMeasuredAt().AsTime().Equal(received) {
				t.Errorf("measured_at %v, want when ctrl received the reading", c.GetMeasuredAt().AsTime())
			}
		})
	}
}

func fastFleet() testenv.Option { return testenv.FastFleet() }

func TestNodeJoinsReportsAndIsUnavailableWhenItsSessionIsLost(t *testing.T) {
	c := testenv.New(t, fastFleet())
	n := c.StartNode(t, "node-a", "", "")
	var reg *operatorv1.NodeRegistration
	testenv.WaitFor(t, "a clock measurement and a usage sample", func() bool {
		reg = c.Registration(t, "node-a")
		return reg.GetSession().GetClock() != nil && reg.GetHostUsage() != nil
	})
	switch {
	case reg.GetAdmission() != operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED || reg.GetIncarnation() != 1:
		t.Errorf("admission %v incarnation %d", reg.GetAdmission(), reg.GetIncarnation())
	case reg.GetObservation().GetResources().GetCpuMillis() == 0 || reg.GetObservation().GetResources().GetMemoryBytes() == 0:
		t.Errorf("resources %v", reg.GetObservation().GetResources())
	case !slices.Contains(reg.GetObservation().GetCapabilities(), capability.BlockFile):
		t.Errorf("capabilities %v", reg.GetObservation().GetCapabilities())
	case len(reg.GetStoragePools()) != 1 || !reg.GetStoragePools()[0].GetDefaultPool() || !reg.GetStoragePools()[0].GetAvailable():
		t.Errorf("pools %v", reg.GetStoragePools())
	case !reg.GetSession().GetLive() || reg.GetHostUsage().MemoryAvailableBytes == nil:
		t.Errorf("session %v usage %v", reg.GetSession(), reg.GetHostUsage())
	}
	clock := reg.GetSession().GetClock()
	if off := clock.GetOffset().AsDuration(); off > time.Second || off < -time.Second || clock.GetExceedsTolerance() {
		t.Errorf("a node on this machine's clock measured %v ± %v (exceeds %v)", off, clock.GetUncertainty().AsDuration(), clock.GetExceedsTolerance())
	}

	n.Stop(t)
	lost := c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	if lost.GetSession().GetLive() || lost.GetSession().GetClock() != nil || lost.GetHostUsage() != nil || lost.GetSession().GetDisconnectedAt() == nil {
		t.Errorf("after the session was lost: %v", lost)
	}

	// The agent starts again from its state: no grant needed, a new incarnation.
	c.StartNode(t, "node-a", n.StateDir, n.PoolDir)
	if got := c.Registration(t, "node-a").GetIncarnation(); got != 2 {
		t.Errorf("incarnation after a restart: %d, want 2", got)
	}
}

func TestListNodeRegistrationsFiltersByStatus(t *testing.T) {
	c := testenv.New(t, fastFleet())
	c.StartNode(t, "node-a", "", "")
	b := c.StartNode(t, "node-b", "", "")
	b.Stop(t)
	c.WaitStatus(t, "node-b", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	res, err := c.Nodes.ListNodeRegistrations(ctx, connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{
		Statuses: []operatorv1.NodeRegistrationStatus{operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY},
	}))
	if err != nil || len(res.Msg.GetRegistrations()) != 1 || res.Msg.GetRegistrations()[0].GetNodeId() != "node-a" {
		t.Errorf("READY nodes: %v %v", res, err)
	}
	all, err := c.Nodes.ListNodeRegistrations(ctx, connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{PageSize: 1}))
	if err != nil || len(all.Msg.GetRegistrations()) != 1 || all.Msg.GetNextPageToken() == "" {
		t.Fatalf("first page: %v %v", all, err)
	}
	_, err = c.Nodes.ListNodeRegistrations(ctx, connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{PageToken: all.Msg.GetNextPageToken(),
		Statuses: []operatorv1.NodeRegistrationStatus{operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY}}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a page token with another filter: %v", err)
	}
	if _, err := c.Nodes.GetNodeRegistration(ctx, connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: "never"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("unknown node: %v", err)
	}
}

func TestEnrollmentGrantRules(t *testing.T) {
	c := testenv.New(t)
	client := nodev1connect.NewNodeSessionServiceClient(httpClient(), c.Ctrl.NodeEndpoint)
	enroll := func(secret, id string) error {
		_, err := client.Enroll(ctx, connect.NewRequest(&nodev1.EnrollRequest{GrantSecret: secret, NodeId: id, Incarnation: 1}))
		return err
	}
	bound := c.Grant(t, "node-a")
	if err := enroll(bound, "node-b"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a grant bound to node-a enrolling node-b: %v", err)
	}
	if err := enroll("kbg_unknown", "node-a"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("unknown secret: %v", err)
	}
	if err := enroll(bound, "Node_A"); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("bad node_id: %v", err)
	}
	if err := enroll(bound, "node-a"); err != nil {
		t.Fatalf("enroll: %v", err)
	}
	if err := enroll(bound, "node-a"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a consumed one-time grant: %v", err)
	}

	req := &operatorv1.CreateEnrollmentGrantRequest{Command: &ctrlv1.CommandMetadata{CommandId: "g-1"}, Reusable: true}
	first, err := c.Enrollment.CreateEnrollmentGrant(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Enrollment.CreateEnrollmentGrant(ctx, connect.NewRequest(req))
	if err != nil || again.Msg.GetSecret() != first.Msg.GetSecret() || again.Msg.GetGrant().GetGrantId() != first.Msg.GetGrant().GetGrantId() {
		t.Errorf("replay of CreateEnrollmentGrant: %v %v", again, err)
	}
	if _, err := c.Enrollment.RevokeEnrollmentGrant(ctx, connect.NewRequest(&operatorv1.RevokeEnrollmentGrantRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "r-1"}, GrantId: first.Msg.GetGrant().GetGrantId(),
	})); err != nil {
		t.Fatal(err)
	}
	if err := enroll(first.Msg.GetSecret(), "node-c"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a revoked grant: %v", err)
	}
	if _, err := c.Enrollment.CreateEnrollmentGrant(ctx, connect.NewRequest(&operatorv1.CreateEnrollmentGrantRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "g-2"}, NodeId: "-bad",
	})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("bad node_id in a grant: %v", err)
	}
}

// A reusable grant lists the nodes that enrolled with it in the order they
// did, read alone and in a list, and revoking it with its enrolled nodes
// revokes each of them.
func TestAReusableGrantListsTheNodesItEnrolledInOrder(t *testing.T) {
	c := testenv.New(t)
	client := nodev1connect.NewNodeSessionServiceClient(httpClient(), c.Ctrl.NodeEndpoint)
	grant, err := c.Enrollment.CreateEnrollmentGrant(ctx, connect.NewRequest(&operatorv1.CreateEnrollmentGrantRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "g-1"}, Reusable: true,
	}))
	if err != nil {
		t.Fatal(err)
	}
	order := []string{"node-c", "node-a", "node-b"}
	for _, id := range order {
		if _, err := client.Enroll(ctx, connect.NewRequest(&nodev1.EnrollRequest{GrantSecret: grant.Msg.GetSecret(), NodeId: id, Incarnation: 1})); err != nil {
			t.Fatalf("enroll %s: %v", id, err)
		}
	}
	id := grant.Msg.GetGrant().GetGrantId()
	got, err := c.Enrollment.GetEnrollmentGrant(ctx, connect.NewRequest(&operatorv1.GetEnrollmentGrantRequest{GrantId: id}))
	if err != nil || !slices.Equal(got.Msg.GetGrant().GetEnrolledNodeIds(), order) || got.Msg.GetGrant().GetLastUsedAt() == nil {
		t.Errorf("GetEnrollmentGrant = %v %v, want enrolled %v and a last use", got, err, order)
	}
	list, err := c.Enrollment.ListEnrollmentGrants(ctx, connect.NewRequest(&operatorv1.ListEnrollmentGrantsRequest{}))
	if err != nil || len(list.Msg.GetGrants()) != 1 || !proto.Equal(list.Msg.GetGrants()[0], got.Msg.GetGrant()) {
		t.Errorf("ListEnrollmentGrants = %v %v, want %v", list, err, got.Msg.GetGrant())
	}
	revoked, err := c.Enrollment.RevokeEnrollmentGrant(ctx, connect.NewRequest(&operatorv1.RevokeEnrollmentGrantRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "r-1"}, GrantId: id, RevokeEnrolledNodes: true,
	}))
	if err != nil || !slices.Equal(revoked.Msg.GetRevokedNodeIds(), order) || !slices.Equal(revoked.Msg.GetGrant().GetEnrolledNodeIds(), order) {
		t.Errorf("RevokeEnrollmentGrant = %v %v, want %v revoked", revoked, err, order)
	}
}

func TestSessionNeedsTheNodesCredential(t *testing.T) {
	c := testenv.New(t)
	client := nodev1connect.NewNodeSessionServiceClient(httpClient(), c.Ctrl.NodeEndpoint)
	stream := client.Session(ctx)
	stream.RequestHeader().Set("Authorization", "Bearer kbn_forged")
	stream.RequestHeader().Set(fleet.HeaderNodeID, "node-a")
	_ = stream.Send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_Hello{Hello: &nodev1.NodeHello{NodeId: "node-a"}}})
	_, err := stream.Receive()
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a forged credential: %v", err)
	}
	_ = stream.CloseRequest()
	_ = stream.CloseResponse()
}

// A Volume's life on a real node: created, grown, removed, with its block
// file following.
func TestVolumeBlockFileFollowsTheVolume(t *testing.T) {
	c := testenv.New(t, fastFleet())
	n := c.StartNode(t, "node-a", "", "")
	res, err := c.Volumes.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "v-1"}, Spec: &ctrlv1.VolumeSpec{CapacityBytes: 64 << 20},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetVolume().GetVolumeId()
	state := func() *ctrlv1.Volume {
		got, err := c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: id}))
		if err != nil {
			t.Fatal(err)
		}
		return got.Msg.GetVolume()
	}
	testenv.WaitFor(t, "AVAILABLE", func() bool { return state().GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE })
	if fi, err := os.Stat(n.PoolFile(id)); err != nil || fi.Size() != 64<<20 {
		t.Fatalf("block file: %v %v", fi, err)
	}
	if _, err := c.Volumes.ResizeVolume(ctx, connect.NewRequest(&ctrlv1.ResizeVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "v-2"}, VolumeId: id, CapacityBytes: 32 << 20})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("shrink: %v", err)
	}
	if _, err := c.Volumes.ResizeVolume(ctx, connect.NewRequest(&ctrlv1.ResizeVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "v-3"}, VolumeId: id, CapacityBytes: 128 << 20})); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "grown", func() bool {
		v := state()
		return v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE && v.GetSpec().GetCapacityBytes() == 128<<20
	})
	if fi, err := os.Stat(n.PoolFile(id)); err != nil || fi.Size() != 128<<20 {
		t.Errorf("grown block file: %v %v", fi, err)
	}
	if _, err := c.Volumes.DeleteVolume(ctx, connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "v-4"}, VolumeId: id})); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "DELETED", func() bool { return state().GetState() == ctrlv1.VolumeState_VOLUME_STATE_DELETED })
	if _, err := os.Stat(n.PoolFile(id)); !os.IsNotExist(err) {
		t.Errorf("block file after delete: %v", err)
	}
}
