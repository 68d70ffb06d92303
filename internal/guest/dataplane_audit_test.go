package guest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/guest"
)

// MoveFileRequest.overwrite: "overwrite replaces an existing file or empty
// directory at destination_path."
func TestMoveOverwritesAnEmptyDirectory(t *testing.T) {
	c, root := fileAgent(t)
	for _, d := range []string{"src", "dst"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "src/f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := c.MoveFile(context.Background(), connect.NewRequest(&guestv1.MoveFileRequest{Request: &ctrlv1.MoveFileRequest{
		SourcePath: "/src", DestinationPath: "/dst", Overwrite: true}}))
	if err != nil {
		t.Fatalf("a directory moved over an empty directory with overwrite: %v, want success", err)
	}
	if _, err := os.Stat(filepath.Join(root, "dst/f")); err != nil {
		t.Errorf("the moved directory's file: %v", err)
	}
}

// FileService: "Symbolic links are followed inside the guest." A WriteFile
// to a link writes its target and keeps the link; one to a link whose
// target does not exist creates the target.
func TestWriteFileFollowsASymlink(t *testing.T) {
	c, root := fileAgent(t)
	if err := os.WriteFile(filepath.Join(root, "target"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("made", filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	if _, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/link"}, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if _, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/dangling"}, []byte("made through a link")); err != nil {
		t.Fatal(err)
	}
	for link, want := range map[string]string{"link": "target", "dangling": "made"} {
		if fi, err := os.Lstat(filepath.Join(root, link)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("/%s after the write: %v %v, want it still a symbolic link", link, fi.Mode(), err)
		}
		if _, err := os.Stat(filepath.Join(root, want)); err != nil {
			t.Errorf("/%s after a write through /%s: %v", want, link, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "target")); string(b) != "new" {
		t.Errorf("/target holds %q, want the bytes written through the link", b)
	}
}

// MakeDirectoryRequest.mode: "the permission bits of each directory
// created": the guest's umask (0022 for PID 1) narrows none of them.
func TestMakeDirectoryParentsGetTheMode(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	c, root := fileAgent(t)
	_, err := c.MakeDirectory(context.Background(), connect.NewRequest(&guestv1.MakeDirectoryRequest{Request: &ctrlv1.MakeDirectoryRequest{
		Path: "/p/q/r", Mode: 0o777, CreateParents: true}}))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"p", "p/q", "p/q/r"} {
		if fi, err := os.Stat(filepath.Join(root, d)); err != nil || fi.Mode().Perm() != 0o777 {
			t.Errorf("/%s: mode %v %v, want 0777", d, fi.Mode().Perm(), err)
		}
	}
}

// ListProcessesRequest.include_exited: "The guest keeps at least the 256
// most recently ended ones of the current execution": a process that
// started first and ended last is kept.
func TestTheMostRecentlyEndedProcessIsKept(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	long := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"cat"}, Stdin: true})
	for i := 0; i < 256; i++ {
		p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"true"}})
		if _, err := c.WaitProcess(context.Background(), connect.NewRequest(&guestv1.WaitProcessRequest{Request: &ctrlv1.WaitProcessRequest{ProcessId: p.GetProcessId()}})); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := input(c, long.GetProcessId(), "", nil, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitProcess(context.Background(), connect.NewRequest(&guestv1.WaitProcessRequest{Request: &ctrlv1.WaitProcessRequest{ProcessId: long.GetProcessId()}})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetProcess(context.Background(), connect.NewRequest(&guestv1.GetProcessRequest{Request: &ctrlv1.GetProcessRequest{ProcessId: long.GetProcessId()}})); err != nil {
		t.Errorf("GetProcess of the process that ended last of 257: %v, want it kept", err)
	}
}

// StartProcess: "A replay of the command returns the same process_id and
// starts nothing": replays sent at once (a client retrying a start whose
// answer it did not get) start one process.
func TestConcurrentReplaysStartOneProcess(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	marks := filepath.Join(t.TempDir(), "starts")
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Go(func() {
			_, _ = c.StartProcess(context.Background(), connect.NewRequest(&guestv1.StartProcessRequest{
				ProcessId: "proc-replayed", CommandId: "cmd-replayed", Generation: 1,
				Spec: &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", fmt.Sprintf("echo x >> %s", marks)}, Cwd: "/"},
			}))
		})
	}
	wg.Wait()
	if _, err := c.WaitProcess(context.Background(), connect.NewRequest(&guestv1.WaitProcessRequest{Request: &ctrlv1.WaitProcessRequest{ProcessId: "proc-replayed"}})); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(marks)
	if n := strings.Count(string(b), "x"); n != 1 {
		t.Errorf("8 concurrent starts under one command_id ran the process %d times, want 1", n)
	}
}

