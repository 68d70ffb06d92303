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

// A replica holding more sessions than its observation budget allows at
// the configured interval asks its nodes to report less often, and writes
// their registrations as rarely: here every 12 s or more (three nodes at a
// quarter of an observation a second), past the 11 s a window of the
// configuration alone allowed (a 1-s refresh and the least silence limit,
// 10 s). Each write carries the holder's lease for its nodes' interval
// (live_until), so replica b judges every session live throughout two of
// those intervals, READY, and refuses IsolateNode ("It is refused while
// the node still has a live control session").
func TestALeaseCoversAReplicaThatSpreadsItsNodesReports(t *testing.T) {
	ctx := context.Background()
	const interval = 12 * time.Second
	fc := ctrlfleet.Config{
		ObservationInterval: 200 * time.Millisecond, ClockProbeInterval: 50 * time.Millisecond, ClockTolerance: time.Second,
		RegistrationRefresh: time.Second, MaxObservationRate: float64(nodes) / interval.Seconds(),
	}
	_, b, fleet, _, _ := clusterWithStop(t, 1<<40, fc)
	list := func() []*operatorv1.NodeRegistration {
		res, err := b.operator.ListNodeRegistrations(ctx, connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.GetRegistrations()
	}
	leased := waitFor(t, "every registration written with a lease for the spread interval", func() ([]*operatorv1.NodeRegistration, bool) {
		regs := list()
		for _, n := range regs {
			s := n.GetSession()
			if s.GetLiveUntil().AsTime().Sub(s.GetLastSeenAt().AsTime()) < 2*interval {
				return regs, false
			}
		}
		return regs, len(regs) == nodes
	})
	for _, n := range leased {
		if !n.GetSession().GetLive() || n.GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY {
			t.Errorf("node %s as replica b reads it: %v, live %v; want READY, live", n.GetNodeId(), n.GetStatus(), n.GetSession().GetLive())
		}
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	writes := map[string]int{}
	last := map[string]time.Time{}
	for end := time.Now().Add(2 * interval); time.Now().Before(end); <-tick.C {
		for _, n := range list() {
			if !n.GetSession().GetLive() || n.GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY {
				t.Fatalf("node %s as replica b reads it, last written %v ago: %v, live %v; want READY, live throughout",
					n.GetNodeId(), time.Since(n.GetSession().GetLastSeenAt().AsTime()).Round(time.Millisecond), n.GetStatus(), n.GetSession().GetLive())
			}
			if seen := n.GetSession().GetLastSeenAt().AsTime(); !seen.Equal(last[n.GetNodeId()]) {
				writes[n.GetNodeId()]++
				last[n.GetNodeId()] = seen
			}
		}
	}
	// The watch spanned writes apart by more than the old window: each
	// node's registration was written again within it, at most three
	// times (the first read counts one).
	for _, id := range fleet.NodeIDs() {
		if writes[id] < 2 || writes[id] > 4 {
			t.Errorf("node %s: %d registration writes seen over %v, want a write every %v or so", id, writes[id], 2*interval, interval)
		}
	}
	_, err := b.operator.IsolateNode(ctx, connect.NewRequest(&operatorv1.IsolateNodeRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "isolate-leased"}, NodeId: leased[0].GetNodeId(), Incarnation: leased[0].GetIncarnation(),
	}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("IsolateNode through replica b of a leased session: %v, want failed_precondition", err)
	}
}
