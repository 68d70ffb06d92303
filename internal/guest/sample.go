package guest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// CPUWindow is what cpu_usage_millis averages over (MetricsSample).
const CPUWindow = 10 * time.Second

// cpuEvery is how often the CPU watch reads /proc/stat.
const cpuEvery = time.Second

// CPUWatch keeps the guest's /proc/stat readings of the last CPUWindow, so
// a sample answers the average over the last 10 seconds at once instead of
// reading, waiting and reading again.
type CPUWatch struct {
	procDir string

	mu       sync.Mutex
	readings []cpuReading // oldest first; the first may be the boot's
}

// cpuReading is the first line of /proc/stat at one moment: the ticks all
// CPUs spent busy and in total, and how many CPUs there are.
type cpuReading struct {
	at          time.Time
	busy, total uint64
	cpus        int
}

// NewCPUWatch reads procDir (/proc) at now: the guest's uptime places the
// kernel's own starting point (every counter zero at boot) as the first
// reading, so that a guest up for less than CPUWindow answers its average
// since it booted.
func NewCPUWatch(procDir string, now time.Time) (*CPUWatch, error) {
	up, err := readUptime(procDir)
	if err != nil {
		return nil, err
	}
	first, err := readCPU(procDir, now)
	if err != nil {
		return nil, err
	}
	boot := cpuReading{at: now.Add(-up), cpus: first.cpus}
	return &CPUWatch{procDir: procDir, readings: []cpuReading{boot, first}}, nil
}

// Run reads /proc/stat every second until ctx ends.
func (c *CPUWatch) Run(ctx context.Context) {
	t := time.NewTicker(cpuEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			_ = c.Record(now)
		}
	}
}

// Record reads /proc/stat at now and keeps the reading, forgetting those
// no longer needed: the newest one CPUWindow old or older stays as the
// base of a window that just began.
func (c *CPUWatch) Record(now time.Time) error {
	r, err := readCPU(c.procDir, now)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readings = append(c.readings, r)
	for len(c.readings) > 1 && now.Sub(c.readings[1].at) >= CPUWindow {
		c.readings = c.readings[1:]
	}
	return nil
}

// Usage is the average CPU use from the newest reading at least CPUWindow
// old (so over 10 to 11 seconds), or from the kernel's boot while the
// guest has run for less, to a reading taken now, in thousandths of a CPU
// (1000 = one CPU fully busy): the share of all CPUs' ticks spent busy,
// times the number of CPUs. Ticks rather than the clock, so it needs no
// USER_HZ and a late reading skews nothing.
func (c *CPUWatch) Usage(now time.Time) (uint32, error) {
	cur, err := readCPU(c.procDir, now)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	base := c.readings[0]
	for _, r := range c.readings[1:] {
		if now.Sub(r.at) < CPUWindow {
			break
		}
		base = r
	}
	c.mu.Unlock()
	if cur.total <= base.total || cur.busy < base.busy {
		return 0, nil // no tick passed (or the counters went back)
	}
	busy := min(cur.busy-base.busy, cur.total-base.total)
	return uint32(busy * 1000 * uint64(cur.cpus) / (cur.total - base.total)), nil
}

// readCPU reads the aggregate "cpu" line of <procDir>/stat and counts the
// "cpuN" lines. Busy is user, nice, system, irq and softirq (guest time is
// inside user and nice); steal is the host's and iowait is waiting, so
// both count only in the total.
func readCPU(procDir string, at time.Time) (cpuReading, error) {
	f, err := os.Open(filepath.Join(procDir, "stat"))
	if err != nil {
		return cpuReading{}, err
	}
	defer f.Close()
	r := cpuReading{at: at}
	found := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 0:
		case fields[0] == "cpu":
			if r.busy, r.total, err = cpuTicks(fields[1:]); err != nil {
				return cpuReading{}, err
			}
			found = true
		case strings.HasPrefix(fields[0], "cpu"):
			r.cpus++
		}
	}
	if err := sc.Err(); err != nil {
		return cpuReading{}, err
	}
	if !found || r.cpus == 0 {
		return cpuReading{}, errors.New("no cpu lines in stat")
	}
	return r, nil
}

// cpuTicks sums the columns of a cpu line: user nice system idle iowait irq
// softirq steal [guest guest_nice, already inside user and nice].
func cpuTicks(cols []string) (busy, total uint64, err error) {
	if len(cols) < 8 {
		return 0, 0, fmt.Errorf("a cpu line of %d columns", len(cols))
	}
	var v [8]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(cols[i], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("cpu column %d: %w", i, err)
		}
	}
	busy = v[0] + v[1] + v[2] + v[5] + v[6]
	return busy, busy + v[3] + v[4] + v[7], nil
}

