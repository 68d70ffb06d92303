package state_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/kibotos/kibotos/internal/node/state"
)

func open(t *testing.T, dir string) *state.Store {
	t.Helper()
	s, err := state.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestIncarnationCountsAgentStarts(t *testing.T) {
	dir := t.TempDir()
	for want := uint64(1); want <= 3; want++ {
		s := open(t, dir)
		got, err := s.NextIncarnation()
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("start %d: incarnation %d", want, got)
		}
		if s.Identity().Incarnation != want {
			t.Fatalf("Identity().Incarnation = %d, want %d", s.Identity().Incarnation, want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestIdentityPersists(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	err := s.Update(func(id *state.Identity) {
		id.NodeID = "node-a"
		id.Credential = "secret"
		id.Endpoint = "http://ctrl:7672"
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	fi, err := os.Stat(filepath.Join(dir, "node.json"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("node.json mode %v, want 0600", perm)
	}

	s = open(t, dir)
	defer s.Close()
	want := state.Identity{NodeID: "node-a", Credential: "secret", Endpoint: "http://ctrl:7672"}
	if got := s.Identity(); got != want {
		t.Fatalf("identity %+v, want %+v", got, want)
	}
	if _, err := s.NextIncarnation(); err != nil {
		t.Fatal(err)
	}
	if got := s.Identity(); got.Credential != "secret" || got.Incarnation != 1 {
		t.Fatalf("identity after NextIncarnation %+v", got)
	}
}

func TestOpenIsExclusive(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := state.Open(dir); !errors.Is(err, state.ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	s.Close()
	open(t, dir).Close()
}

// An agent restarted at once gets the directory its predecessor is
// releasing: Open waits a little for a held lock before it refuses.
func TestOpenWaitsForALockBeingReleased(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	started, opened := make(chan struct{}), make(chan error, 1)
	go func() {
		close(started)
		s2, err := state.Open(dir)
		if err == nil {
			s2.Close()
		}
		opened <- err
	}()
	<-started
	s.Close()
	if err := <-opened; err != nil {
		t.Fatalf("Open while the holder released: %v", err)
	}
}

func TestOperations(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if _, ok, err := s.LookupOperation("op/1"); err != nil || ok {
		t.Fatalf("lookup before record: ok=%v err=%v", ok, err)
	}
	if err := s.RecordOperation("op/1", []byte("result one")); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOperation("../op 2", []byte("result two")); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = open(t, dir)
	defer s.Close()
	for id, want := range map[string]string{"op/1": "result one", "../op 2": "result two"} {
		got, ok, err := s.LookupOperation(id)
		if err != nil || !ok || string(got) != want {
			t.Fatalf("lookup %q: %q ok=%v err=%v", id, got, ok, err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, "operations"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("operations dir holds %d entries, want 2 (no temporary files left)", len(entries))
	}
}
