package guest_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kibotos/kibotos/internal/guest"
)

func TestCountUserProcesses(t *testing.T) {
	proc := t.TempDir()
	mustWrite(t, filepath.Join(proc, "1/cmdline"), "/init\x00")
	mustWrite(t, filepath.Join(proc, "2/cmdline"), "")            // a kernel thread
	mustWrite(t, filepath.Join(proc, "57/cmdline"), "")           // a zombie
	mustWrite(t, filepath.Join(proc, "120/cmdline"), "sleep\x00") // a process
	mustWrite(t, filepath.Join(proc, "121/cmdline"), "sh\x00")
	mustMkdir(t, filepath.Join(proc, "130")) // gone while we looked
	mustWrite(t, filepath.Join(proc, "self/cmdline"), "x\x00")
	mustWrite(t, filepath.Join(proc, "cmdline"), "console=ttyS0")
	if n := guest.CountUserProcesses(proc, 1); n != 2 {
		t.Errorf("%d user processes, want 2", n)
	}
	if n := guest.CountUserProcesses(filepath.Join(proc, "nonexistent"), 1); n != 0 {
		t.Errorf("%d in no /proc", n)
	}
}

// Outside PID 1 a System never touches the machine it runs on: Shutdown
// unmounts nothing and PowerOff only stops the agent.
func TestStandaloneSystemTouchesNothing(t *testing.T) {
	stops := 0
	sys := guest.Standalone(testLogger(t), func() { stops++ })
	res := sys.Shutdown(context.Background())
	if !res.Durable || res.Message != "not PID 1: nothing mounted" {
		t.Errorf("%+v", res)
	}
	sys.PowerOff("test")
	sys.PowerOff("test again")
	if stops != 1 {
		t.Errorf("stopped %d times", stops)
	}
}
