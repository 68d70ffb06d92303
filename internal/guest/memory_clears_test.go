package guest_test

import (
	"testing"
	"time"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/guest"
)

// SATURATED "clears on its own once demand falls" (workspaces.md O30): a
// stall that lasts less than KillAfter makes the guest SATURATED, and once
// the processes stall little again it reads NORMAL, with no
// saturated_since, having killed nothing.
func TestMemorySaturationClearsOnItsOwn(t *testing.T) {
	p := newFakeProc(t)
	p.process(41, "hog", 500000)
	var killed []int
	m := &guest.MemoryWatch{ProcDir: p.dir, Kill: func(pid int) error { killed = append(killed, pid); return nil }}
	t0 := time.Unix(1_700_000_000, 0)
	total, second := uint64(0), 0
	step := func(stalledUS uint64) *guestv1.MemoryReport {
		total += stalledUS
		p.pressure(total)
		m.Sample(t0.Add(time.Duration(second) * time.Second))
		second++
		return m.Report()
	}
	for range 10 {
		step(10_000) // calm: 1% stalled
	}
	saturated := false
	for s := 0; s < int(guest.KillAfter/time.Second)-2 && !saturated; s++ {
		saturated = step(900_000).GetCondition() == guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED
	}
	if !saturated {
		t.Fatal("never SATURATED under a 90% stall")
	}
	var r *guestv1.MemoryReport
	for range int(guest.Window/time.Second) + 2 {
		r = step(10_000)
	}
	if r.GetCondition() != guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL || r.GetSaturatedSince() != nil || len(killed) != 0 || r.GetKillCount() != 0 {
		t.Errorf("a window after the stall ended: %v (since %v), killed %v; want NORMAL, no since, nothing killed", r.GetCondition(), r.GetSaturatedSince(), killed)
	}
}