// readUptime reads the first number of <procDir>/uptime.
func readUptime(procDir string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(procDir, "uptime"))
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0, errors.New("empty uptime")
	}
	secs, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return 0, fmt.Errorf("uptime: %w", err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// Sampler reads one MetricsSample of the guest: the fields the guest knows
// (GuestAgentService.Sample).
type Sampler struct {
	// ProcDir is /proc (a directory with the same layout in tests).
	ProcDir string
	// CPU answers cpu_usage_millis.
	CPU *CPUWatch
	// Paths are the filesystems to report, in order: "/", the Volume's
	// mount path, "/tmp", "/run". Each is reported when it is a mount
	// point (ProcDir/self/mountinfo), so a guest left in its initramfs
	// reports "/" alone.
	Paths []string
	// Root is the directory Paths are under for statfs; empty is /.
	Root string
}

// Sample reads the guest now.
func (s *Sampler) Sample(now time.Time) (*ctrlv1.MetricsSample, error) {
	up, err := readUptime(s.ProcDir)
	if err != nil {
		return nil, fmt.Errorf("uptime: %w", err)
	}
	cpu, err := s.CPU.Usage(now)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	total, avail, err := readMemInfo(s.ProcDir)
	if err != nil {
		return nil, fmt.Errorf("meminfo: %w", err)
	}
	fss, err := s.filesystems()
	if err != nil {
		return nil, err
	}
	procs, err := countProcesses(s.ProcDir)
	if err != nil {
		return nil, fmt.Errorf("processes: %w", err)
	}
	return &ctrlv1.MetricsSample{
		Uptime: durationpb.New(up), CpuUsageMillis: cpu,
		MemoryTotalBytes: total, MemoryUsedBytes: total - min(avail, total),
		Filesystems: fss, ProcessCount: procs,
	}, nil
}

// filesystems statfs each of Paths that is a mount point.
func (s *Sampler) filesystems() ([]*ctrlv1.MetricsFilesystem, error) {
	mounted, err := mountPoints(s.ProcDir)
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	var out []*ctrlv1.MetricsFilesystem
	for _, p := range s.Paths {
		if !mounted[p] {
			continue
		}
		var st unix.Statfs_t
		if err := unix.Statfs(filepath.Join(s.Root, p), &st); err != nil {
			return nil, fmt.Errorf("statfs %s: %w", p, err)
		}
		unit := uint64(st.Frsize)
		if unit == 0 {
			unit = uint64(st.Bsize)
		}
		out = append(out, &ctrlv1.MetricsFilesystem{
			Path:          p,
			CapacityBytes: st.Blocks * unit, UsedBytes: (st.Blocks - min(st.Bfree, st.Blocks)) * unit,
			CapacityInodes: st.Files, UsedInodes: st.Files - min(st.Ffree, st.Files),
		})
	}
	return out, nil
}

// mountPoints is the set of mount points of <procDir>/self/mountinfo
// (the fifth field, octal escapes undone).
func mountPoints(procDir string) (map[string]bool, error) {
	b, err := os.ReadFile(filepath.Join(procDir, "self/mountinfo"))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for line := range strings.SplitSeq(string(b), "\n") {
		if fields := strings.Fields(line); len(fields) > 4 {
			out[unescapeMountPath(fields[4])] = true
		}
	}
	return out, nil
}

// unescapeMountPath undoes the kernel's \NNN octal escapes of a space, a
// tab, a newline and a backslash in mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readMemInfo reads MemTotal and MemAvailable of <procDir>/meminfo, in
// bytes.
func readMemInfo(procDir string) (total, available uint64, err error) {
	b, err := os.ReadFile(filepath.Join(procDir, "meminfo"))
	if err != nil {
		return 0, 0, err
	}
	var haveTotal, haveAvail bool
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, perr := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch {
		case perr != nil:
		case k == "MemTotal":
			total, haveTotal = kb*1024, true
		case k == "MemAvailable":
			available, haveAvail = kb*1024, true
		}
	}
	if !haveTotal || !haveAvail {
		return 0, 0, errors.New("no MemTotal or MemAvailable")
	}
	return total, available, nil
}

// countProcesses counts the numeric directories of procDir: every process,
// kernel threads included.
func countProcesses(procDir string) (uint32, error) {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return 0, err
	}
	var n uint32
	for _, e := range entries {
		if _, err := strconv.ParseUint(e.Name(), 10, 32); err == nil && e.IsDir() {
			n++
		}
	}
	return n, nil
}
