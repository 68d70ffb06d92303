// Package blockfile makes and removes block files: sparse raw images
// holding an ext4 filesystem, one per Volume or Workspace writable layer,
// in a storage pool directory:
//
//	<pool dir>/volumes/<object_id>.img   (Volume)
//	<pool dir>/layers/<object_id>.img    (WritableLayer)
//
// Files are built with the e2fsprogs tools (mkfs.ext4, e2fsck, resize2fs)
// on the image file itself: nothing is mounted and no privilege is needed.
//
// Crash safety: a new file is built under a temporary name in the same
// directory (".<object_id>.img.tmp") and renamed into place, so the real
// name only ever holds a complete filesystem. Growing writes a marker
// (".<object_id>.img.growing") before it enlarges the file and removes it
// after resize2fs finished; an Ensure that finds the marker finishes the
// interrupted grow first. Names starting with a dot are never object IDs.
package blockfile

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/kibotos/kibotos/internal/node/fsutil"
)

// Kind is what a block file holds.
type Kind int

const (
	Volume Kind = iota + 1
	WritableLayer
)

// MinCapacity is the smallest block file Ensure makes.
const MinCapacity = 1 << 20

// Errors Ensure and Remove wrap, so callers can map them to result codes.
var (
	// ErrInvalid: a malformed reference or capacity.
	ErrInvalid = errors.New("invalid block file request")
	// ErrShrink: the file is larger than the capacity asked for.
	ErrShrink = errors.New("block file is larger than the requested capacity; block files never shrink")
	// ErrPoolUnavailable: the pool directory is missing or not a directory
	// (an unmounted pool, say); it is never created here.
	ErrPoolUnavailable = errors.New("storage pool directory is not available")
)

// Ref names one block file.
type Ref struct {
	PoolDir  string
	Kind     Kind
	ObjectID string
}

// ValidObjectID reports whether id can name a block file: only
// [A-Za-z0-9._-], not empty, no leading dot, at most 200 bytes.
func ValidObjectID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty object_id", ErrInvalid)
	}
	if len(id) > 200 {
		return fmt.Errorf("%w: object_id longer than 200 bytes", ErrInvalid)
	}
	if id[0] == '.' {
		return fmt.Errorf("%w: object_id %q starts with a dot", ErrInvalid, id)
	}
	for _, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: object_id %q has a character outside [A-Za-z0-9._-]", ErrInvalid, id)
		}
	}
	return nil
}

// Path is the file the reference names.
func (r Ref) Path() (string, error) {
	if err := ValidObjectID(r.ObjectID); err != nil {
		return "", err
	}
	if r.PoolDir == "" {
		return "", fmt.Errorf("%w: no pool directory", ErrInvalid)
	}
	var sub string
	switch r.Kind {
	case Volume:
		sub = "volumes"
	case WritableLayer:
		sub = "layers"
	default:
		return "", fmt.Errorf("%w: unknown block file kind %d", ErrInvalid, r.Kind)
	}
	return filepath.Join(r.PoolDir, sub, r.ObjectID+".img"), nil
}

// Status is a block file as found on disk.
type Status struct {
	Exists bool
	// CapacityBytes is the file's size.
	CapacityBytes uint64
	// AllocatedBytes is the disk the file uses (st_blocks × 512).
	AllocatedBytes uint64
}

// Stat reads the status of the file at path.
func Stat(path string) (Status, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Status{}, nil
	}
	if err != nil {
		return Status{}, err
	}
	if !fi.Mode().IsRegular() {
		return Status{}, fmt.Errorf("%s is not a regular file", path)
	}
	st := Status{Exists: true, CapacityBytes: uint64(fi.Size())}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.AllocatedBytes = uint64(sys.Blocks) * 512
	}
	return st, nil
}

// Tools are the e2fsprogs programs the Manager runs.
type Tools struct {
	Mkfs, E2fsck, Resize2fs string
}

// FindTools looks the programs up in PATH, then in /usr/sbin and /sbin
// (which are not in an unprivileged user's PATH on Debian).
func FindTools() (Tools, error) {
	find := func(name string) (string, error) {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
		for _, dir := range []string{"/usr/sbin", "/sbin"} {
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
				return p, nil
			}
		}
		return "", fmt.Errorf("%s not found (install e2fsprogs)", name)
	}
	var t Tools
	var errs []error
	var err error
	if t.Mkfs, err = find("mkfs.ext4"); err != nil {
		errs = append(errs, err)
	}
	if t.E2fsck, err = find("e2fsck"); err != nil {
		errs = append(errs, err)
	}
	if t.Resize2fs, err = find("resize2fs"); err != nil {
		errs = append(errs, err)
	}
	return t, errors.Join(errs...)
}

