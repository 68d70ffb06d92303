package node

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
)

// The guest's memory times reach ctrl on the clock of the host that probed
// (workspaces.md O14, O24): a guest clock an hour and three seconds
// behind moves saturated_since and killed_at by that much; a guest that
// sent no clock reading leaves them as they were; no report is none.
func TestTheGuestsMemoryTimesAreMovedToTheHostsClock(t *testing.T) {
	host := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	offset := time.Hour + 3*time.Second
	guestNow := host.Add(-offset)
	report := func() *guestv1.MemoryReport {
		return &guestv1.MemoryReport{Condition: guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED, SaturatedSince: timestamppb.New(guestNow.Add(-time.Minute)),
			KillCount: 1, LatestKill: &guestv1.MemoryKill{KilledAt: timestamppb.New(guestNow.Add(-time.Second)), Pid: 7}}
	}
	ping := &guestv1.PingResponse{GuestTime: timestamppb.New(guestNow), Memory: report()}
	got := hostClockMemory(ping, host)
	if !got.GetSaturatedSince().AsTime().Equal(host.Add(-time.Minute)) || !got.GetLatestKill().GetKilledAt().AsTime().Equal(host.Add(-time.Second)) {
		t.Errorf("saturated_since %v, killed_at %v; want %v and %v on the host's clock", got.GetSaturatedSince().AsTime(), got.GetLatestKill().GetKilledAt().AsTime(),
			host.Add(-time.Minute), host.Add(-time.Second))
	}
	if !ping.GetMemory().GetSaturatedSince().AsTime().Equal(guestNow.Add(-time.Minute)) {
		t.Errorf("the guest's own report was changed: %v", ping.GetMemory().GetSaturatedSince().AsTime())
	}
	noClock := hostClockMemory(&guestv1.PingResponse{Memory: report()}, host)
	if !noClock.GetSaturatedSince().AsTime().Equal(guestNow.Add(-time.Minute)) {
		t.Errorf("without a guest clock reading: %v, want the guest's time as sent", noClock.GetSaturatedSince().AsTime())
	}
	if hostClockMemory(&guestv1.PingResponse{GuestTime: timestamppb.New(guestNow)}, host) != nil {
		t.Error("a ping without a memory report gave one")
	}
}
