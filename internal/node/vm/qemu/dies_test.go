package qemu_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kibotos/kibotos/internal/node/vm/qemu"
)

// fakeQEMU writes a stand-in for QEMU that records its pid and waits.
func fakeQEMU(t *testing.T, dir string) (bin, pidFile string) {
	t.Helper()
	bin, pidFile = filepath.Join(dir, "qemu"), filepath.Join(dir, "fake.pid")
	script := "#!/bin/sh\necho $$ > " + pidFile + ".tmp && mv " + pidFile + ".tmp " + pidFile + "\nexec sleep 600\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, pidFile
}

// TestHelperAgent is the agent of TestAProbeVMDiesWithItsAgent: it starts the
// stand-in and waits to be killed. It does nothing when run on its own.
func TestHelperAgent(t *testing.T) {
	dir := os.Getenv("KIBOTOS_TEST_HELPER_AGENT")
	if dir == "" {
		return
	}
	bin, _ := fakeQEMU(t, dir)
	if _, err := qemu.Start(qemu.Spec{RunDir: filepath.Join(dir, "run"), Binary: bin, DiesWithAgent: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Hour) // the test kills this process
}

func TestAProbeVMDiesWithItsAgent(t *testing.T) {
	dir := t.TempDir()
	agent := exec.Command(os.Args[0], "-test.run=^TestHelperAgent$")
	agent.Env = append(os.Environ(), "KIBOTOS_TEST_HELPER_AGENT="+dir)
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	pid := waitPID(t, filepath.Join(dir, "fake.pid"))
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("the stand-in QEMU (pid %d) is not running: %v", pid, err)
	}
	if err := agent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	agent.Wait()
	// The stand-in is not our child: it is gone once it no longer answers
	// signal 0 or is a zombie waiting for init.
	for deadline := time.Now().Add(30 * time.Second); running(pid); {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the stand-in QEMU (pid %d) outlived its agent", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitPID(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if b, err := os.ReadFile(path); err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatal("the stand-in QEMU never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}
