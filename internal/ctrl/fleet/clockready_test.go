package fleet_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/testenv"
)

// A node is READY, and so placed on, only once its clock is measured in
// its current session (designed here): a node whose clock drifted while
// it was away takes nothing before ctrl knows. Observed but with its
// clock probes unanswered, it stays SYNCING; its first answer makes it
// READY.
func TestANodeIsReadyOnlyOnceItsClockIsMeasured(t *testing.T) {
	c := testenv.New(t, fastFleet())
	n := c.StartNode(t, "node-a", "", "")
	n.Stop(t)
	send, probes := openRawSession(t, c, identity(t, n))
	hello := c.Registration(t, "node-a").GetObservation().GetObservationVersion()
	mem := uint64(1 << 30)
	observation := &nodev1.SessionRequest{Message: &nodev1.SessionRequest_Observation{Observation: &nodev1.NodeObservation{MemoryAvailableBytes: &mem}}}
	if err := send(observation); err != nil {
		t.Fatal(err)
	}
	var reg *operatorv1.NodeRegistration
	testenv.WaitFor(t, "the observation written", func() bool {
		reg = c.Registration(t, "node-a")
		return reg.GetObservation().GetObservationVersion() > hello
	})
	if reg.GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_SYNCING || reg.GetSession().GetClock() != nil {
		t.Errorf("observed, its clock not measured: %v, clock %v; want SYNCING and no clock", reg.GetStatus(), reg.GetSession().GetClock())
	}
	reply := &nodev1.SessionRequest{Message: &nodev1.SessionRequest_ClockReply{ClockReply: &nodev1.ClockReply{
		ProbeId: <-probes, NodeTime: timestamppb.New(time.Now())}}}
	if err := send(reply); err != nil {
		t.Fatal(err)
	}
	reg = c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY)
	if reg.GetSession().GetClock() == nil {
		t.Error("READY without a clock measurement")
	}
}
