package guest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/guest"
)

// fakeProc is a /proc with a pressure file and processes.
type fakeProc struct {
	t   *testing.T
	dir string
}

func newFakeProc(t *testing.T) *fakeProc {
	p := &fakeProc{t: t, dir: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(p.dir, "pressure"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *fakeProc) pressure(fullTotalUS uint64) { p.pressureAvg(fullTotalUS, 0) }

// pressureAvg also sets the kernel's ten-second average, in percent.
func (p *fakeProc) pressureAvg(fullTotalUS uint64, avg10 float64) {
	data := fmt.Sprintf("some avg10=%.2f avg60=0.00 avg300=0.00 total=%d\nfull avg10=%.2f avg60=0.00 avg300=0.00 total=%d\n", avg10, fullTotalUS, avg10, fullTotalUS)
	if err := os.WriteFile(filepath.Join(p.dir, "pressure/memory"), []byte(data), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func (p *fakeProc) process(pid int, name string, rssKB int) {
	dir := filepath.Join(p.dir, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	status := fmt.Sprintf("Name:\t%s\nState:\tR (running)\n", name)
	if rssKB >= 0 {
		status += fmt.Sprintf("VmRSS:\t%d kB\n", rssKB)
	}
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func TestMemoryWatchWithoutPSIReportsNothing(t *testing.T) {
	m := &guest.MemoryWatch{ProcDir: t.TempDir()}
	if err := m.Run(t.Context()); err != guest.ErrNoPSI {
		t.Fatalf("Run: %v, want ErrNoPSI", err)
	}
	m.Sample(time.Now())
	if r := m.Report(); r != nil {
		t.Fatalf("report %v without PSI", r)
	}
}

func TestMemoryWatchJudgesAndKillsTheLargest(t *testing.T) {
	p := newFakeProc(t)
	p.process(1, "kibotos-guest", 9000) // PID 1 is never chosen
	p.process(2, "kthreadd", -1)        // a kernel thread: no VmRSS
	p.process(40, "sh", 800)
	p.process(41, "hog", 500000)
	var killed []int
	m := &guest.MemoryWatch{ProcDir: p.dir, Kill: func(pid int) error { killed = append(killed, pid); return nil }}

	t0 := time.Unix(1_700_000_000, 0)
	total := uint64(0)
	step := func(at time.Duration, stalledUS uint64) *guestv1.MemoryReport {
		total += stalledUS
		p.pressure(total)
		m.Sample(t0.Add(at))
		return m.Report()
	}
	// Calm: 1% stalled. The first seconds are judged by the kernel's
	// average (0.00 here), the rest by the watch's own window.
	for s := range 10 {
		if r := step(time.Duration(s)*time.Second, 10_000); r.GetCondition() != guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL {
			t.Fatalf("second %d: %v, want NORMAL", s, r.GetCondition())
		}
	}
	// Stalled 90% of every second from second 10 on.
	var saturatedAt time.Duration
	for s := 10; s < 60 && len(killed) == 0; s++ {
		r := step(time.Duration(s)*time.Second, 900_000)
		if r.GetCondition() == guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED && saturatedAt == 0 {
			saturatedAt = time.Duration(s) * time.Second
			if r.GetSaturatedSince() == nil {
				t.Fatal("SATURATED without saturated_since")
			}
		}
	}
	if saturatedAt == 0 {
		t.Fatal("never SATURATED")
	}
	if len(killed) != 1 || killed[0] != 41 {
		t.Fatalf("killed %v, want [41]", killed)
	}
	r := m.Report()
	k := r.GetLatestKill()
	if r.GetKillCount() != 1 || k.GetPid() != 41 || k.GetCommand() != "hog" || k.GetRssBytes() != 500000*1024 {
		t.Fatalf("report %v", r)
	}
	if k.GetFullStallPermille() < guest.SaturatedPermille || k.GetSaturatedFor().AsDuration() < guest.KillAfter || k.GetWindow().AsDuration() == 0 {
		t.Fatalf("kill %v", k)
	}
	// Until a judgment shows the kill was enough, the report stays
	// SATURATED, counted from the kill.
	killedAt := k.GetKilledAt().AsTime()
	if r.GetCondition() != guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED || !r.GetSaturatedSince().AsTime().Equal(killedAt) {
		t.Fatalf("right after the kill: %v since %v, want SATURATED since the kill (%v)", r.GetCondition(), r.GetSaturatedSince().AsTime(), killedAt)
	}
	// The kernel's average still says 90% a second later: still SATURATED,
	// and no second kill.
	at := killedAt.Sub(t0) + time.Second
	total += 100_000
	p.pressureAvg(total, 90)
	m.Sample(t0.Add(at))
	if r := m.Report(); r.GetCondition() != guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED || len(killed) != 1 {
		t.Fatalf("a second after the kill, the kernel's average at 90%%: %v, kills %v", r.GetCondition(), killed)
	}
	// Once it falls below half, NORMAL again.
	total += 10_000
	p.pressureAvg(total, 40)
	m.Sample(t0.Add(at + time.Second))
	if r := m.Report(); r.GetCondition() != guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL || r.GetSaturatedSince() != nil || r.GetFullAvg10Permille() != 400 {
		t.Fatalf("the kernel's average at 40%%: %v", r)
	}
}

// A watch that has just started has no window of its own: the kernel's
// ten-second average judges its first report, which is never a NORMAL it
// did not measure (O28).
func TestMemoryWatchJudgesItsFirstSampleByTheKernelsAverage(t *testing.T) {
	for _, tc := range []struct {
		avg10 float64
		want  guestv1.MemoryCondition
	}{
		{0, guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL},
		{49.94, guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL},
		{50.00, guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED},
		{97.5, guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED},
	} {
		p := newFakeProc(t)
		p.pressureAvg(123_456, tc.avg10)
		m := &guest.MemoryWatch{ProcDir: p.dir, Kill: func(int) error { t.Fatal("killed at the first sample"); return nil }}
		now := time.Unix(1_700_000_000, 0)
		m.Sample(now)
		r := m.Report()
		if r.GetCondition() != tc.want || r.GetFullAvg10Permille() != uint32(tc.avg10*10+0.5) {
			t.Errorf("avg10=%.2f: %v at %d‰, want %v", tc.avg10, r.GetCondition(), r.GetFullAvg10Permille(), tc.want)
		}
		if tc.want == guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED && !r.GetSaturatedSince().AsTime().Equal(now) {
			t.Errorf("avg10=%.2f: saturated since %v, want %v", tc.avg10, r.GetSaturatedSince().AsTime(), now)
		}
	}
}
