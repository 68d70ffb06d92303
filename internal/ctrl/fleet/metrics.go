package fleet

import (
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/ctrl/metrics"
)

// LiveSessions is how many node control sessions this replica holds now:
// the kibotos_node_sessions_live gauge, read at each scrape. A session
// counts from the moment it is attached (its node authenticated and
// registered) until it is detached, whichever side ended it.
func (f *Fleet) LiveSessions() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sessions)
}

// Metrics is what the fleet counts in: the domains built on the fleet
// (Deps.Executions) count their placements there.
func (f *Fleet) Metrics() *metrics.Metrics { return f.metrics }

// Guests counts what the newest observations of the sessions this replica
// holds say of their running guests (kibotos_guest_*): read from memory at
// each scrape, as the nodes report every observation interval. A guest
// coming back from a reset is neither responding nor unresponsive.
func (f *Fleet) Guests() metrics.GuestCounts {
	f.mu.Lock()
	sessions := make([]*session, 0, len(f.sessions))
	for _, s := range f.sessions {
		sessions = append(sessions, s)
	}
	f.mu.Unlock()
	var c metrics.GuestCounts
	for _, s := range sessions {
		s.mu.Lock()
		for _, r := range s.obs.running {
			c.Running++
			switch {
			case r.GetComingBack():
			case !r.GetResponding():
				c.Unresponsive++
			case r.GetMemory().GetCondition() == guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED:
				c.MemorySaturated++
			}
			c.MemoryKills += uint64(r.GetMemory().GetKillCount())
		}
		s.mu.Unlock()
	}
	return c
}
