package guest_test

// WatchDirectory sentences of docs/spec-coverage/dataplane.md that
// TestWatchDirectory left unasserted, on a real agent and inotify.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
)

// rawWatch opens a watch and reads its `started`; the caller reads the
// rest, or leaves it unread.
func rawWatch(t *testing.T, c guestv1connect.GuestAgentServiceClient, ctx context.Context, r *ctrlv1.WatchDirectoryRequest) *connect.ServerStreamForClient[guestv1.WatchDirectoryResponse] {
	t.Helper()
	s, err := c.WatchDirectory(ctx, connect.NewRequest(&guestv1.WatchDirectoryRequest{Request: r}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if !s.Receive() || s.Msg().GetResponse().GetStarted() == nil {
		t.Fatalf("first message: %v %v", s.Msg(), s.Err())
	}
	return s
}

// "Events of one path arrive in order", each with its observed_at ("on
// the clock of the guest's host"): fifty rounds of create, chmod and
// delete of one file arrive as fifty CREATED, ATTRIBUTES_CHANGED, DELETED
// in turn (MODIFIED aside: "Several writes may yield one event"; repeats
// of one kind in a row count once).
func TestEventsOfOnePathArriveInOrder(t *testing.T) {
	c, root := fileAgent(t)
	dir := filepath.Join(root, "w")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	events, _ := watch(t, c, &ctrlv1.WatchDirectoryRequest{Path: "/w"})
	const rounds = 50
	f := filepath.Join(dir, "f")
	for range rounds {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	var kinds []ctrlv1.FileEventKind
	last := before
	timeout := time.After(30 * time.Second)
	for deleted := 0; deleted < rounds; {
		var ev *ctrlv1.FileEvent
		select {
		case ev = <-events:
		case <-timeout:
			t.Fatalf("%d DELETED events of /w/f, want %d", deleted, rounds)
		}
		at := ev.GetObservedAt().AsTime()
		if at.Before(last) || at.After(time.Now()) {
			t.Errorf("observed_at %v: before the last event's (%v) or in the future", at, last)
		}
		last = at
		switch k := ev.GetKind(); {
		case ev.GetPath() != "/w/f":
			t.Fatalf("an event of %s", ev.GetPath())
		case k == ctrlv1.FileEventKind_FILE_EVENT_KIND_MODIFIED:
		case len(kinds) > 0 && kinds[len(kinds)-1] == k:
		default:
			kinds = append(kinds, k)
			if k == ctrlv1.FileEventKind_FILE_EVENT_KIND_DELETED {
				deleted++
			}
		}
	}
	for i, k := range kinds {
		want := []ctrlv1.FileEventKind{ctrlv1.FileEventKind_FILE_EVENT_KIND_CREATED,
			ctrlv1.FileEventKind_FILE_EVENT_KIND_ATTRIBUTES_CHANGED, ctrlv1.FileEventKind_FILE_EVENT_KIND_DELETED}[i%3]
		if k != want || len(kinds) != 3*rounds {
			t.Fatalf("the events of /w/f: %v, want %d rounds of CREATED, ATTRIBUTES_CHANGED, DELETED", kinds, rounds)
		}
	}
}

// "When the guest drops events (its queue overflowed) an OVERFLOW event
// is sent and the caller must list again": a watch nobody reads while
// far more changes happen than the kernel queues (16384 by default) and
// the stream buffers says OVERFLOW, of the watched directory, once read.
func TestAWatchOverflowSaysOverflow(t *testing.T) {
	c, root := fileAgent(t)
	dir := filepath.Join(root, "w")
	for _, f := range []string{"a", "b"} {
		mustWrite(t, filepath.Join(dir, f), "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := rawWatch(t, c, ctx, &ctrlv1.WatchDirectoryRequest{Path: "/w"})
	// Alternating files: inotify merges only an event equal to the last
	// one queued. About 50,000 messages fill the stream's buffers (the
	// agent's batches, HTTP/2 windows) before the kernel's queue fills.
	// A one-byte write into the page cache is one IN_MODIFY and, unlike a
	// chmod, no journal transaction: the test once ran out of its two
	// minutes in CI on a machine busy with VMs and fsyncs.
	files := make([]*os.File, 2)
	for i, f := range []string{"a", "b"} {
		var err error
		if files[i], err = os.OpenFile(filepath.Join(dir, f), os.O_WRONLY, 0); err != nil {
			t.Fatal(err)
		}
		defer files[i].Close()
	}
	for i := range 400_000 {
		if _, err := files[i%2].WriteAt([]byte{'x'}, 0); err != nil {
			t.Fatal(err)
		}
	}
	for s.Receive() {
		if ev := s.Msg().GetResponse().GetEvent(); ev.GetKind() == ctrlv1.FileEventKind_FILE_EVENT_KIND_OVERFLOW {
			if ev.GetPath() != "/w" || ev.GetType() != ctrlv1.FileType_FILE_TYPE_DIRECTORY {
				t.Errorf("OVERFLOW: %v, want the watched directory /w", ev)
			}
			return
		}
	}
	t.Fatalf("the watch ended without OVERFLOW: %v", s.Err())
}

// "When the watched directory itself is deleted or moved away the stream
// sends that event and ends OK": moved away, it is DELETED (as "a move
// out of it" is: the guest cannot follow it).
func TestAWatchedDirectoryMovedAwayEndsTheWatch(t *testing.T) {
	c, root := fileAgent(t)
	if err := os.Mkdir(filepath.Join(root, "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	events, end := watch(t, c, &ctrlv1.WatchDirectoryRequest{Path: "/w", Recursive: true})
	if err := os.Rename(filepath.Join(root, "w"), filepath.Join(root, "elsewhere")); err != nil {
		t.Fatal(err)
	}
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_DELETED, "/w")
	endsOK(t, end, "when its directory moved away")
}

// FileWatchKeepalive "is sent after 15 seconds without another message".
func TestAnIdleWatchSendsKeepalives(t *testing.T) {
	t.Parallel() // it waits 15 s
	c, root := fileAgent(t)
	if err := os.Mkdir(filepath.Join(root, "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The agent's 15 s begin once it has sent `started`, which is before
	// this side has read it: timed from the call, which comes first, a
	// keepalive sent early cannot pass for one sent on time.
	called := time.Now()
	s := rawWatch(t, c, ctx, &ctrlv1.WatchDirectoryRequest{Path: "/w"})
	if !s.Receive() {
		t.Fatalf("the idle watch ended: %v", s.Err())
	}
	if idle := time.Since(called); s.Msg().GetResponse().GetKeepalive() == nil || idle < 15*time.Second {
		t.Errorf("the first message %v after the call: %v, want a keepalive 15 s after `started`", idle, s.Msg())
	}
}

// watchLimitChild marks the run of TestRunningOutOfWatchesIsResourceExhausted
// inside a user namespace of its own.
const watchLimitChild = "KIBOTOS_TEST_WATCH_LIMIT_CHILD"

// WatchDirectory: "running out of guest watches is resource_exhausted": a
// recursive watch of five directories where the user may hold three. The
// limit is lowered in a user namespace of the test's own (inotify counts
// watches per user namespace since Linux 5.11), so that nothing else on
// the machine runs out.
func TestRunningOutOfWatchesIsResourceExhausted(t *testing.T) {
	if os.Getenv(watchLimitChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRunningOutOfWatchesIsResourceExhausted$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), watchLimitChild+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestRunningOutOfWatchesIsResourceExhausted") {
			t.Fatalf("the test in its own user namespace: %v\n%s", err, out)
		}
		return
	}
	if err := os.WriteFile("/proc/sys/user/max_inotify_watches", []byte("3"), 0); err != nil {
		t.Fatal(err)
	}
	c, root := fileAgent(t)
	for _, d := range []string{"w/a", "w/b", "w/c", "w/d"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.WatchDirectory(context.Background(), connect.NewRequest(&guestv1.WatchDirectoryRequest{Request: &ctrlv1.WatchDirectoryRequest{Path: "/w", Recursive: true}}))
	if err == nil {
		for s.Receive() {
			if s.Msg().GetResponse().GetStarted() != nil {
				t.Error("the watch started")
			}
		}
		err = s.Err()
	}
	wantErr(t, "a recursive watch of five directories with three watches", err, connect.CodeResourceExhausted, "path")
	// The refused watch gave its watches back.
	rawWatch(t, c, context.Background(), &ctrlv1.WatchDirectoryRequest{Path: "/w/a"})
}
