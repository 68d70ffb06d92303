package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Unmounter unmounts file systems; sysUnmounter is the real one.
type Unmounter interface {
	// Unmount unmounts target; detach makes it lazy (MNT_DETACH).
	Unmount(target string, detach bool) error
	// RemountReadOnly makes the file system at target read-only.
	RemountReadOnly(target string) error
}

// Teardown unmounts mounts (given in the order they were made) in reverse
// order. A storage mount that cannot be unmounted is remounted read-only,
// which flushes it and keeps it consistent, but the result is then not
// durable; a failure on a read-only mount does not count. Other mounts are
// detached.
func Teardown(mounts []Mount, u Unmounter, logf func(string, ...any)) ShutdownResult {
	var problems []string
	unmounted := 0
	for i := len(mounts) - 1; i >= 0; i-- {
		m := mounts[i]
		if !m.Storage {
			if err := u.Unmount(m.Target, true); err != nil {
				logf("detach %s: %v", m.Target, err)
			}
			continue
		}
		err := u.Unmount(m.Target, false)
		if err == nil {
			logf("unmounted %s", m.Target)
			unmounted++
			continue
		}
		if m.Flags&unix.MS_RDONLY != 0 {
			logf("unmount %s (read-only): %v", m.Target, err)
			continue
		}
		p := fmt.Sprintf("unmount %s: %v", m.Target, err)
		if rerr := u.RemountReadOnly(m.Target); rerr != nil {
			p += fmt.Sprintf("; remount read-only: %v", rerr)
		} else {
			p += "; remounted read-only"
		}
		logf("%s", p)
		problems = append(problems, p)
	}
	if len(problems) > 0 {
		return ShutdownResult{Durable: false, Message: strings.Join(problems, "; ")}
	}
	if unmounted == 0 {
		return ShutdownResult{Durable: true, Message: "no storage to unmount"}
	}
	return ShutdownResult{Durable: true, Message: fmt.Sprintf("unmounted %d file systems", unmounted)}
}

// sysUnmounter is the kernel's umount2 and remount.
type sysUnmounter struct{}

func (sysUnmounter) Unmount(target string, detach bool) error {
	flags := 0
	if detach {
		flags = unix.MNT_DETACH
	}
	var err error
	// Processes just killed may still be letting go of their files.
	for try := 0; try < 10; try++ {
		if err = unix.Unmount(target, flags); !errors.Is(err, unix.EBUSY) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

func (sysUnmounter) RemountReadOnly(target string) error {
	return unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_RDONLY, "")
}

// CountUserProcesses counts the processes in procDir (/proc) other than
// self that run a program: kernel threads and zombies have an empty
// cmdline.
func CountUserProcesses(procDir string, self int) int {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(procDir, e.Name(), "cmdline")); err == nil && len(b) > 0 {
			n++
		}
	}
	return n
}

// stopProcesses sends every other process SIGTERM, waits up to grace for
// them to end, then kills what is left.
func (s *System) stopProcesses(grace time.Duration) {
	if CountUserProcesses("/proc", os.Getpid()) == 0 {
		return
	}
	s.Log.Printf("stopping processes (SIGTERM, %s grace)", grace)
	_ = unix.Kill(-1, unix.SIGTERM)
	if waitFor(context.Background(), grace, 50*time.Millisecond, s.noProcesses) == nil {
		return
	}
	s.Log.Printf("killing %d processes left", CountUserProcesses("/proc", os.Getpid()))
	_ = unix.Kill(-1, unix.SIGKILL)
	if err := waitFor(context.Background(), 2*time.Second, 50*time.Millisecond, s.noProcesses); err != nil {
		s.Log.Printf("%v", err)
	}
}

func (s *System) noProcesses() error {
	if n := CountUserProcesses("/proc", os.Getpid()); n > 0 {
		return fmt.Errorf("%d processes still run", n)
	}
	return nil
}

// Shutdown stops every process and unmounts the Volume, the overlay and the
// writable layer (in reverse order of mounting; a busy one is remounted
// read-only). It runs once; later and concurrent calls get the first
// result. Outside PID 1 it touches nothing.
func (s *System) Shutdown(context.Context) ShutdownResult {
	s.shutdownOnce.Do(func() {
		if !s.pid1 {
			s.shutdown = ShutdownResult{Durable: true, Message: "not PID 1: nothing mounted"}
			return
		}
		s.down.Store(true)
		s.Log.Printf("shutting down")
		s.stopProcesses(s.grace)
		unix.Sync()
		if s.oldRoot != nil {
			// Leave the chroot: the mounts are recorded as the initramfs
			// sees them.
			if err := unix.Fchdir(int(s.oldRoot.Fd())); err == nil {
				if err := unix.Chroot("."); err != nil {
					s.Log.Printf("leave the new root: %v", err)
				}
				_ = unix.Chdir("/")
			}
		}
		s.shutdown = Teardown(s.table.Mounts(), sysUnmounter{}, s.Log.Printf)
		unix.Sync()
		s.Log.Printf("shutdown: durable=%t: %s", s.shutdown.Durable, s.shutdown.Message)
	})
	return s.shutdown
}

// PowerOff shuts down (Shutdown) and powers the machine off. As PID 1 it
// never returns. Outside PID 1 it calls the stop function the System was
// made with instead, and returns.
func (s *System) PowerOff(reason string) {
	s.powerOnce.Do(func() {
		s.Log.Printf("power off: %s", reason)
		if !s.pid1 {
			if s.stop != nil {
				s.stop()
			}
			return
		}
		s.Shutdown(context.Background())
		err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
		s.Log.Printf("power off failed: %v", err)
	})
	for s.pid1 {
		// PID 1 must not exit: that panics the kernel. (A sleeping loop,
		// not select{}, so that the runtime never sees a deadlock.)
		time.Sleep(time.Hour)
	}
}
