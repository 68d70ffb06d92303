package qemu

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kibotos/kibotos/internal/node/vm"
)

// classifyEnd says how a VM that ended without the node killing it ended:
//
//   - PowerOff when the guest kernel's last word was that it powers off
//     ("reboot: Power down"), Reset when it was a restart ("reboot:
//     Restarting system": QEMU ended during the reset); neither after a
//     panic anywhere in the console (then as below).
//   - OOMKilled when the host's OOM killer probably ended QEMU. The kernel
//     log that would say so is not readable portably, so this is a
//     heuristic: QEMU died of SIGKILL that the node did not send, and the
//     host's OOM kill counter (oom_kill in /proc/vmstat, counting memory
//     cgroup kills too) rose in the seconds before it was noticed
//     (oomWindow). Without
//     the counter, SIGKILL alone decides. A re-attached QEMU is not this
//     process's child, so its exit status is unknown: the counter alone
//     decides.
//   - Crashed otherwise (a guest panic, a QEMU error, a kill by someone
//     else).
func classifyEnd(console string, st *os.ProcessState, oomBefore, oomAfter int64) vm.Cause {
	if off, reset := strings.LastIndex(console, powerDownLine), strings.LastIndex(console, resetLine); !strings.Contains(console, panicLine) {
		switch {
		case off > reset:
			return vm.PowerOff
		case reset > off:
			return vm.Reset
		}
	}
	oomRose := oomBefore >= 0 && oomAfter > oomBefore
	if st == nil {
		if oomRose {
			return vm.OOMKilled
		}
		return vm.Crashed
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL &&
		(oomRose || oomBefore < 0 || oomAfter < 0) {
		return vm.OOMKilled
	}
	return vm.Crashed
}

// What the guest kernel says on its console when it powers off, restarts
// the machine, or panics.
const (
	powerDownLine = "reboot: Power down"
	resetLine     = "reboot: Restarting system"
	panicLine     = "Kernel panic"
)

// consoleWatch reads a console log as it grows and counts the guest's
// resets and panics in it.
type consoleWatch struct {
	path    string
	offset  int64
	partial string
	resets  int
	panics  int
}

// scan reads what was written since the last scan.
func (c *consoleWatch) scan() {
	f, err := os.Open(c.path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(c.offset, io.SeekStart); err != nil {
		return
	}
	b, err := io.ReadAll(io.LimitReader(f, 4<<20))
	if err != nil || len(b) == 0 {
		return
	}
	c.offset += int64(len(b))
	text := c.partial + string(b)
	lines := strings.Split(text, "\n")
	c.partial = lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		switch {
		case strings.Contains(l, resetLine):
			c.resets++
		case strings.Contains(l, panicLine):
			c.panics++
		}
	}
}

// oomWindow is how long before a VM's end was noticed an OOM kill is still
// attributed to it. It spans a few of watch's ticks: the kernel counts the
// kill when it sends SIGKILL, and a QEMU holding hundreds of MiB takes a
// while to die and be reaped, so a tick can sample the risen counter
// before the end is noticed.
const oomWindow = 6 * time.Second

// oomHistory keeps the host's OOM kill counter as sampled over the last
// oomWindow, and the newest sample older than that.
type oomHistory struct {
	samples []oomSample // oldest first
}

type oomSample struct {
	at time.Time
	n  int64
}

// add records a sample taken at at, and forgets those no longer needed.
func (h *oomHistory) add(at time.Time, n int64) {
	h.samples = append(h.samples, oomSample{at, n})
	keep := 0
	for i, s := range h.samples {
		if !s.at.After(at.Add(-oomWindow)) {
			keep = i
		}
	}
	h.samples = h.samples[keep:]
}

// before is the counter as it was at least oomWindow ago (or at the first
// sample, when the watch is younger): a rise since covers any kill in the
// window. -1 when the counter was unreadable then, or never sampled.
func (h *oomHistory) before() int64 {
	if len(h.samples) == 0 {
		return -1
	}
	return h.samples[0].n
}

// oomKills reads the host's OOM kill counter, or -1.
func oomKills() int64 {
	f, err := os.Open("/proc/vmstat")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// consoleTail is the end of a run directory's console log.
func consoleTail(runDir string) string {
	return readTail(filepath.Join(runDir, consoleLog))
}

// readTail is the last 16 KiB of a file, or "".
func readTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 16 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		_, _ = f.Seek(-max, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, max))
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
