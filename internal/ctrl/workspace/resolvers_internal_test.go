package workspace

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
)

var (
	viaDirect = &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_Direct{Direct: &ctrlv1.ResolverDirectPath{}}}
	viaEgress = &ctrlv1.ResolverPath{Kind: &ctrlv1.ResolverPath_EgressId{EgressId: "egr-1"}}
)

const (
	unreachable = ctrlv1.ResolverObservationKind_RESOLVER_OBSERVATION_KIND_UPSTREAM_UNREACHABLE
	timeout     = ctrlv1.ResolverObservationKind_RESOLVER_OBSERVATION_KIND_UPSTREAM_TIMEOUT
)

// A node's resolver fault becomes an observation stamped with ctrl's
// clock; the same run reported again keeps it as it was (observed_at and
// message included); a new run (another kind, another failing_since, or
// the entry on another path) is a new observation; an entry the node no
// longer reports failing has none.
func TestResolverObservationsFollowTheNodesRuns(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) // the node's clock
	t0, t1 := since.Add(time.Hour), since.Add(2*time.Hour)
	fault := func(path *ctrlv1.ResolverPath, kind ctrlv1.ResolverObservationKind, at time.Time, msg string) *nodev1.ResolverFault {
		return &nodev1.ResolverFault{ResolverId: "rsv-1", Path: path, Kind: kind, FailingSince: timestamppb.New(at), Message: msg}
	}

	first := resolverObservations(nil, []*nodev1.ResolverFault{fault(viaDirect, unreachable, since, "refused")}, t0)
	want := &ctrlv1.ResolverObservation{ResolverId: "rsv-1", Path: viaDirect, Kind: unreachable, FailingSince: timestamppb.New(since),
		ObservedAt: timestamppb.New(t0), Message: "refused"}
	if len(first) != 1 || !proto.Equal(first[0], want) {
		t.Fatalf("a new run: %v, want %v", first, want)
	}
	if again := resolverObservations(first, []*nodev1.ResolverFault{fault(viaDirect, unreachable, since, "refused again")}, t1); len(again) != 1 || !proto.Equal(again[0], want) {
		t.Errorf("the same run reported again: %v, want it unchanged %v", again, want)
	}
	for name, f := range map[string]*nodev1.ResolverFault{
		"another kind":          fault(viaDirect, timeout, since, "timed out"),
		"another failing_since": fault(viaDirect, unreachable, since.Add(time.Minute), "refused"),
		"another path":          fault(viaEgress, unreachable, since, "refused"),
	} {
		got := resolverObservations(first, []*nodev1.ResolverFault{f}, t1)
		if len(got) != 1 || !got[0].GetObservedAt().AsTime().Equal(t1) || got[0].GetKind() != f.GetKind() || !proto.Equal(got[0].GetPath(), f.GetPath()) {
			t.Errorf("%s: %v, want a new observation at %v", name, got, t1)
		}
	}
	if cleared := resolverObservations(first, nil, t1); len(cleared) != 0 {
		t.Errorf("no fault reported: %v, want no observation", cleared)
	}
}

// The status of each resolvers entry the node confirmed is the entry and
// the Resolver revision ctrl sent with it.
func TestResolverStatusesAreWhatWasSent(t *testing.T) {
	sent := []*nodev1.ResolvedResolver{{ResolverId: "rsv-1", Revision: 4, Path: viaEgress, Spec: &ctrlv1.ResolverSpec{Address: "10.0.0.53:53"}}}
	got := resolverStatuses(sent)
	want := &ctrlv1.NetworkPolicyResolverStatus{ResolverId: "rsv-1", Path: viaEgress, AppliedRevision: 4}
	if len(got) != 1 || !proto.Equal(got[0], want) {
		t.Errorf("resolverStatuses = %v, want [%v]", got, want)
	}
	if got := resolverStatuses(nil); got != nil {
		t.Errorf("no resolvers: %v, want none", got)
	}
}

