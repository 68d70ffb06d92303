package guest_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
)

// watch starts a watch and returns its events as they come, after
// `started`.
func watch(t *testing.T, c guestv1connect.GuestAgentServiceClient, r *ctrlv1.WatchDirectoryRequest) (<-chan *ctrlv1.FileEvent, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := c.WatchDirectory(ctx, connect.NewRequest(&guestv1.WatchDirectoryRequest{Request: r}))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Receive() || s.Msg().GetResponse().GetStarted() == nil {
		t.Fatalf("first message: %v %v", s.Msg(), s.Err())
	}
	events, end := make(chan *ctrlv1.FileEvent, 100), make(chan error, 1)
	go func() {
		for s.Receive() {
			if ev := s.Msg().GetResponse().GetEvent(); ev != nil {
				events <- ev
			}
		}
		end <- s.Err()
	}()
	return events, end
}

// next waits for an event matching kind and path.
func next(t *testing.T, events <-chan *ctrlv1.FileEvent, kind ctrlv1.FileEventKind, path string) *ctrlv1.FileEvent {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.GetKind() == kind && ev.GetPath() == path {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %v event for %s", kind, path)
			return nil
		}
	}
}

func TestWatchDirectory(t *testing.T) {
	c, root := fileAgent(t)
	host := func(p string) string { return filepath.Join(root, p) }
	if err := os.MkdirAll(host("w/old"), 0o755); err != nil {
		t.Fatal(err)
	}
	events, end := watch(t, c, &ctrlv1.WatchDirectoryRequest{Path: "/w", Recursive: true})

	if err := os.WriteFile(host("w/f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_CREATED, "/w/f"); ev.GetType() != ctrlv1.FileType_FILE_TYPE_REGULAR {
		t.Errorf("created: %v", ev)
	}
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_MODIFIED, "/w/f")
	if err := os.Chmod(host("w/f"), 0o600); err != nil {
		t.Fatal(err)
	}
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_ATTRIBUTES_CHANGED, "/w/f")
	// A directory existing before the watch, and one made during it, are
	// watched too.
	if err := os.WriteFile(host("w/old/g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_CREATED, "/w/old/g")
	if err := os.MkdirAll(host("w/new/deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_CREATED, "/w/new")
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_CREATED, "/w/new/deeper")
	if err := os.WriteFile(host("w/new/deeper/h"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_CREATED, "/w/new/deeper/h")
	// Moves: within (renamed), out (deleted), in (created).
	if err := os.Rename(host("w/f"), host("w/old/f2")); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_RENAMED, "/w/f"); ev.GetNewPath() != "/w/old/f2" {
		t.Errorf("renamed: %v", ev)
	}
	if err := os.Rename(host("w/old"), host("w/moved")); err != nil {
		t.Fatal(err)
	}
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_RENAMED, "/w/old")
	if err := os.WriteFile(host("w/moved/after"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_CREATED, "/w/moved/after")
	if err := os.Rename(host("w/moved/f2"), host("outside")); err != nil {
		t.Fatal(err)
	}
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_DELETED, "/w/moved/f2")
	if err := os.Rename(host("outside"), host("w/back")); err != nil {
		t.Fatal(err)
	}
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_CREATED, "/w/back")
	if err := os.Remove(host("w/back")); err != nil {
		t.Fatal(err)
	}
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_DELETED, "/w/back")
	// The watched directory itself goes: its event, then the end.
	if err := os.RemoveAll(host("w")); err != nil {
		t.Fatal(err)
	}
	next(t, events, ctrlv1.FileEventKind_FILE_EVENT_KIND_DELETED, "/w")
	endsOK(t, end, "with its directory")
}

func TestWatchRefusals(t *testing.T) {
	c, _ := fileAgent(t)
	for _, tc := range []struct {
		path string
		code connect.Code
	}{{"/etc/passwd", connect.CodeFailedPrecondition}, {"/nope", connect.CodeNotFound}, {"rel", connect.CodeInvalidArgument}} {
		s, err := c.WatchDirectory(context.Background(), connect.NewRequest(&guestv1.WatchDirectoryRequest{Request: &ctrlv1.WatchDirectoryRequest{Path: tc.path}}))
		if err == nil {
			for s.Receive() {
			}
			err = s.Err()
		}
		wantErr(t, "watch "+tc.path, err, tc.code, "path")
	}
}

// endsOK waits for a watch to end without an error, as it does when the
// watched directory goes (when says how).
func endsOK(t *testing.T, end <-chan error, when string) {
	t.Helper()
	select {
	case err := <-end:
		if err != nil {
			t.Errorf("the watch ended with %v, want OK", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the watch did not end %s", when)
	}
}