// Manager applies block file operations. Operations on the same file are
// serialized; others run concurrently.
type Manager struct {
	tools Tools

	mu    sync.Mutex
	locks map[string]*pathLock
}

type pathLock struct {
	sync.Mutex
	refs int
}

// New returns a Manager using the e2fsprogs tools FindTools finds.
func New() (*Manager, error) {
	t, err := FindTools()
	if err != nil {
		return nil, err
	}
	return NewWithTools(t), nil
}

// NewWithTools returns a Manager using the given programs.
func NewWithTools(t Tools) *Manager {
	return &Manager{tools: t, locks: map[string]*pathLock{}}
}

func (m *Manager) lock(path string) func() {
	m.mu.Lock()
	l := m.locks[path]
	if l == nil {
		l = &pathLock{}
		m.locks[path] = l
	}
	l.refs++
	m.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		m.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(m.locks, path)
		}
		m.mu.Unlock()
	}
}

func checkPool(poolDir string) error {
	fi, err := os.Stat(poolDir)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPoolUnavailable, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrPoolUnavailable, poolDir)
	}
	return nil
}

func tempName(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
}

func growMarker(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".growing")
}

func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// Ensure makes the block file exist with capacity bytes: created (sparse,
// with a fresh ext4 filesystem) when missing, grown (file and filesystem)
// when smaller, left alone when it has that size. A file larger than
// capacity is ErrShrink, answered with the file's status. The pool
// directory itself is never created.
func (m *Manager) Ensure(ctx context.Context, ref Ref, capacity uint64) (Status, error) {
	path, err := ref.Path()
	if err != nil {
		return Status{}, err
	}
	if capacity < MinCapacity {
		return Status{}, fmt.Errorf("%w: capacity %d bytes is below the minimum of %d", ErrInvalid, capacity, MinCapacity)
	}
	if capacity > math.MaxInt64 {
		return Status{}, fmt.Errorf("%w: capacity %d bytes is too large", ErrInvalid, capacity)
	}
	if err := checkPool(ref.PoolDir); err != nil {
		return Status{}, err
	}
	unlock := m.lock(path)
	defer unlock()

	if err := os.Mkdir(filepath.Dir(path), 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return Status{}, err
	}
	st, err := Stat(path)
	if err != nil {
		return Status{}, err
	}
	if !st.Exists {
		if err := m.create(ctx, path, int64(capacity)); err != nil {
			return Status{}, err
		}
		return Stat(path)
	}
	pending, err := exists(growMarker(path))
	if err != nil {
		return Status{}, err
	}
	if pending {
		// An earlier grow was interrupted: finish it for the file's size.
		if err := m.finishGrow(ctx, path); err != nil {
			return Status{}, err
		}
	}
	if _, err := FilesystemBytes(path); err != nil {
		return Status{}, err
	}
	switch {
	case capacity < st.CapacityBytes:
		return st, fmt.Errorf("%w: %s holds %d bytes, asked for %d", ErrShrink, filepath.Base(path), st.CapacityBytes, capacity)
	case capacity > st.CapacityBytes:
		if err := m.grow(ctx, path, int64(capacity)); err != nil {
			return Status{}, err
		}
	}
	return Stat(path)
}

