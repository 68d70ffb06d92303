// Package state is the node agent's small local state: who the node is
// (node_id, credential, ctrl endpoint), its incarnation counter, and the
// record of the operations it applied.
//
// Layout of the state directory:
//
//	lock               held (flock) while an agent uses the directory
//	node.json          Identity, mode 0600 (it holds the credential)
//	operations/<hash>  one file per applied operation; <hash> is the
//	                   hex SHA-256 of the operation_id
//
// Every write goes to a temporary file in the same directory, is fsynced,
// renamed over the real name, and the directory is fsynced, so a crash
// leaves either the old or the new content, never a torn file.
package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kibotos/kibotos/internal/node/fsutil"
)

// ErrLocked is returned by Open when another process (or another Store in
// this process) holds the state directory.
var ErrLocked = errors.New("state directory is in use by another agent")

// Identity is what node.json holds.
type Identity struct {
	NodeID      string `json:"node_id,omitempty"`
	Credential  string `json:"credential,omitempty"`
	Endpoint    string `json:"endpoint,omitempty"`
	Incarnation uint64 `json:"incarnation,omitempty"`
}

// Store is an open state directory. Its methods are safe for concurrent use.
type Store struct {
	dir  string
	lock *os.File

	mu sync.Mutex
	id Identity
}

const (
	identityFile  = "node.json"
	operationsDir = "operations"
)

// Open opens (creating when missing) the state directory dir and takes its
// lock; Close releases it.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("state directory not set")
	}
	if err := os.MkdirAll(filepath.Join(dir, operationsDir), 0o700); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := takeLock(lock); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", dir, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	s := &Store{dir: dir, lock: lock}
	data, err := os.ReadFile(filepath.Join(dir, identityFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		lock.Close()
		return nil, err
	default:
		if err := json.Unmarshal(data, &s.id); err != nil {
			lock.Close()
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, identityFile), err)
		}
	}
	return s, nil
}

// lockWait is how long Open waits for a lock another holder is releasing.
// An agent restarted at once can find the lock still held: a fork by any
// thread of the process that held it copies the lock's descriptor, and the
// lock stays until that child execs (its copy is close-on-exec). A second
// agent really running on the directory still fails, after this wait.
const lockWait = 2 * time.Second

func takeLock(f *os.File) error {
	deadline := time.Now().Add(lockWait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close releases the state directory.
func (s *Store) Close() error { return s.lock.Close() }

// Dir is the state directory.
func (s *Store) Dir() string { return s.dir }

// Identity returns the stored identity.
func (s *Store) Identity() Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// Update changes the identity with f and stores it durably. The in-memory
// identity changes only when the write succeeded.
func (s *Store) Update(f func(*Identity)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.id
	f(&next)
	data, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(s.dir, identityFile, append(data, '\n'), 0o600); err != nil {
		return err
	}
	s.id = next
	return nil
}

// NextIncarnation increments the stored incarnation, stores it, and returns
// the new value. An agent calls it once per start, before it connects.
func (s *Store) NextIncarnation() (uint64, error) {
	var n uint64
	err := s.Update(func(id *Identity) {
		id.Incarnation++
		n = id.Incarnation
	})
	return n, err
}

func operationFile(operationID string) string {
	sum := sha256.Sum256([]byte(operationID))
	return hex.EncodeToString(sum[:])
}

// LookupOperation returns the record stored for operationID, if any.
func (s *Store) LookupOperation(operationID string) ([]byte, bool, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, operationsDir, operationFile(operationID)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return data, true, nil
}

// RecordOperation stores record for operationID durably; when it returns
// nil, the record survives a crash.
func (s *Store) RecordOperation(operationID string, record []byte) error {
	return fsutil.WriteFileAtomic(filepath.Join(s.dir, operationsDir), operationFile(operationID), record, 0o600)
}
