package guest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kibotos/kibotos/internal/guest"
)

// stat writes a /proc/stat of cpus CPUs whose aggregate line spent busy
// ticks in user, idle ticks idle, and steal ticks stolen.
func (p *fakeProc) stat(cpus int, busy, idle, steal uint64) {
	data := fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 %d 0 0\n", busy, idle, steal)
	for i := range cpus {
		data += fmt.Sprintf("cpu%d 0 0 0 0 0 0 0 0 0 0\n", i)
	}
	data += "intr 0\nctxt 0\nbtime 0\nprocesses 1\n"
	p.write("stat", data)
}

func (p *fakeProc) write(name, data string) {
	if err := os.MkdirAll(filepath.Dir(filepath.Join(p.dir, name)), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p.dir, name), []byte(data), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func usage(t *testing.T, c *guest.CPUWatch, now time.Time) uint32 {
	t.Helper()
	u, err := c.Usage(now)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// A guest up for less than the window answers its average since boot: the
// kernel's counters start at zero then.
func TestCPUUsageBeforeTenSecondsIsSinceBoot(t *testing.T) {
	p := newFakeProc(t)
	p.write("uptime", "4.00 7.00\n")
	// 2 CPUs for 4 s at 100 ticks/s: 800 ticks, 300 of them busy.
	p.stat(2, 300, 500, 0)
	t0 := time.Now()
	c, err := guest.NewCPUWatch(p.dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := usage(t, c, t0); got != 750 {
		t.Errorf("usage %d, want 750 (300 of 800 ticks of 2 CPUs)", got)
	}
	// Three seconds later (still within 10 s of boot), both CPUs busy
	// meanwhile: (300+600) of (800+600).
	for i := 1; i <= 3; i++ {
		p.stat(2, 300+uint64(200*i), 500, 0)
		if err := c.Record(t0.Add(time.Duration(i) * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if got := usage(t, c, t0.Add(3*time.Second)); got != 900*2000/1400 {
		t.Errorf("usage %d, want %d", got, 900*2000/1400)
	}
}

// Past the window, the base is the newest reading at least 10 s old: what
// happened before it no longer counts.
func TestCPUUsageAveragesTheLastTenSeconds(t *testing.T) {
	p := newFakeProc(t)
	p.write("uptime", "100.00 0\n")
	busy, idle := uint64(20000), uint64(0) // a busy past: 100 s of 2 CPUs
	p.stat(2, busy, idle, 0)
	t0 := time.Now()
	c, err := guest.NewCPUWatch(p.dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	// 20 s, one reading a second: the first 8 s fully busy, then one CPU
	// busy of two.
	for i := 1; i <= 20; i++ {
		if i <= 8 {
			busy += 200
		} else {
			busy, idle = busy+100, idle+100
		}
		p.stat(2, busy, idle, 0)
		if err := c.Record(t0.Add(time.Duration(i) * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if got := usage(t, c, t0.Add(20*time.Second)); got != 1000 {
		t.Errorf("usage %d, want 1000: the last 10 s had one CPU of two busy", got)
	}
	// Half a second on, the base is still the reading of 10 s before the
	// last one; nothing changed since it.
	if got := usage(t, c, t0.Add(20*time.Second+500*time.Millisecond)); got != 1000 {
		t.Errorf("usage %d half a second on, want 1000", got)
	}
}

// Stolen and idle ticks count in the total only; counters that went back
// (they never should) answer 0 rather than a wrapped number.
func TestCPUUsageLeavesStealOutAndSurvivesCountersGoingBack(t *testing.T) {
	p := newFakeProc(t)
	p.write("uptime", "100.00 0\n")
	p.stat(1, 50, 0, 50)
	t0 := time.Now()
	c, err := guest.NewCPUWatch(p.dir, t0)
	if err != nil {
		t.Fatal(err)
	}
	p.stat(1, 100, 0, 100)
	if got := usage(t, c, t0.Add(10*time.Second)); got != 500 {
		t.Errorf("usage %d, want 500 (50 busy of 100, 50 stolen)", got)
	}
	p.stat(1, 10, 0, 0)
	if got := usage(t, c, t0.Add(10*time.Second)); got != 0 {
		t.Errorf("usage %d after counters went back, want 0", got)
	}
	p.write("stat", "intr 0\n")
	if _, err := c.Usage(t0); err == nil {
		t.Error("a stat without cpu lines read as a usage")
	}
}

// A sample reads uptime, memory, the filesystems that are mounted (in the
// order given) and the processes.
func TestSamplerReadsTheGuest(t *testing.T) {
	p := newFakeProc(t)
	p.write("uptime", "12.50 20.00\n")
	p.stat(1, 10, 90, 0)
	p.write("meminfo", "MemTotal:         246000 kB\nMemFree:          100000 kB\nMemAvailable:     200000 kB\n")
	p.process(1, "init", 1000)
	p.process(42, "sh", 500)
	p.process(43, "kthreadd", -1)
	root := t.TempDir()
	for _, d := range []string{"tmp", "run", "data", "a b"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// /data is not mounted: it is left out.
	p.write("self/mountinfo", "22 1 0:20 / / rw - overlay overlay rw\n"+
		"23 22 0:21 / /run rw - tmpfs tmpfs rw\n24 22 0:22 / /tmp rw - tmpfs tmpfs rw\n25 22 0:23 / /a\\040b rw - tmpfs tmpfs rw\n")
	c, err := guest.NewCPUWatch(p.dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s := &guest.Sampler{ProcDir: p.dir, CPU: c, Paths: []string{"/", "/data", "/tmp", "/run"}, Root: root}
	got, err := s.Sample(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got.GetUptime().AsDuration() != 12500*time.Millisecond || got.GetCpuUsageMillis() != 100 ||
		got.GetMemoryTotalBytes() != 246000*1024 || got.GetMemoryUsedBytes() != 46000*1024 || got.GetProcessCount() != 3 {
		t.Errorf("sample %v", got)
	}
	var paths []string
	for _, fs := range got.GetFilesystems() {
		paths = append(paths, fs.GetPath())
		if fs.GetCapacityBytes() == 0 || fs.GetUsedBytes() > fs.GetCapacityBytes() || fs.GetUsedInodes() > fs.GetCapacityInodes() {
			t.Errorf("filesystem %v", fs)
		}
	}
	if fmt.Sprint(paths) != "[/ /tmp /run]" {
		t.Errorf("filesystems %v, want [/ /tmp /run]", paths)
	}
	// mountinfo escapes a space as \040.
	s.Paths = []string{"/a b"}
	if got, err := s.Sample(time.Now()); err != nil || len(got.GetFilesystems()) != 1 {
		t.Errorf("a mount path with a space: %v %v", got.GetFilesystems(), err)
	}
}
