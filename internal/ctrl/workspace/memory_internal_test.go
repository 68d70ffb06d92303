package workspace

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
)

// ctrl's copy of the guest's memory report (workspace.md O7, O14-O18,
// O27, O29): observed_at is ctrl's own time of recording; SATURATED and
// its since are copied only from a responding guest; the kill count and
// the latest kill are copied, and stand while the guest does not respond;
// a guest or host without the report reads UNSPECIFIED with no kills.
func TestTheGuestsMemoryReportAsCtrlKeepsIt(t *testing.T) {
	now := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	since := now.Add(-40 * time.Second)
	kill := &guestv1.MemoryKill{KilledAt: timestamppb.New(now.Add(-5 * time.Second)), Pid: 412, Command: "hog", RssBytes: 200 << 20,
		FullStallPermille: 900, Window: durationpb.New(10 * time.Second), SaturatedFor: durationpb.New(30 * time.Second)}
	saturated := &nodev1.ExecutionReport{Running: true, Responding: true, Memory: &guestv1.MemoryReport{
		Condition: guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED, SaturatedSince: timestamppb.New(since), KillCount: 2, LatestKill: kill}}

	obs := withGuestObservation(&ctrlv1.Workspace{}, saturated, now).GetGuestObservation()
	if !obs.GetObservedAt().AsTime().Equal(now) {
		t.Errorf("observed_at %v, want ctrl's time of recording %v", obs.GetObservedAt().AsTime(), now)
	}
	if obs.GetMemoryCondition() != ctrlv1.GuestMemoryCondition_GUEST_MEMORY_CONDITION_SATURATED || !obs.GetMemorySaturatedSince().AsTime().Equal(since) {
		t.Errorf("a SATURATED report: %v since %v, want SATURATED since %v", obs.GetMemoryCondition(), obs.GetMemorySaturatedSince(), since)
	}
	want := &ctrlv1.GuestMemoryKill{KilledAt: kill.GetKilledAt(), Pid: 412, Command: "hog", RssBytes: 200 << 20,
		FullStallPermille: 900, Window: kill.GetWindow(), SaturatedFor: kill.GetSaturatedFor()}
	if obs.GetMemoryKillCount() != 2 || !proto.Equal(obs.GetLatestMemoryKill(), want) {
		t.Errorf("kills: %d, latest %v; want 2 and %v", obs.GetMemoryKillCount(), obs.GetLatestMemoryKill(), want)
	}

	w := withGuestObservation(&ctrlv1.Workspace{}, saturated, now)
	silent := withGuestObservation(w, &nodev1.ExecutionReport{Running: true, ProbeError: "deadline"}, now.Add(time.Minute)).GetGuestObservation()
	if silent.GetMemoryCondition() != ctrlv1.GuestMemoryCondition_GUEST_MEMORY_CONDITION_UNSPECIFIED || silent.GetMemorySaturatedSince() != nil {
		t.Errorf("an unresponsive guest: %v since %v, want UNSPECIFIED and no since", silent.GetMemoryCondition(), silent.GetMemorySaturatedSince())
	}
	if silent.GetMemoryKillCount() != 2 || !proto.Equal(silent.GetLatestMemoryKill(), want) {
		t.Errorf("an unresponsive guest's kills: %d, %v; want them standing", silent.GetMemoryKillCount(), silent.GetLatestMemoryKill())
	}

	normal := withGuestObservation(&ctrlv1.Workspace{}, &nodev1.ExecutionReport{Running: true, Responding: true, Memory: &guestv1.MemoryReport{
		Condition: guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL}}, now).GetGuestObservation()
	if normal.GetMemoryCondition() != ctrlv1.GuestMemoryCondition_GUEST_MEMORY_CONDITION_NORMAL || normal.GetMemorySaturatedSince() != nil ||
		normal.GetMemoryKillCount() != 0 || normal.GetLatestMemoryKill() != nil {
		t.Errorf("a NORMAL report without kills: %v, want NORMAL, no since, no kills and no latest kill", normal)
	}

	old := withGuestObservation(&ctrlv1.Workspace{}, &nodev1.ExecutionReport{Running: true, Responding: true}, now).GetGuestObservation()
	if old.GetMemoryCondition() != ctrlv1.GuestMemoryCondition_GUEST_MEMORY_CONDITION_UNSPECIFIED || old.GetMemoryKillCount() != 0 || old.GetLatestMemoryKill() != nil {
		t.Errorf("a guest or host without the report: %v, want UNSPECIFIED and no kills", old)
	}
}

// unresponsive_since is present only for UNRESPONSIVE (workspaces.md O8):
// a responding guest's observation has none, even when the node's report
// still carries one, and a guest that answers again loses it.
func TestARespondingGuestHasNoUnresponsiveSince(t *testing.T) {
	now := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	silent := withGuestObservation(&ctrlv1.Workspace{}, &nodev1.ExecutionReport{Running: true, ProbeError: "deadline"}, now)
	if silent.GetGuestObservation().GetUnresponsiveSince() == nil {
		t.Fatal("an unresponsive guest without unresponsive_since")
	}
	back := withGuestObservation(silent, &nodev1.ExecutionReport{Running: true, Responding: true, UnresponsiveSince: timestamppb.New(now)}, now.Add(time.Second))
	if obs := back.GetGuestObservation(); obs.GetCondition() != ctrlv1.GuestCondition_GUEST_CONDITION_RESPONDING || obs.GetUnresponsiveSince() != nil || obs.GetError() != "" {
		t.Errorf("a guest answering again: %v, want RESPONDING with no unresponsive_since and no error", obs)
	}
}