// StartProcess: a cwd the user may not enter is failed_precondition naming
// spec.cwd ("with reason FAILURE_REASON_PERMISSION_DENIED"), judged as
// the user, not as the agent's root.
func TestACwdTheUserMayNotEnter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the guest's tests run as root, as the guest agent does")
	}
	c := serve(t, &guest.Agent{Reaper: reaper})
	// Under /tmp itself: t.TempDir's own parent is not searchable by
	// others.
	parent, err := os.MkdirTemp("", "kibotos-cwd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "private")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(parent); d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
			t.Fatalf("%s is not searchable by others (%v): the test needs a path nobody may walk", d, err)
		}
	}
	_, err = c.StartProcess(context.Background(), connect.NewRequest(&guestv1.StartProcessRequest{ProcessId: "p-cwd",
		Spec: &ctrlv1.ProcessSpec{Argv: []string{"/bin/true"}, User: "nobody", Cwd: dir}}))
	wantErr(t, "a cwd nobody may not enter", err, connect.CodeFailedPrecondition, "spec.cwd")
}

// WriteFileRequest.data "is at most 1 MiB per message": a larger message
// is invalid_argument naming data, and the file is left as it was; 1 MiB
// is taken.
func TestWriteFileDataIsAtMostOneMiBAMessage(t *testing.T) {
	c, root := fileAgent(t)
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/f"}, make([]byte, 1<<20+1))
	wantErr(t, "a data message of 1 MiB and a byte", err, connect.CodeInvalidArgument, "data")
	if b, _ := os.ReadFile(filepath.Join(root, "f")); string(b) != "old" {
		t.Errorf("/f after the refused write: %q, want it as it was", b)
	}
	if _, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/f"}, make([]byte, 1<<20)); err != nil {
		t.Errorf("a data message of 1 MiB: %v", err)
	}
}

// WriteFileHeader.mode: "An existing file keeps its mode", and (designed
// here) its owner and group where the writer may give them: a root write
// over nobody's file leaves it nobody's, as writing in place would. A
// user who may not give a file away (nobody over root's, in a directory
// it may write) leaves it its own.
func TestWriteFileKeepsTheOwnerOfAFileItReplaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("files of other owners need root")
	}
	c, root := fileAgent(t)
	theirs := filepath.Join(root, "theirs")
	if err := os.WriteFile(theirs, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(theirs, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	res, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/theirs"}, []byte("new"))
	if err != nil {
		t.Fatal(err)
	}
	if i := res.GetInfo(); i.GetUid() != 65534 || i.GetGid() != 65534 || i.GetMode() != 0o640 {
		t.Errorf("nobody's file after root wrote over it: uid %d gid %d mode %#o, want 65534, 65534, 0640", i.GetUid(), i.GetGid(), i.GetMode())
	}
	if b, _ := os.ReadFile(theirs); string(b) != "new" {
		t.Errorf("the file holds %q", b)
	}

	pub := filepath.Join(root, "pub")
	if err := os.Mkdir(pub, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pub, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pub, "roots"), []byte("old"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(pub, "roots"), 0o666); err != nil { // not the umask's
		t.Fatal(err)
	}
	res, err = writeFile(c, &ctrlv1.WriteFileHeader{Path: "/pub/roots", User: "nobody"}, []byte("new"))
	if err != nil {
		t.Fatal(err)
	}
	if i := res.GetInfo(); i.GetUid() != 65534 || i.GetMode() != 0o666 {
		t.Errorf("root's file after nobody wrote over it: uid %d mode %#o, want nobody's (65534), 0666", i.GetUid(), i.GetMode())
	}
}

// A recursive DeleteFile of a directory with a file system mounted below
// it (designed here: the Volume at /home/u/data, a delete of /home/u)
// deletes nothing and is failed_precondition naming the mount: the delete
// would otherwise empty the mount and then fail on its mount point. A
// delete of the mount point itself empties it and keeps it.
func TestARecursiveDeleteDoesNotEmptyAMountBelow(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a file system needs root")
	}
	c, root := fileAgent(t)
	data := filepath.Join(root, "home/u/data")
	mountTmpfs(t, data, "1m")
	for _, f := range []string{"home/u/notes", "home/u/data/kept"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	del := func(p string) error {
		_, err := c.DeleteFile(context.Background(), connect.NewRequest(&guestv1.DeleteFileRequest{Request: &ctrlv1.DeleteFileRequest{Path: p, Recursive: true}}))
		return err
	}
	err := del("/home")
	wantErr(t, "a recursive delete over a mount", err, connect.CodeFailedPrecondition, "path")
	if err == nil || !strings.Contains(err.Error(), "/home/u/data") {
		t.Errorf("the refusal names no mount: %v", err)
	}
	for _, f := range []string{"home/u/notes", "home/u/data/kept"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("/%s after a refused delete: %v", f, err)
		}
	}
	if err := del("/home/u/data"); err != nil {
		t.Fatal(err)
	}
	if des, err := os.ReadDir(data); err != nil || len(des) != 0 {
		t.Errorf("the mount point after a delete of it: %v %v, want it kept and empty", des, err)
	}
}

