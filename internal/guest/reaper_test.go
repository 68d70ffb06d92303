package guest_test

import (
	"bufio"
	"errors"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func itoa(i int) string { return strconv.Itoa(i) }

func testLogger(t *testing.T) *log.Logger {
	return log.New(testWriter{t}, "kibotos-guest: ", 0)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestReaperReportsExits(t *testing.T) {
	for _, tc := range []struct {
		script       string
		code, signal int
	}{
		{"exit 0", 0, 0},
		{"exit 7", 7, 0},
		{"kill -KILL $$", -1, 9},
	} {
		exited, err := reaper.Start(exec.Command("/bin/sh", "-c", tc.script))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case e := <-exited:
			if e.Code() != tc.code || e.Signal() != tc.signal {
				t.Errorf("%s: code %d signal %d", tc.script, e.Code(), e.Signal())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no exit", tc.script)
		}
	}
}

// PID 1 inherits orphans; a subreaper (this test process) does too, which
// lets the test check that they do not stay zombies.
func TestReaperReapsOrphans(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a subreaper: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", "sleep 0.2 </dev/null >/dev/null 2>&1 & echo $!")
	cmd.Stdout = w
	exited, err := reaper.Start(cmd)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	<-exited
	deadline := time.Now().Add(10 * time.Second)
	for {
		if e, ok := orphans.Load(orphan); ok {
			if _, err := os.Stat(filepath.Join("/proc", itoa(orphan))); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("orphan %d reaped (%+v) but still in /proc: %v", orphan, e, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d not reaped", orphan)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
