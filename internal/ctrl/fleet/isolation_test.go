package fleet_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/node/state"
	"github.com/kibotos/kibotos/internal/testenv"
)

// identity reads the credential and incarnation a stopped node agent kept.
func identity(t *testing.T, n *testenv.Node) state.Identity {
	t.Helper()
	s, err := state.Open(n.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return s.Identity()
}

// session opens a control session as the node would, with its hello at
// incarnation, and returns how ctrl answered it (nil: welcomed).
func session(t *testing.T, c *testenv.Cluster, id state.Identity, incarnation uint64) error {
	t.Helper()
	client := nodev1connect.NewNodeSessionServiceClient(httpClient(), c.Ctrl.NodeEndpoint)
	stream := client.Session(ctx)
	stream.RequestHeader().Set("Authorization", "Bearer "+id.Credential)
	stream.RequestHeader().Set(fleet.HeaderNodeID, id.NodeID)
	_ = stream.Send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_Hello{Hello: &nodev1.NodeHello{NodeId: id.NodeID, Incarnation: incarnation}}})
	_, err := stream.Receive()
	_ = stream.CloseRequest()
	_ = stream.CloseResponse()
	return err
}

func (e *lifecycleEnv) isolate(commandID, node string, incarnation uint64) (*operatorv1.IsolateNodeResponse, error) {
	res, err := e.c.Nodes.IsolateNode(ctx, connect.NewRequest(&operatorv1.IsolateNodeRequest{Command: cmd(commandID), NodeId: node, Incarnation: incarnation}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func (e *lifecycleEnv) retire(commandID, node string) (*operatorv1.RetireNodeResponse, error) {
	res, err := e.c.Nodes.RetireNode(ctx, connect.NewRequest(&operatorv1.RetireNodeRequest{Command: cmd(commandID), NodeId: node}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func (e *lifecycleEnv) drain(commandID, node string) (*operatorv1.DrainNodeResponse, error) {
	res, err := e.c.Nodes.DrainNode(ctx, connect.NewRequest(&operatorv1.DrainNodeRequest{Command: cmd(commandID), NodeId: node}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

type lifecycleEnv struct{ c *testenv.Cluster }

// Isolation is refused while the node holds a live session, applies to its
// current incarnation only, keeps that incarnation out, and ends when the
// node comes back with a new incarnation.
func TestIsolationNeedsTheSessionGoneAndEndsWithANewIncarnation(t *testing.T) {
	c := testenv.New(t, fastFleet())
	e := &lifecycleEnv{c}
	n := c.StartNode(t, "node-a", "", "")
	before := c.Registration(t, "node-a")
	if _, err := e.isolate("iso-1", "node-a", before.GetIncarnation()); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("isolating a connected node: %v, want failed_precondition", err)
	}
	if after := c.Registration(t, "node-a"); after.GetIsolated() || after.GetRegistrationVersion() != before.GetRegistrationVersion() {
		t.Errorf("a refused isolation changed the node: %v", after)
	}

	n.Stop(t)
	c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	if _, err := e.isolate("iso-2", "node-a", before.GetIncarnation()+1); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("isolating an incarnation that is not the current one: %v, want failed_precondition", err)
	}
	res, err := e.isolate("iso-3", "node-a", before.GetIncarnation())
	if err != nil {
		t.Fatal(err)
	}
	reg := res.GetRegistration()
	if !reg.GetIsolated() || reg.GetIsolatedAt() == nil || reg.GetRegistrationVersion() <= before.GetRegistrationVersion() {
		t.Errorf("isolated registration: %v", reg)
	}
	if res.GetFailedWorkspaces() != 0 || res.GetReleasedVolumes() != 0 || res.GetReleasedRetainedLayers() != 0 {
		t.Errorf("a node that held nothing released %v", res)
	}
	if again, err := e.isolate("iso-3", "node-a", before.GetIncarnation()); err != nil || !proto.Equal(again, res) {
		t.Errorf("replay: %v %v", again, err)
	}
	if other, err := e.isolate("iso-4", "node-a", before.GetIncarnation()); err != nil || other.GetRegistration().GetRegistrationVersion() != reg.GetRegistrationVersion() {
		t.Errorf("isolating an isolated node again: %v %v, want it unchanged", other, err)
	}

	// The isolated incarnation may not come back; a new one may.
	id := identity(t, n)
	if err := session(t, c, id, id.Incarnation); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("a session of the isolated incarnation: %v, want failed_precondition", err)
	}
	c.StartNode(t, "node-a", n.StateDir, n.PoolDir)
	back := c.Registration(t, "node-a")
	if back.GetIsolated() || back.GetIsolatedAt() != nil || back.GetIncarnation() != id.Incarnation+1 {
		t.Errorf("after a new incarnation registered: isolated %v at %v, incarnation %d (want %d)",
			back.GetIsolated(), back.GetIsolatedAt(), back.GetIncarnation(), id.Incarnation+1)
	}
}

// RetireNode takes only a DRAINED or isolated node, leaves a RETIRED
// tombstone, revokes the node's pending grants, ends its session, and the
// node_id is refused everywhere after.
func TestRetireEndsANodeForGood(t *testing.T) {
	c := testenv.New(t, fastFleet())
	e := &lifecycleEnv{c}
	n := c.StartNode(t, "node-a", "", "")
	if _, err := e.retire("retire-0", "node-a"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("retiring a READY node: %v, want failed_precondition", err)
	}
	pending := c.Grant(t, "node-a")
	unbound, err := c.Enrollment.CreateEnrollmentGrant(ctx, connect.NewRequest(&operatorv1.CreateEnrollmentGrantRequest{
		Command: cmd("grant-any"), Reusable: true, Ttl: durationpb.New(time.Hour),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := e.drain("drain-1", "node-a"); err != nil || d.GetRegistration().GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_DRAINED {
		t.Fatalf("drain: %v %v", d, err)
	}

	res, err := e.retire("retire-1", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	tomb := res.GetRegistration()
	if tomb.GetAdmission() != operatorv1.NodeAdmission_NODE_ADMISSION_RETIRED || tomb.GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_RETIRED || tomb.GetRetiredAt() == nil {
		t.Errorf("tombstone: %v", tomb)
	}
	if res.GetRevokedEnrollmentGrants() != 1 {
		t.Errorf("revoked_enrollment_grants %d, want 1 (the pending grant bound to node-a)", res.GetRevokedEnrollmentGrants())
	}
	if again, err := e.retire("retire-1", "node-a"); err != nil || !proto.Equal(again, res) {
		t.Errorf("replay: %v %v", again, err)
	}
	testenv.WaitFor(t, "the retired node's session to end", func() bool { return !c.Registration(t, "node-a").GetSession().GetLive() })
	if got := c.Registration(t, "node-a"); got.GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_RETIRED {
		t.Errorf("GetNodeRegistration of a retired node: %v, want its tombstone", got)
	}
	list, err := c.Nodes.ListNodeRegistrations(ctx, connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{
		Statuses: []operatorv1.NodeRegistrationStatus{operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_RETIRED},
	}))
	if err != nil || len(list.Msg.GetRegistrations()) != 1 || list.Msg.GetRegistrations()[0].GetNodeId() != "node-a" {
		t.Errorf("RETIRED registrations: %v %v", list, err)
	}

	// node-a was the only member of pool "default": none is left.
	_, err = c.Volumes.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{Command: cmd("vol-1"), Spec: &ctrlv1.VolumeSpec{CapacityBytes: 64 << 20}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "no default storage pool") {
		t.Errorf("a Volume in the default pool of a retired node: %v, want failed_precondition (no member declares a default pool)", err)
	}

	enrollment := nodev1connect.NewNodeSessionServiceClient(httpClient(), c.Ctrl.NodeEndpoint)
	for _, secret := range []string{pending, unbound.Msg.GetSecret()} {
		_, err := enrollment.Enroll(ctx, connect.NewRequest(&nodev1.EnrollRequest{GrantSecret: secret, NodeId: "node-a", Incarnation: 1}))
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("enrolling the retired node_id: %v, want permission_denied", err)
		}
	}
	n.Stop(t)
	id := identity(t, n)
	if err := session(t, c, id, id.Incarnation+1); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a session of the retired node: %v, want permission_denied", err)
	}
	refused := map[string]error{}
	_, refused["drain"] = e.drain("drain-2", "node-a")
	_, refused["isolate"] = e.isolate("iso-1", "node-a", id.Incarnation)
	_, refused["retire"] = e.retire("retire-2", "node-a")
	_, refused["cancel drain"] = c.Nodes.CancelNodeDrain(ctx, connect.NewRequest(&operatorv1.CancelNodeDrainRequest{Command: cmd("undrain-1"), NodeId: "node-a"}))
	_, refused["grant"] = c.Enrollment.CreateEnrollmentGrant(ctx, connect.NewRequest(&operatorv1.CreateEnrollmentGrantRequest{Command: cmd("grant-2"), NodeId: "node-a"}))
	for what, err := range refused {
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("%s on a retired node: %v, want failed_precondition", what, err)
		}
	}
	if got := c.Registration(t, "node-a"); got.GetRegistrationVersion() != tomb.GetRegistrationVersion() {
		t.Errorf("refused commands changed the tombstone: %v", got)
	}
}

// A node whose admission was revoked is admitted again when it enrolls
// with a new grant.
func TestRevokedNodeEnrollsAgainWithANewGrant(t *testing.T) {
	c := testenv.New(t, fastFleet())
	n := c.StartNode(t, "node-a", "", "")
	revokeEnrolled(t, c, "node-a")
	n.Stop(t)
	c.StartNode(t, "node-a", "", "") // a new state directory: it enrolls with a new grant
	if got := c.Registration(t, "node-a"); got.GetAdmission() != operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED {
		t.Errorf("admission after enrolling again: %v", got.GetAdmission())
	}
}

// revokeEnrolled revokes the grant node enrolled with, and the node's
// admission with it, and waits for its session to end.
func revokeEnrolled(t *testing.T, c *testenv.Cluster, node string) {
	t.Helper()
	grants, err := c.Enrollment.ListEnrollmentGrants(ctx, connect.NewRequest(&operatorv1.ListEnrollmentGrantsRequest{NodeId: node, IncludeInactive: true}))
	if err != nil || len(grants.Msg.GetGrants()) != 1 {
		t.Fatalf("%s's grant: %v %v", node, grants, err)
	}
	if _, err := c.Enrollment.RevokeEnrollmentGrant(ctx, connect.NewRequest(&operatorv1.RevokeEnrollmentGrantRequest{
		Command: cmd("revoke-" + node), GrantId: grants.Msg.GetGrants()[0].GetGrantId(), RevokeEnrolledNodes: true,
	})); err != nil {
		t.Fatal(err)
	}
	c.WaitStatus(t, node, operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_REVOKED)
	testenv.WaitFor(t, "the revoked node's session to end", func() bool { return !c.Registration(t, node).GetSession().GetLive() })
}

// A node whose admission was revoked and that is then isolated can be
// retired, and RETIRED wins over REVOKED.
func TestRetiredWinsOverRevoked(t *testing.T) {
	c := testenv.New(t, fastFleet())
	e := &lifecycleEnv{c}
	n := c.StartNode(t, "node-a", "", "")
	revokeEnrolled(t, c, "node-a")
	n.Stop(t)
	if _, err := e.isolate("iso-1", "node-a", identity(t, n).Incarnation); err != nil {
		t.Fatal(err)
	}
	res, err := e.retire("retire-1", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if got := res.GetRegistration().GetStatus(); got != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_RETIRED {
		t.Errorf("status of a revoked node retired: %v, want RETIRED", got)
	}
}
