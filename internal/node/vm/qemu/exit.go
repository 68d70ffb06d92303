package qemu

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/kibotos/kibotos/internal/node/vm"
)

// classifyEnd says how a VM that ended without the node killing it ended:
//
//   - PowerOff when the guest kernel powered off ("reboot: Power down"),
//     Reset when it restarted ("reboot: Restarting system", which
//     -no-reboot turns into an exit), both only without a panic.
//   - OOMKilled when the host's OOM killer probably ended QEMU. The kernel
//     log that would say so is not readable portably, so this is a
//     heuristic: QEMU died of SIGKILL that the node did not send, and the
//     host's OOM kill counter (oom_kill in /proc/vmstat, counting memory
//     cgroup kills too) rose in the seconds before it was noticed. Without
//     the counter, SIGKILL alone decides. A re-attached QEMU is not this
//     process's child, so its exit status is unknown: the counter alone
//     decides.
//   - Crashed otherwise (a guest panic, a QEMU error, a kill by someone
//     else).
func classifyEnd(console string, st *os.ProcessState, oomBefore, oomAfter int64) vm.Cause {
	if !strings.Contains(console, "Kernel panic") {
		switch {
		case strings.Contains(console, "reboot: Power down"):
			return vm.PowerOff
		case strings.Contains(console, "reboot: Restarting system"):
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
