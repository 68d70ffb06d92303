package qemu_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

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

	// A run directory no process names is a VM gone.
	killAll()
	<-launched.Exited()
	if _, err := qemu.Attach(runDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Attach after the stand-in was killed: %v, want no pid file", err)
	}
}
