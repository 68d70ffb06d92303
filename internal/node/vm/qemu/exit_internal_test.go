package qemu

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kibotos/kibotos/internal/node/vm"
)

// exitOf runs sh -c script and returns how it ended.
func exitOf(t *testing.T, script string) *os.ProcessState {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	_ = cmd.Run()
	return cmd.ProcessState
}

func TestClassifyEnd(t *testing.T) {
	killed := exitOf(t, "kill -KILL $$")
	exited := exitOf(t, "exit 0")
	const (
		shutdown = vm.PowerOff
		reset    = vm.Reset
		oom      = vm.OOMKilled
		crashed  = vm.Crashed
	)
	for _, tc := range []struct {
		name      string
		console   string
		st        *os.ProcessState
		oomBefore int64
		oomAfter  int64
		want      vm.Cause
	}{
		{"power off", "x\n[ 16.8] reboot: Power down\n", exited, 3, 3, shutdown},
		{"restart", "[ 1.0] reboot: Restarting system\n", exited, 3, 3, reset},
		{"restart, then power off", "reboot: Restarting system\nbooted\nreboot: Power down\n", exited, 3, 3, shutdown},
		{"power off is not the last word", "reboot: Power down\nreboot: Restarting system\n", exited, 3, 3, reset},
		{"panic", "Kernel panic - not syncing: x\nreboot: Restarting system\n", exited, 3, 3, crashed},
		{"power off, re-attached", "reboot: Power down", nil, 3, 3, shutdown},
		{"SIGKILL with an OOM kill", "booted", killed, 3, 4, oom},
		{"SIGKILL without an OOM kill", "booted", killed, 3, 3, crashed},
		{"SIGKILL, no counter", "booted", killed, -1, -1, oom},
		{"QEMU exited", "booted", exited, 3, 4, crashed},
		{"re-attached, OOM kill", "booted", nil, 3, 4, oom},
		{"re-attached, no OOM kill", "booted", nil, 3, 3, crashed},
		{"re-attached, no counter", "booted", nil, -1, -1, crashed},
	} {
		if got := classifyEnd(tc.console, tc.st, tc.oomBefore, tc.oomAfter); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if n := oomKills(); n < 0 {
		t.Logf("no oom_kill counter in /proc/vmstat here")
	}
}

// A kill the counter showed on a tick before the VM's end was noticed is
// still attributed to it (the tick can land between the kernel's SIGKILL and
// the reap); one older than oomWindow is not.
func TestOOMHistoryLooksBackAWindow(t *testing.T) {
	var h oomHistory
	if got := h.before(); got != -1 {
		t.Errorf("no sample: %d, want -1", got)
	}
	t0 := time.Unix(1000, 0)
	h.add(t0, 3)
	if got := h.before(); got != 3 {
		t.Errorf("one sample: %d, want 3", got)
	}
	h.add(t0.Add(2*time.Second), 3)
	h.add(t0.Add(4*time.Second), 4) // the kill, counted on this tick
	if got := h.before(); got != 3 {
		t.Errorf("a kill 4s after the first sample: before %d, want 3", got)
	}
	if got := classifyEnd("booted", exitOf(t, "kill -KILL $$"), h.before(), 4); got != vm.OOMKilled {
		t.Errorf("SIGKILL after a tick saw the counter rise: %v, want OOMKilled", got)
	}
	for i := 3; i <= 6; i++ {
		h.add(t0.Add(time.Duration(2*i)*time.Second), 4)
	}
	if got := h.before(); got != 4 {
		t.Errorf("the kill 8s before the last sample: before %d, want 4 (out of the window)", got)
	}
	if n := len(h.samples); n > int(oomWindow/(2*time.Second))+1 {
		t.Errorf("%d samples kept for a %v window at 2s ticks", n, oomWindow)
	}
}

// The console watch counts resets and panics as the log grows, a line
// split across two reads included.
func TestConsoleWatchCountsResetsAndPanics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	w := &consoleWatch{path: path}
	appendText := func(s string) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	w.scan() // no file yet
	appendText("booted\n[ 9.1] reboot: Restart")
	w.scan()
	if w.resets != 0 {
		t.Errorf("a partial line counted: %d", w.resets)
	}
	appendText("ing system\nbooted again\n")
	w.scan()
	appendText("[ 3.0] reboot: Restarting system\nKernel panic - not syncing: x\n")
	w.scan()
	if w.resets != 2 || w.panics != 1 {
		t.Errorf("resets %d panics %d, want 2 and 1", w.resets, w.panics)
	}
}
