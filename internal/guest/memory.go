package guest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
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
//     SaturatedPermille ("most of the time"), NORMAL below it. Until its own
//     samples span half a Window (after boot, after a kill) the kernel's
//     own ten-second average (avg10) is the share judged: every report is
//     a measurement, none a guess;
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

// fullStall is what the "full" line of pressure/memory says.
type fullStall struct {
	totalUS       uint64 // total stall since boot, in microseconds
	avg10Permille uint32 // the kernel's ten-second average, in thousandths
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
	stall, err := readFullStall(m.ProcDir)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.report == nil {
		m.report = &guestv1.MemoryReport{}
	}
	m.samples = append(m.samples, psiSample{at: now, totalUS: stall.totalUS})
	for len(m.samples) > 1 && now.Sub(m.samples[1].at) >= Window {
		m.samples = m.samples[1:]
	}
	first := m.samples[0]
	span := now.Sub(first.at)
	permille, over := stall.avg10Permille, "the kernel's ten-second average" // too short a window of its own
	if span >= Window/2 {
		permille = uint32(min(1000, (stall.totalUS-first.totalUS)*1000/uint64(span.Microseconds())))
		over = "the last " + span.Round(time.Second).String()
	}
	m.report.FullAvg10Permille = permille
	if permille < SaturatedPermille {
		m.report.Condition, m.report.SaturatedSince = guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL, nil
		return
	}
	if m.report.GetCondition() != guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED {
		m.report.Condition = guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED
		m.report.SaturatedSince = timestamppb.New(first.at)
		m.logf("memory saturated: every process stalled %d‰ of %s", permille, over)
	}
	saturatedFor := now.Sub(m.report.GetSaturatedSince().AsTime())
	if saturatedFor < KillAfter {
		return
	}
	m.killLargest(now, permille, span, saturatedFor)
}

// killLargest kills the process with the largest resident set and starts
// the judgment anew: the report stays SATURATED, counted from the kill,
// until a judgment shows the kill was enough.
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
	m.report.SaturatedSince = timestamppb.New(now)
	m.samples = m.samples[len(m.samples)-1:]
}

func (m *MemoryWatch) logf(format string, args ...any) {
	if m.Logf != nil {
		m.Logf(format, args...)
	}
}

// readFullStall reads the "full" line of <procDir>/pressure/memory.
func readFullStall(procDir string) (fullStall, error) {
	f, err := os.Open(filepath.Join(procDir, "pressure/memory"))
	if err != nil {
		return fullStall{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != "full" {
			continue
		}
		return parseFullStall(fields[1:])
	}
	if err := sc.Err(); err != nil {
		return fullStall{}, err
	}
	return fullStall{}, errors.New("no full line in pressure/memory")
}

// parseFullStall reads a full line's fields: "avg10=1.23 ... total=456".
func parseFullStall(fields []string) (fullStall, error) {
	var st fullStall
	var haveTotal, haveAvg bool
	for _, kv := range fields {
		if v, ok := strings.CutPrefix(kv, "total="); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return fullStall{}, fmt.Errorf("pressure/memory full total: %w", err)
			}
			st.totalUS, haveTotal = n, true
		}
		if v, ok := strings.CutPrefix(kv, "avg10="); ok {
			pct, err := strconv.ParseFloat(v, 64)
			if err != nil || pct < 0 {
				return fullStall{}, fmt.Errorf("pressure/memory full avg10 %q", v)
			}
			st.avg10Permille, haveAvg = uint32(min(1000, math.Round(pct*10))), true
		}
	}
	if !haveTotal || !haveAvg {
		return fullStall{}, errors.New("no full total and avg10 in pressure/memory")
	}
	return st, nil
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