// An unresponsive guest's observation takes unresponsive_since from the
// node's report (its first failed probe, on the host's clock), not from
// ctrl's clock at the report; a node that sends none leaves ctrl's first
// report of the silence, kept while the guest stays silent.
func TestUnresponsiveSinceIsTheHostsFirstFailedProbe(t *testing.T) {
	probed := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	now := probed.Add(7 * time.Second)
	w := withGuestObservation(&ctrlv1.Workspace{}, &nodev1.ExecutionReport{Running: true, ProbeError: "deadline", UnresponsiveSince: timestamppb.New(probed)}, now)
	if obs := w.GetGuestObservation(); obs.GetCondition() != ctrlv1.GuestCondition_GUEST_CONDITION_UNRESPONSIVE || !obs.GetUnresponsiveSince().AsTime().Equal(probed) {
		t.Errorf("with the node's time: %v, want UNRESPONSIVE since %v", obs, probed)
	}
	old := withGuestObservation(&ctrlv1.Workspace{}, &nodev1.ExecutionReport{Running: true, ProbeError: "deadline"}, now)
	later := withGuestObservation(old, &nodev1.ExecutionReport{Running: true, ProbeError: "deadline"}, now.Add(time.Minute))
	if got := later.GetGuestObservation().GetUnresponsiveSince().AsTime(); !got.Equal(now) {
		t.Errorf("without the node's time: since %v, want ctrl's first report %v", got, now)
	}
}

// A delivery whose bytes last moved more than deliveryStaleAfter ago reads
// as stuck (UNKNOWN / OBSERVATION_STALE, the bytes as they stood, a
// message); one that moved within it is still arriving; a failed one is
// left as it is.
func TestADeliveryWhoseBytesStoodStillReadsStuck(t *testing.T) {
	moved := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	arriving := func() *ctrlv1.Workspace {
		return &ctrlv1.Workspace{Delivery: &ctrlv1.TemplateDeliveryObservation{
			State: ctrlv1.TemplateDeliveryState_TEMPLATE_DELIVERY_STATE_NOT_READY, Reason: ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_DISTRIBUTING,
			DeliveredBytes: 60, TotalBytes: 100, ObservedAt: timestamppb.New(moved),
		}}
	}
	if d := viewOf(arriving(), nil, nil, moved.Add(deliveryStaleAfter)).GetDelivery(); d.GetReason() != ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_DISTRIBUTING {
		t.Errorf("bytes moved %s ago: %v, want still DISTRIBUTING", deliveryStaleAfter, d)
	}
	d := viewOf(arriving(), nil, nil, moved.Add(deliveryStaleAfter+time.Second)).GetDelivery()
	if d.GetState() != ctrlv1.TemplateDeliveryState_TEMPLATE_DELIVERY_STATE_UNKNOWN || d.GetReason() != ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_OBSERVATION_STALE ||
		d.GetDeliveredBytes() != 60 || d.GetMessage() == "" {
		t.Errorf("bytes still for longer: %v, want UNKNOWN / OBSERVATION_STALE at 60 bytes, with a message", d)
	}
	failed := &ctrlv1.Workspace{Delivery: &ctrlv1.TemplateDeliveryObservation{
		State: ctrlv1.TemplateDeliveryState_TEMPLATE_DELIVERY_STATE_NOT_READY, Reason: ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_PREPARATION_FAILED, ObservedAt: timestamppb.New(moved),
	}}
	if d := viewOf(failed, nil, nil, moved.Add(time.Hour)).GetDelivery(); d.GetReason() != ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_PREPARATION_FAILED {
		t.Errorf("a failed delivery later: %v, want it as it was", d)
	}
}

// rebooted: a counted reset, or a node's report that the guest answered
// from another boot (other_boot) with no reset counted.
func TestRebootedFollowsAnotherBootCountedOrNot(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		r    *nodev1.ExecutionReport
		want bool
	}{
		"the same boot":                 {&nodev1.ExecutionReport{Running: true, Responding: true}, false},
		"another boot, no reset":        {&nodev1.ExecutionReport{Running: true, Responding: true, OtherBoot: true}, true},
		"a counted reset, another boot": {&nodev1.ExecutionReport{Running: true, Responding: true, OtherBoot: true, RestartCount: 1, LastResetAt: timestamppb.New(now)}, true},
	} {
		obs := withGuestObservation(&ctrlv1.Workspace{}, tc.r, now).GetGuestObservation()
		if obs.GetRebooted() != tc.want || obs.GetRestartCount() != tc.r.GetRestartCount() {
			t.Errorf("%s: rebooted %t, restart_count %d; want %t, %d", name, obs.GetRebooted(), obs.GetRestartCount(), tc.want, tc.r.GetRestartCount())
		}
	}
}
