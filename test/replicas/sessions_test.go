package replicas_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	ctrlfleet "github.com/kibotos/kibotos/internal/ctrl/fleet"
)

// A replica that does not hold a node's session judges it by the record
// the holding replica writes. While the session lives there, replica b
// serves the registration READY with the last clock measurement and usage
// sample written ("taken on the live control session", host_usage
// "present only while the control session is live", observed_at on ctrl's
// clock), and refuses IsolateNode as failed_precondition ("It is refused
// while the node still has a live control session"). Once the node's
// session ends on replica a, b serves it UNAVAILABLE without them, and
// the isolation is accepted.
func TestAnotherReplicaJudgesASessionByItsRecord(t *testing.T) {
	ctx := context.Background()
	a, b, fleet, stop, _ := clusterWithStop(t, 1<<40, ctrlfleet.Config{})
	id := fleet.NodeIDs()[0]
	get := func(r replica) *operatorv1.NodeRegistration {
		res, err := r.operator.GetNodeRegistration(ctx, connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: id}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.GetRegistration()
	}
	live := waitFor(t, "replica b to read a written clock and usage sample", func() (*operatorv1.NodeRegistration, bool) {
		n := get(b)
		return n, n.GetSession().GetClock() != nil && n.GetHostUsage() != nil
	})
	if live.GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY || !live.GetSession().GetLive() {
		t.Errorf("replica b's view of a session replica a holds: %v, live %v; want READY, live", live.GetStatus(), live.GetSession().GetLive())
	}
	if at := live.GetHostUsage().GetObservedAt().AsTime(); at.After(time.Now()) || time.Since(at) > time.Hour {
		t.Errorf("host_usage.observed_at %v is not a recent instant on ctrl's clock", at)
	}
	isolate := func(commandID string) error {
		_, err := b.operator.IsolateNode(ctx, connect.NewRequest(&operatorv1.IsolateNodeRequest{
			Command: &ctrlv1.CommandMetadata{CommandId: commandID}, NodeId: id, Incarnation: live.GetIncarnation(),
		}))
		return err
	}
	if err := isolate("isolate-live"); connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "has a live control session") {
		t.Errorf("IsolateNode through replica b while replica a holds the session: %v, want failed_precondition for the live session", err)
	}

	stop()
	lost := waitFor(t, "replica b to read the session lost", func() (*operatorv1.NodeRegistration, bool) {
		n := get(b)
		return n, n.GetStatus() == operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE
	})
	if lost.GetSession().GetLive() || lost.GetSession().GetClock() != nil || lost.GetHostUsage() != nil || lost.GetMemoryTight() != nil {
		t.Errorf("replica b's view once the session ended: live %v, clock %v, host_usage %v, memory_tight %v; want none",
			lost.GetSession().GetLive(), lost.GetSession().GetClock(), lost.GetHostUsage(), lost.GetMemoryTight())
	}
	if err := isolate("isolate-lost"); err != nil {
		t.Errorf("IsolateNode through replica b once the session ended: %v", err)
	}
	if n := get(a); !n.GetIsolated() {
		t.Errorf("replica a's view after the isolation through b: isolated %v", n.GetIsolated())
	}
}

// RetireNode through a replica that does not hold the node's session ends
// that session all the same: the holding replica ends it at its next
// registration write, which reads the node RETIRED (within
// RegistrationRefresh). The tombstone keeps its storage_pools as history.
func TestARetireThroughAnotherReplicaEndsTheSession(t *testing.T) {
	ctx := context.Background()
	fc := ctrlfleet.Config{ObservationInterval: 200 * time.Millisecond, RegistrationRefresh: 2 * time.Second}
	_, b, fleet, _, _ := clusterWithStop(t, 1<<40, fc)
	id := fleet.NodeIDs()[0]
	if _, err := b.operator.DrainNode(ctx, connect.NewRequest(&operatorv1.DrainNodeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "drain"}, NodeId: id})); err != nil {
		t.Fatal(err)
	}
	res, err := b.operator.RetireNode(ctx, connect.NewRequest(&operatorv1.RetireNodeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "retire"}, NodeId: id}))
	if err != nil {
		t.Fatal(err)
	}
	if reg := res.Msg.GetRegistration(); reg.GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_RETIRED || len(reg.GetStoragePools()) == 0 {
		t.Errorf("the tombstone: %v, storage_pools %v; want RETIRED, keeping them", reg.GetStatus(), reg.GetStoragePools())
	}
	waitFor(t, "the retired node's session to end on replica a", func() (struct{}, bool) {
		return struct{}{}, fleet.Established() == nodes-1
	})
	got, err := b.operator.GetNodeRegistration(ctx, connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: id}))
	if err != nil || got.Msg.GetRegistration().GetSession().GetLive() {
		t.Errorf("the retired node's registration once its session ended: %v %v, want no live session", got, err)
	}
}
