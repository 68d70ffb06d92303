package qemu_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kibotos/kibotos/internal/node/vm/qemu"
)

// A node agent killed right after it launched QEMU, before QEMU wrote its
// pid file, must find that QEMU again at its restart: taken for gone, a
// second QEMU would be started on the same disks (and refused by the
// first one's image lock) while the first ran on unseen. The stand-in
// never writes the pid file; it keeps its arguments (no exec), as QEMU
// does while it starts.
func TestAttachFindsAQEMUThatWroteNoPidFileYet(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "qemu")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nsleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(dir, "run")
	launched, err := qemu.Start(qemu.Spec{RunDir: runDir, Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	// The stand-in's sleep is in its session (Setsid): end them together.
	killAll := func() { _ = syscall.Kill(-launched.PID, syscall.SIGKILL) }
	t.Cleanup(killAll)
	launched.Release() // as a node agent that exits does

	again, err := qemu.Attach(runDir)
	if err != nil {
		t.Fatalf("Attach before the pid file: %v", err)
	}
	if again.PID != launched.PID || !again.Alive() {
		t.Fatalf("attached pid %d (alive %v), want the launched %d", again.PID, again.Alive(), launched.PID)
	}
	if _, err := os.Stat(filepath.Join(runDir, "qemu.pid")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the stand-in wrote a pid file (%v): the test tests nothing", err)
	}

	// A run directory no process names is a VM gone. The stand-in's
	// group can outlive its leader for a moment (a child it was forking
	// carries its arguments until it execs): once /proc shows no process
	// naming the pid file, Attach must find none either.
	pidFile := filepath.Join(runDir, "qemu.pid")
	if !namesPidFile(t, pidFile) {
		t.Fatal("the running stand-in's arguments do not name its pid file: the wait below would wait for nothing")
	}
	killAll()
	<-launched.Exited()
	deadline := time.Now().Add(10 * time.Second)
	for namesPidFile(t, pidFile) {
		if time.Now().After(deadline) {
			t.Fatal("a process still names the stand-in's pid file 10 s after its group was killed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := qemu.Attach(runDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Attach after the stand-in was killed: %v, want no pid file", err)
	}
}

// namesPidFile reports whether a running process has "-pidfile path"
// among its arguments, read from /proc apart from Attach's own reading.
func namesPidFile(t *testing.T, path string) bool {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(b), "-pidfile\x00"+path+"\x00") {
			return true
		}
	}
	return false
}