// mountTmpfs mounts a tmpfs of size at dir (made first) until the test ends.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// A MoveFile across file systems (designed here, as mv(1) does) moves a
// tree with its FIFO, its modes, modification times and owners; one whose
// copy fails halfway (the destination fills up) leaves the source whole
// and no half copy (it is made beside the destination and renamed into
// place), and says resource_exhausted.
func TestAMoveAcrossFileSystemsKeepsWhatItMoves(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a file system needs root")
	}
	c, root := fileAgent(t)
	mountTmpfs(t, filepath.Join(root, "scratch"), "4m")
	mountTmpfs(t, filepath.Join(root, "small"), "64k")
	tree := filepath.Join(root, "scratch/tree")
	if err := os.MkdirAll(filepath.Join(tree, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "sub/theirs"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(tree, "sub/theirs"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(tree, "pipe"), 0o620); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(tree, "pipe"), 0o620); err != nil { // not the umask's
		t.Fatal(err)
	}
	if err := os.Symlink("sub/theirs", filepath.Join(tree, "link")); err != nil {
		t.Fatal(err)
	}
	past := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, p := range []string{"sub/theirs", "sub", "pipe"} {
		if err := os.Chtimes(filepath.Join(tree, p), past, past); err != nil {
			t.Fatal(err)
		}
	}
	move := func(src, dst string) error {
		_, err := c.MoveFile(context.Background(), connect.NewRequest(&guestv1.MoveFileRequest{Request: &ctrlv1.MoveFileRequest{SourcePath: src, DestinationPath: dst}}))
		return err
	}
	if err := move("/scratch/tree", "/moved"); err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(root, "moved")
	for _, want := range []struct {
		path string
		mode os.FileMode
		uid  uint32
	}{{"sub/theirs", 0o600, 65534}, {"sub", os.ModeDir | 0o750, 0}, {"pipe", os.ModeNamedPipe | 0o620, 0}} {
		fi, err := os.Lstat(filepath.Join(moved, want.path))
		if err != nil {
			t.Errorf("/moved/%s: %v", want.path, err)
			continue
		}
		if fi.Mode() != want.mode || fi.Sys().(*syscall.Stat_t).Uid != want.uid || !fi.ModTime().Equal(past) {
			t.Errorf("/moved/%s: mode %v uid %d mtime %v, want %v, %d, %v", want.path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, fi.ModTime(), want.mode, want.uid, past)
		}
	}
	if target, err := os.Readlink(filepath.Join(moved, "link")); err != nil || target != "sub/theirs" {
		t.Errorf("/moved/link: %q %v", target, err)
	}
	if _, err := os.Lstat(tree); !os.IsNotExist(err) {
		t.Errorf("the source after the move: %v, want it gone", err)
	}

	// With overwrite, the copy replaces an existing file; without, an
	// existing destination is already_exists and nothing moves.
	if err := os.WriteFile(filepath.Join(root, "scratch/new"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "old"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "a move onto an existing file without overwrite", move("/scratch/new", "/old"), connect.CodeAlreadyExists, "destination_path")
	if _, err := c.MoveFile(context.Background(), connect.NewRequest(&guestv1.MoveFileRequest{Request: &ctrlv1.MoveFileRequest{
		SourcePath: "/scratch/new", DestinationPath: "/old", Overwrite: true}})); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "old")); err != nil || string(b) != "new" {
		t.Errorf("the destination after a move with overwrite: %q %v, want the moved file", b, err)
	}

	big := filepath.Join(root, "scratch/big")
	if err := os.MkdirAll(big, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(big, f), make([]byte, 48<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wantErr(t, "a move that fills its destination", move("/scratch/big", "/small/big"), connect.CodeResourceExhausted, "destination_path")
	if _, err := os.Lstat(filepath.Join(root, "small/big")); !os.IsNotExist(err) {
		t.Errorf("the half copy after a failed move: %v, want none", err)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "small", ".kibotos-move-*")); len(left) != 0 {
		t.Errorf("a failed move left %v", left)
	}
	for _, f := range []string{"a", "b"} {
		if fi, err := os.Stat(filepath.Join(big, f)); err != nil || fi.Size() != 48<<10 {
			t.Errorf("the source's %s after a failed move: %v", f, err)
		}
	}
}
