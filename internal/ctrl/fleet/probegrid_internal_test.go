package fleet

import (
	"testing"
	"time"
)

// TestNextProbeInLandsOnTheGrid: a probe is put off to the next multiple
// of its grid, by less than the grid, so that probes armed at different
// instants go out together.
func TestNextProbeInLandsOnTheGrid(t *testing.T) {
	base := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		every, grid time.Duration
	}{
		{40 * time.Second, maxProbeGrid},
		{10 * time.Second, maxProbeGrid},
		{500 * time.Millisecond, 50 * time.Millisecond},
		{100 * time.Millisecond, 10 * time.Millisecond},
	} {
		for _, offset := range []time.Duration{0, time.Nanosecond, 37 * time.Millisecond, 99*time.Millisecond + 999*time.Microsecond, 1234567 * time.Microsecond} {
			now := base.Add(offset)
			d := nextProbeIn(now, tc.every)
			at := now.Add(d)
			if !at.Truncate(tc.grid).Equal(at) {
				t.Errorf("every %v, now %v: the probe at %v is off the %v grid", tc.every, offset, at, tc.grid)
			}
			if d < tc.every || d >= tc.every+tc.grid {
				t.Errorf("every %v, now %v: next probe in %v, want within [%v, %v)", tc.every, offset, d, tc.every, tc.every+tc.grid)
			}
		}
	}
	if d := nextProbeIn(base.Add(3*time.Millisecond), 5*time.Nanosecond); d != 5*time.Nanosecond {
		t.Errorf("an interval too short for a grid: next probe in %v, want 5ns", d)
	}
}
