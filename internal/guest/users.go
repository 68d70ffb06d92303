package guest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// User is a guest user as /etc/passwd and /etc/group name it.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups
	Home   string
	Shell  string
}

// root is the guest's root directory.
func (a *Agent) root() string {
	if a.Root == "" {
		return "/"
	}
	return a.Root
}

// lookupUser resolves a user name or decimal uid in the guest's
// /etc/passwd; empty is root (Templates declare no default user yet). An
// unknown user is failed_precondition naming field.
func (a *Agent) lookupUser(field, name string) (*User, error) {
	if name == "" {
		name = "root"
	}
	entries, err := readColonFile(filepath.Join(a.root(), "etc/passwd"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	for _, f := range entries {
		if len(f) < 7 || (f[0] != name && f[2] != name) {
			continue
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		u := &User{Name: f[0], UID: uint32(uid), GID: uint32(gid), Home: f[5], Shell: f[6]}
		u.Groups = a.groupsOf(u)
		return u, nil
	}
	if name == "root" || name == "0" {
		// A root without /etc/passwd still has root.
		return &User{Name: "root", Home: "/root", Shell: "/bin/sh"}, nil
	}
	return nil, codeErr(connect.CodeFailedPrecondition, ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, field,
		"%s: no user %q in the guest's /etc/passwd", field, name)
}

// groupsOf lists the groups that name u as a member, with its own.
func (a *Agent) groupsOf(u *User) []uint32 {
	groups := []uint32{u.GID}
	entries, _ := readColonFile(filepath.Join(a.root(), "etc/group"))
	for _, f := range entries {
		if len(f) < 4 {
			continue
		}
		for _, m := range strings.Split(f[3], ",") {
			if m == u.Name {
				if gid, err := strconv.ParseUint(f[2], 10, 32); err == nil && uint32(gid) != u.GID {
					groups = append(groups, uint32(gid))
				}
			}
		}
	}
	return groups
}

// names maps ids to names from a colon file (/etc/passwd, /etc/group).
func (a *Agent) names(file string) map[uint32]string {
	m := map[uint32]string{}
	entries, _ := readColonFile(filepath.Join(a.root(), file))
	for _, f := range entries {
		if len(f) >= 3 {
			if id, err := strconv.ParseUint(f[2], 10, 32); err == nil {
				if _, dup := m[uint32(id)]; !dup {
					m[uint32(id)] = f[0]
				}
			}
		}
	}
	return m
}

func readColonFile(path string) ([][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out, sc.Err()
}

// asUser runs fn with u's file-system identity: root runs it directly;
// another user runs it on an OS thread of its own whose fsuid, fsgid and
// groups are u's (set with raw syscalls, which change only that thread),
// so the kernel checks u's permissions and new files belong to u. The
// thread is never unlocked: Go ends it with the goroutine instead of
// reusing it with u's identity.
func asUser(u *User, fn func() error) error {
	if u == nil || (u.UID == 0 && u.GID == 0) {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := becomeUser(u); err != nil {
			done <- connect.NewError(connect.CodeInternal, fmt.Errorf("take user %s's identity: %w", u.Name, err))
			return
		}
		done <- fn()
	}()
	return <-done
}

func becomeUser(u *User) error {
	groups := append([]uint32{u.GID}, u.Groups...)
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0); e != 0 {
		return e
	}
	// setfsuid/setfsgid report the previous id, never an error.
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(u.GID), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(u.UID), 0, 0)
	return nil
}
