package guest

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
)

// Memory pressure policy. The guest reads the kernel's PSI ("full" line of
// /proc/pressure/memory: the time every runnable process was stalled
// waiting for memory) and judges:
//   - SATURATED when the full stall share over the last Window reaches
//     SaturatedPermille ("most of the time"), NORMAL below it;
//   - once SATURATED has lasted KillAfter, it kills the process with the
//     largest resident set (never PID 1, never a kernel thread), and
//     reports it, so a runaway process does not hold the Workspace at a
//     standstill until the kernel's own OOM killer, which waits for
//     allocation failure, acts.
const (
	SaturatedPermille = 500
	Window            = 10 * time.Second
	KillAfter         = 20 * time.Second
	sampleEvery       = time.Second
)

// MemoryWatch keeps the guest's judgment of its memory.
type MemoryWatch struct {
	// ProcDir is /proc (a directory with the same layout in tests).
	ProcDir string
	// Kill sends SIGKILL; nil is unix.Kill.
	Kill func(pid int) error
	// Logf logs a decision; nil logs nothing.
	Logf func(format string, args ...any)

	mu      sync.Mutex
	samples []psiSample // within Window, oldest first
	report  *guestv1.MemoryReport
}

type psiSample struct {
	at      time.Time
	totalUS uint64 // the full line's total stall, in microseconds
}

// ErrNoPSI means the guest kernel does not account memory pressure.
var ErrNoPSI = errors.New("the kernel does not account memory pressure (no /proc/pressure/memory; boot with psi=1)")

// Run samples PSI every second until ctx ends. It returns ErrNoPSI at once
// when the kernel has none, leaving Report nil.
func (m *MemoryWatch) Run(ctx context.Context) error {
	if _, err := readFullStall(m.ProcDir); err != nil {
		return ErrNoPSI
	}
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		m.Sample(time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Report is the latest judgment, or nil while there is none.
func (m *MemoryWatch) Report() *guestv1.MemoryReport {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.report == nil {
		return nil
	}
	return proto.Clone(m.report).(*guestv1.MemoryReport)
}

// Sample reads PSI once at now and updates the judgment, killing when
// saturation has lasted KillAfter.
func (m *MemoryWatch) Sample(now time.Time) {
	total, err := readFullStall(m.ProcDir)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.report == nil {
		m.report = &guestv1.MemoryReport{Condition: guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL}
	}
	m.samples = append(m.samples, psiSample{at: now, totalUS: total})
	for len(m.samples) > 1 && now.Sub(m.samples[1].at) >= Window {
		m.samples = m.samples[1:]
	}
	first := m.samples[0]
	span := now.Sub(first.at)
	if span < Window/2 {
		return // too short a window to judge
	}
	permille := uint32(min(1000, (total-first.totalUS)*1000/uint64(span.Microseconds())))
	m.report.FullAvg10Permille = permille
	if permille < SaturatedPermille {
		m.report.Condition, m.report.SaturatedSince = guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL, nil
		return
	}
	if m.report.GetCondition() != guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED {
		m.report.Condition = guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED
		m.report.SaturatedSince = timestamppb.New(first.at)
		m.logf("memory saturated: every process stalled %d‰ of the last %s", permille, span.Round(time.Second))
	}
	saturatedFor := now.Sub(m.report.GetSaturatedSince().AsTime())
	if saturatedFor < KillAfter {
		return
	}
	m.killLargest(now, permille, span, saturatedFor)
}

// killLargest kills the process with the largest resident set and starts
// the judgment anew: the next window shows whether that was enough.
func (m *MemoryWatch) killLargest(now time.Time, permille uint32, window, saturatedFor time.Duration) {
	p, err := largestProcess(m.ProcDir)
	if err != nil {
		m.logf("memory saturated for %s but nothing to kill: %v", saturatedFor.Round(time.Second), err)
		return
	}
	kill := m.Kill
	if kill == nil {
		kill = func(pid int) error { return unix.Kill(pid, unix.SIGKILL) }
	}
	if err := kill(p.pid); err != nil {
		m.logf("memory saturated: cannot kill %d (%s): %v", p.pid, p.command, err)
		return
	}
	m.logf("memory saturated for %s: killed %d (%s, %d bytes resident)", saturatedFor.Round(time.Second), p.pid, p.command, p.rssBytes)
	m.report.KillCount++
	m.report.LatestKill = &guestv1.MemoryKill{
		KilledAt: timestamppb.New(now), Pid: int32(p.pid), Command: p.command, RssBytes: p.rssBytes,
		FullStallPermille: permille, Window: durationpb.New(window), SaturatedFor: durationpb.New(saturatedFor),
	}
	m.report.Condition, m.report.SaturatedSince = guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL, nil
	m.samples = m.samples[len(m.samples)-1:]
}

func (m *MemoryWatch) logf(format string, args ...any) {
	if m.Logf != nil {
		m.Logf(format, args...)
	}
}

// readFullStall reads the total of the "full" line of
// <procDir>/pressure/memory, in microseconds.
func readFullStall(procDir string) (uint64, error) {
	f, err := os.Open(filepath.Join(procDir, "pressure/memory"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "full" {
			continue
		}
		for _, kv := range fields[1:] {
			if v, ok := strings.CutPrefix(kv, "total="); ok {
				return strconv.ParseUint(v, 10, 64)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no full total in pressure/memory")
}

type process struct {
	pid      int
	command  string
	rssBytes uint64
}

// largestProcess is the user process with the largest resident set: PID 1
// and kernel threads (no memory map: VmRSS absent) are never chosen.
func largestProcess(procDir string) (process, error) {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return process{}, err
	}
	var best process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 {
			continue
		}
		p, ok := readProcess(procDir, pid)
		if ok && p.rssBytes > best.rssBytes {
			best = p
		}
	}
	if best.pid == 0 {
		return process{}, errors.New("no user process")
	}
	return best, nil
}

// readProcess reads Name and VmRSS from /proc/<pid>/status.
func readProcess(procDir string, pid int) (process, bool) {
	data, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "status"))
	if err != nil {
		return process{}, false
	}
	p := process{pid: pid}
	hasRSS := false
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Name":
			p.command = v
		case "VmRSS":
			kb, err := strconv.ParseUint(strings.TrimSuffix(v, " kB"), 10, 64)
			if err == nil {
				p.rssBytes, hasRSS = kb*1024, true
			}
		}
	}
	return p, hasRSS
}