func (m *Manager) create(ctx context.Context, path string, capacity int64) (err error) {
	dir := filepath.Dir(path)
	// A marker without its file is left from a file removed by hand.
	if err := os.Remove(growMarker(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	tmp := tempName(path)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(capacity); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// -b 4096: without it mke2fs picks 1 KiB blocks below 512 MiB, which
	// suits neither a VM disk nor a filesystem that will be grown a lot.
	if err := run(ctx, m.tools.Mkfs, "-q", "-F", "-b", "4096",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", tmp); err != nil {
		return err
	}
	if err := fsutil.SyncFile(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return fsutil.SyncDir(dir)
}

func (m *Manager) grow(ctx context.Context, path string, capacity int64) error {
	dir := filepath.Dir(path)
	if err := fsutil.WriteFileAtomic(dir, filepath.Base(growMarker(path)), nil, 0o600); err != nil {
		return err
	}
	if err := os.Truncate(path, capacity); err != nil {
		return err
	}
	if err := fsutil.SyncFile(path); err != nil {
		return err
	}
	return m.finishGrow(ctx, path)
}

// finishGrow resizes the filesystem to the file's size and clears the
// grow marker.
func (m *Manager) finishGrow(ctx context.Context, path string) error {
	err := run(ctx, m.tools.E2fsck, "-f", "-y", path)
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 1 {
		err = nil // errors were corrected
	}
	if err != nil {
		return err
	}
	if err := run(ctx, m.tools.Resize2fs, path); err != nil {
		return err
	}
	if err := fsutil.SyncFile(path); err != nil {
		return err
	}
	if err := os.Remove(growMarker(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(path))
}

// Remove deletes the block file; a missing file is success. It refuses
// (ErrPoolUnavailable) when the pool directory itself is missing, so an
// unmounted pool is not mistaken for a removed file.
func (m *Manager) Remove(ref Ref) (Status, error) {
	path, err := ref.Path()
	if err != nil {
		return Status{}, err
	}
	if err := checkPool(ref.PoolDir); err != nil {
		return Status{}, err
	}
	unlock := m.lock(path)
	defer unlock()

	removed := false
	for _, p := range []string{path, tempName(path), growMarker(path)} {
		err := os.Remove(p)
		if err == nil {
			removed = true
		} else if !errors.Is(err, fs.ErrNotExist) {
			return Status{}, err
		}
	}
	if removed {
		if err := fsutil.SyncDir(filepath.Dir(path)); err != nil {
			return Status{}, err
		}
	}
	return Stat(path)
}

// FilesystemBytes reads the size of the ext2/3/4 filesystem in the image
// at path from its superblock (block count × block size).
func FilesystemBytes(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return 0, fmt.Errorf("read superblock of %s: %w", path, err)
	}
	le := binary.LittleEndian
	if le.Uint16(sb[0x38:]) != 0xEF53 {
		return 0, fmt.Errorf("%s holds no ext2/3/4 filesystem", path)
	}
	blocks := uint64(le.Uint32(sb[0x4:]))
	if le.Uint32(sb[0x60:])&0x80 != 0 { // INCOMPAT_64BIT
		blocks |= uint64(le.Uint32(sb[0x150:])) << 32
	}
	logSize := le.Uint32(sb[0x18:])
	if logSize > 6 {
		return 0, fmt.Errorf("%s: bad block size in superblock", path)
	}
	return blocks * (1024 << logSize), nil
}

func run(ctx context.Context, prog string, args ...string) error {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &ToolError{Cmd: filepath.Base(prog) + " " + strings.Join(args, " "), Output: strings.TrimSpace(out.String()), Err: err}
	}
	return nil
}

// ToolError is a failed e2fsprogs run.
type ToolError struct {
	Cmd    string
	Output string
	Err    error
}

func (e *ToolError) Error() string {
	if e.Output == "" {
		return fmt.Sprintf("%s: %v", e.Cmd, e.Err)
	}
	return fmt.Sprintf("%s: %v: %s", e.Cmd, e.Err, e.Output)
}

func (e *ToolError) Unwrap() error { return e.Err }

// Read opens the block file read-only and hands it to fn, holding the
// file's lock meanwhile so that no operation of this Manager changes it
// under fn (an export reads it whole, twice). A missing file is
// ErrMissing.
func (m *Manager) Read(ref Ref, fn func(f *os.File) error) error {
	path, err := ref.Path()
	if err != nil {
		return err
	}
	if err := checkPool(ref.PoolDir); err != nil {
		return err
	}
	defer m.lock(path)()
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrMissing, path)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return fn(f)
}

// Import makes the block file from content fill writes into a fresh
// temporary file (fill truncates it to its size and writes its blocks), and
// renames it into place only once fill returned nil, so the file's name
// only ever holds a complete import. Idempotent: a block file already in
// place is the answer, untouched. The result must hold an ext4 filesystem,
// as every block file does; one that does not is removed and refused
// (ErrInvalid).
func (m *Manager) Import(ctx context.Context, ref Ref, fill func(f *os.File) error) (_ Status, err error) {
	path, err := ref.Path()
	if err != nil {
		return Status{}, err
	}
	if err := checkPool(ref.PoolDir); err != nil {
		return Status{}, err
	}
	defer m.lock(path)()
	if st, err := Stat(path); err != nil || st.Exists {
		return st, err
	}
	if err := os.Mkdir(filepath.Dir(path), 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return Status{}, err
	}
	tmp := tempName(path)
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Status{}, err
	}
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Status{}, err
	}
	err = fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Status{}, err
	}
	if _, err := FilesystemBytes(tmp); err != nil {
		return Status{}, fmt.Errorf("%w: the imported content is not an ext4 filesystem: %v", ErrInvalid, err)
	}
	if err := fsutil.SyncFile(tmp); err != nil {
		return Status{}, err
	}
	// A grow marker of an earlier file by that name belongs to no file now.
	if err := os.Remove(growMarker(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Status{}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return Status{}, err
	}
	if err := fsutil.SyncDir(filepath.Dir(path)); err != nil {
		return Status{}, err
	}
	return Stat(path)
}
