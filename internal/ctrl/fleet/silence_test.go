package fleet_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/testenv"
)

// A node whose host goes quiet without its connection closing (it sends
// nothing, not even answers to clock probes) has its session ended by ctrl
// (the stream ends) after three observation intervals, at least 10 s, and reads UNAVAILABLE;
// one that keeps talking keeps its session.
func TestASilentNodeLosesItsSession(t *testing.T) {
	c := testenv.New(t, fastFleet())
	talker := c.StartNode(t, "node-t", "", "")
	defer talker.Stop(t)
	hello := time.Now() // before the last message the node sends
	stream, _ := openSession(t, c, "node-q")
	if !c.Registration(t, "node-q").GetSession().GetLive() {
		t.Fatal("the session is not live after its welcome")
	}
	var err error
	for {
		// Clock probes come and go unanswered.
		if _, err = stream.Receive(); err != nil {
			break
		}
	}
	silent := time.Since(hello)
	t.Logf("the session ended after %v of silence: %v", silent, err)
	// fastFleet observes every 500 ms: the limit is its floor, 10 s.
	if silent < 10*time.Second {
		t.Errorf("ended after %v of silence, before the 10 s limit", silent)
	}
	lost := c.WaitStatus(t, "node-q", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	if lost.GetSession().GetLive() {
		t.Errorf("a silent node's session reads live: %v", lost.GetSession())
	}
	if reg := c.Registration(t, "node-t"); !reg.GetSession().GetLive() || reg.GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY {
		t.Errorf("a talking node over the same time: %v, session %v", reg.GetStatus(), reg.GetSession())
	}
}

// openSession enrolls node id and opens a session for it by hand: it sends
// the hello and reads the welcome, and sends nothing more unless the test
// does. The stream is closed when the test ends.
func openSession(t *testing.T, c *testenv.Cluster, id string) (*connect.BidiStreamForClient[nodev1.SessionRequest, nodev1.SessionResponse], *nodev1.SessionWelcome) {
	t.Helper()
	client := nodev1connect.NewNodeSessionServiceClient(httpClient(), c.Ctrl.NodeEndpoint)
	enrolled, err := client.Enroll(ctx, connect.NewRequest(&nodev1.EnrollRequest{GrantSecret: c.Grant(t, id), NodeId: id, Incarnation: 1}))
	if err != nil {
		t.Fatal(err)
	}
	stream := client.Session(ctx)
	stream.RequestHeader().Set("Authorization", "Bearer "+enrolled.Msg.GetCredential())
	stream.RequestHeader().Set(fleet.HeaderNodeID, id)
	t.Cleanup(func() {
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	})
	if err := stream.Send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_Hello{Hello: &nodev1.NodeHello{
		NodeId: id, Incarnation: 1, Resources: &nodev1.HostResources{CpuMillis: 1000, MemoryBytes: 1 << 30},
	}}}); err != nil {
		t.Fatal(err)
	}
	first, err := stream.Receive()
	if err != nil || first.GetWelcome() == nil {
		t.Fatalf("first message %v, %v; want a welcome", first, err)
	}
	return stream, first.GetWelcome()
}

// ctrl takes a node's observation in its reply to a clock probe, as if
// it came alone: the welcome says so, and one reply carries both the clock
// measurement and the observation (the node sends one message where it
// sent two).
func TestAnObservationRidesAClockReply(t *testing.T) {
	c := testenv.New(t, fastFleet())
	stream, welcome := openSession(t, c, "node-r")
	if !welcome.GetObservationInClockReply() {
		t.Fatal("the welcome does not say ctrl takes observations in clock replies")
	}
	var probe *nodev1.ClockProbe
	for probe == nil {
		msg, err := stream.Receive()
		if err != nil {
			t.Fatal(err)
		}
		probe = msg.GetClockProbe()
	}
	const available = 777 << 20
	if err := stream.Send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_ClockReply{ClockReply: &nodev1.ClockReply{
		ProbeId: probe.GetProbeId(), NodeTime: timestamppb.Now(),
		Observation: &nodev1.NodeObservation{MemoryAvailableBytes: proto.Uint64(available)},
	}}}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the clock and the observation the reply carried", func() bool {
		reg := c.Registration(t, "node-r")
		return reg.GetSession().GetClock() != nil && reg.GetHostUsage().GetMemoryAvailableBytes() == available
	})
}
