package guest_test

// FileService sentences of docs/spec-coverage/dataplane.md that the
// older file tests left unasserted, on a real agent over real files.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/internal/testenv"
)

func statPath(c guestv1connect.GuestAgentServiceClient, r *ctrlv1.StatFileRequest) (*ctrlv1.FileInfo, error) {
	res, err := c.StatFile(context.Background(), connect.NewRequest(&guestv1.StatFileRequest{Request: r}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetResponse().GetInfo(), nil
}

func listDir(c guestv1connect.GuestAgentServiceClient, r *ctrlv1.ListDirectoryRequest) (*ctrlv1.ListDirectoryResponse, error) {
	res, err := c.ListDirectory(context.Background(), connect.NewRequest(&guestv1.ListDirectoryRequest{Request: r}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetResponse(), nil
}

// writeMode makes a file with exactly mode (not the umask's).
func writeMode(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	mustWrite(t, path, data)
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// wantContent checks a file's bytes under root.
func wantContent(t *testing.T, root, p, want string) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
		t.Errorf("%s holds %q (%v), want %q", p, b, err, want)
	}
}

// noTemporaryFiles checks that no write left its temporary file in dir.
func noTemporaryFiles(t *testing.T, dir string) {
	t.Helper()
	if left, _ := filepath.Glob(filepath.Join(dir, ".kibotos-write-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// Paths: "is at most 4096 bytes. Anything else ... is invalid_argument".
func TestAPathOfMoreThan4096BytesIsInvalid(t *testing.T) {
	c, _ := fileAgent(t)
	long := "/" + strings.Repeat("a", 4096)
	_, err := statPath(c, &ctrlv1.StatFileRequest{Path: long})
	wantErr(t, "stat of a 4097-byte path", err, connect.CodeInvalidArgument, "path")
	if err != nil && !strings.Contains(err.Error(), "4096") {
		t.Errorf("the refusal does not say the limit: %v", err)
	}
	_, err = writeFile(c, &ctrlv1.WriteFileHeader{Path: long}, []byte("x"))
	wantErr(t, "write to a 4097-byte path", err, connect.CodeInvalidArgument, "header.path")
}

// Paths: "Symbolic links are followed inside the guest": a link to a
// directory inside the root leads every call to its target, and names
// stay as the caller gave them.
func TestLinksInsideTheRootAreFollowed(t *testing.T) {
	c, root := fileAgent(t)
	writeMode(t, filepath.Join(root, "real/f"), "through the link", 0o644)
	if err := os.Symlink("real", filepath.Join(root, "dirlink")); err != nil {
		t.Fatal(err)
	}
	if _, data, err := readFile(c, &ctrlv1.ReadFileRequest{Path: "/dirlink/f"}); err != nil || string(data) != "through the link" {
		t.Errorf("read /dirlink/f: %q %v", data, err)
	}
	if info, err := statPath(c, &ctrlv1.StatFileRequest{Path: "/dirlink/f"}); err != nil || info.GetPath() != "/dirlink/f" || info.GetType() != ctrlv1.FileType_FILE_TYPE_REGULAR {
		t.Errorf("stat /dirlink/f: %v %v", info, err)
	}
	res, err := listDir(c, &ctrlv1.ListDirectoryRequest{Path: "/dirlink"})
	if err != nil || len(res.GetEntries()) != 1 || res.GetEntries()[0].GetPath() != "/dirlink/f" {
		t.Errorf("list /dirlink: %v %v", res, err)
	}
	if _, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/dirlink/g"}, []byte("new")); err != nil {
		t.Fatal(err)
	}
	wantContent(t, root, "real/g", "new")
}

// Errors: "a read-only filesystem is failed_precondition", for every call
// that changes files.
func TestAReadOnlyFileSystemIsFailedPrecondition(t *testing.T) {
	c, root := fileAgent(t)
	ro := filepath.Join(root, "ro")
	mountTmpfs(t, ro, "1m")
	writeMode(t, filepath.Join(root, "ro/f"), "old", 0o644)
	if err := unix.Mount("", ro, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/ro/f"}, []byte("new"))
	wantErr(t, "a write over a file", err, connect.CodeFailedPrecondition, "header.path")
	_, err = writeFile(c, &ctrlv1.WriteFileHeader{Path: "/ro/g"}, []byte("new"))
	wantErr(t, "a write of a new file", err, connect.CodeFailedPrecondition, "header.path")
	_, err = writeFile(c, &ctrlv1.WriteFileHeader{Path: "/ro/f", Append: true}, []byte("more"))
	wantErr(t, "an append", err, connect.CodeFailedPrecondition, "header.path")
	_, err = c.MakeDirectory(ctx, connect.NewRequest(&guestv1.MakeDirectoryRequest{Request: &ctrlv1.MakeDirectoryRequest{Path: "/ro/d"}}))
	wantErr(t, "a mkdir", err, connect.CodeFailedPrecondition, "path")
	_, err = c.MoveFile(ctx, connect.NewRequest(&guestv1.MoveFileRequest{Request: &ctrlv1.MoveFileRequest{SourcePath: "/ro/f", DestinationPath: "/ro/h"}}))
	wantErr(t, "a move", err, connect.CodeFailedPrecondition, "destination_path")
	_, err = c.DeleteFile(ctx, connect.NewRequest(&guestv1.DeleteFileRequest{Request: &ctrlv1.DeleteFileRequest{Path: "/ro/f"}}))
	wantErr(t, "a delete", err, connect.CodeFailedPrecondition, "path")
	wantContent(t, root, "ro/f", "old")
}

// WriteFile: "a failed or cancelled write leaves the old file as it was":
// a write whose stream is cut (its caller cancelled) after its temporary
// file was made leaves the file and no temporary file.
func TestACancelledWriteLeavesTheOldFile(t *testing.T) {
	c, root := fileAgent(t)
	writeMode(t, filepath.Join(root, "f"), "old", 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := c.WriteFile(ctx)
	for _, m := range []*ctrlv1.WriteFileRequest{
		{Frame: &ctrlv1.WriteFileRequest_Header{Header: &ctrlv1.WriteFileHeader{Path: "/f"}}},
		{Frame: &ctrlv1.WriteFileRequest_Data{Data: []byte("partial")}},
	} {
		if err := stream.Send(&guestv1.WriteFileRequest{Request: m}); err != nil {
			t.Fatal(err)
		}
	}
	temporary := func() []string { left, _ := filepath.Glob(filepath.Join(root, ".kibotos-write-*")); return left }
	testenv.WaitFor(t, "the write's temporary file", func() bool { return len(temporary()) == 1 })
	// Cancelled before the stream is closed: closing it first would end
	// it as complete (see commit in files.go).
	cancel()
	testenv.WaitFor(t, "the temporary file removed", func() bool { return len(temporary()) == 0 })
	if _, err := stream.CloseAndReceive(); connect.CodeOf(err) != connect.CodeCanceled {
		t.Errorf("the cancelled write: %v, want canceled", err)
	}
	wantContent(t, root, "f", "old")
}

// WriteFile: "a header after the first, is invalid_argument", and the
// file is left as it was.
func TestAHeaderAfterTheFirstMessageIsInvalid(t *testing.T) {
	c, root := fileAgent(t)
	writeMode(t, filepath.Join(root, "f"), "old", 0o644)
	stream := c.WriteFile(context.Background())
	header := &ctrlv1.WriteFileRequest{Frame: &ctrlv1.WriteFileRequest_Header{Header: &ctrlv1.WriteFileHeader{Path: "/f"}}}
	for _, m := range []*ctrlv1.WriteFileRequest{header, {Frame: &ctrlv1.WriteFileRequest_Data{Data: []byte("new")}}, header} {
		if err := stream.Send(&guestv1.WriteFileRequest{Request: m}); err != nil {
			break // the agent answered early
		}
	}
	_, err := stream.CloseAndReceive()
	wantErr(t, "a second header", err, connect.CodeInvalidArgument, "header")
	wantContent(t, root, "f", "old")
	noTemporaryFiles(t, root)
}

// WriteFileHeader: "mode ... zero selects 0o644. An existing file keeps
// its mode." "create_parents creates missing parent directories (mode
// 0o755) first." "append appends to the file, creating it if missing."
// Under a umask of 077, so that a mode narrowed by it shows.
func TestWriteFileModes(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	c, root := fileAgent(t)
	mode := func(p string) os.FileMode {
		t.Helper()
		fi, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	if _, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/p/q/zero", CreateParents: true}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{"p/q/zero": 0o644, "p": 0o755, "p/q": 0o755} {
		if got := mode(p); got != want {
			t.Errorf("/%s: mode %v, want %v", p, got, want)
		}
	}
	writeMode(t, filepath.Join(root, "kept"), "old", 0o640)
	if _, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/kept", Mode: 0o600}, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if got := mode("kept"); got != 0o640 {
		t.Errorf("an existing 0640 file written with mode 0600: %v, want 0640 kept", got)
	}
	wantContent(t, root, "kept", "new")
	for p, want := range map[string]os.FileMode{"/appended-zero": 0o644, "/appended-0600": 0o600} {
		h := &ctrlv1.WriteFileHeader{Path: p, Append: true}
		if want != 0o644 {
			h.Mode = uint32(want)
		}
		res, err := writeFile(c, h, []byte("first"))
		if err != nil {
			t.Fatalf("append to a missing %s: %v", p, err)
		}
		if res.GetWrittenBytes() != 5 || mode(p) != want {
			t.Errorf("append to a missing %s: %v, mode %v, want it made with mode %v", p, res, mode(p), want)
		}
		wantContent(t, root, p, "first")
	}
	if _, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/kept", Append: true, Mode: 0o600}, []byte("+more")); err != nil {
		t.Fatal(err)
	}
	if got := mode("kept"); got != 0o640 {
		t.Errorf("an existing 0640 file appended to with mode 0600: %v, want 0640 kept", got)
	}
	wantContent(t, root, "kept", "new+more")
}

// WriteFileHeader.size_bytes: "any other total is invalid_argument and,
// without append, writes nothing": a stream carrying more than it said.
func TestAStreamLongerThanItsSizeWritesNothing(t *testing.T) {
	c, root := fileAgent(t)
	writeMode(t, filepath.Join(root, "f"), "old", 0o644)
	three := uint64(3)
	_, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/f", SizeBytes: &three}, []byte("abc"), []byte("d"))
	wantErr(t, "four bytes after a size of three", err, connect.CodeInvalidArgument, "header.size_bytes")
	wantContent(t, root, "f", "old")
	_, err = writeFile(c, &ctrlv1.WriteFileHeader{Path: "/new", SizeBytes: &three}, []byte("abcd"))
	wantErr(t, "a new file of four bytes after a size of three", err, connect.CodeInvalidArgument, "header.size_bytes")
	if _, err := os.Lstat(filepath.Join(root, "new")); !os.IsNotExist(err) {
		t.Errorf("/new after the refused write: %v, want none", err)
	}
	noTemporaryFiles(t, root)
}

// FileInfo: "name is the last component of path; "/" for the root", mode
// "including setuid, setgid and sticky", uid and gid, owner and group,
// modified_at, SYMLINK with its symlink_target "as stored", OTHER for a
// FIFO; StatFile's follow_symlinks "reports the target of a final
// symbolic link instead of the link itself".
func TestFileInfoDescribesEachKindOfPath(t *testing.T) {
	c, root := fileAgent(t)
	info := func(p string, follow bool) *ctrlv1.FileInfo {
		t.Helper()
		i, err := statPath(c, &ctrlv1.StatFileRequest{Path: p, FollowSymlinks: follow})
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		return i
	}
	if i := info("/", false); i.GetName() != "/" || i.GetPath() != "/" || i.GetType() != ctrlv1.FileType_FILE_TYPE_DIRECTORY {
		t.Errorf("/: %v, want name \"/\", a directory", i)
	}
	writeMode(t, filepath.Join(root, "dir/target"), "12345", 0o644)
	special := filepath.Join(root, "dir/target")
	if err := os.Chmod(special, 0o755|os.ModeSetuid|os.ModeSetgid|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	past := time.Date(2021, 3, 4, 5, 6, 7, 8000, time.UTC)
	if err := os.Chtimes(special, past, past); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(special, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(special, 0o755|os.ModeSetuid|os.ModeSetgid|os.ModeSticky); err != nil { // after the chown, which clears them
		t.Fatal(err)
	}
	i := info("/dir/target", false)
	if i.GetMode() != 0o7755 || i.GetUid() != 65534 || i.GetGid() != 65534 || i.GetOwner() != "nobody" || i.GetGroup() != "nogroup" ||
		!i.GetModifiedAt().AsTime().Equal(past) || i.GetSizeBytes() != 5 || i.GetName() != "target" {
		t.Errorf("/dir/target: %v, want mode 07755, nobody:nogroup (65534), modified %v, 5 bytes", i, past)
	}
	if err := os.Symlink("target", filepath.Join(root, "dir/link")); err != nil {
		t.Fatal(err)
	}
	if i := info("/dir/link", false); i.GetType() != ctrlv1.FileType_FILE_TYPE_SYMLINK || i.GetSymlinkTarget() != "target" || i.GetPath() != "/dir/link" {
		t.Errorf("/dir/link: %v, want a SYMLINK with target \"target\" as stored", i)
	}
	if i := info("/dir/link", true); i.GetType() != ctrlv1.FileType_FILE_TYPE_REGULAR || i.GetSizeBytes() != 5 || i.GetMode() != 0o7755 ||
		i.GetPath() != "/dir/link" || i.GetSymlinkTarget() != "" {
		t.Errorf("/dir/link followed: %v, want the target's metadata under the path as named", i)
	}
	if err := unix.Mkfifo(filepath.Join(root, "dir/pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	if i := info("/dir/pipe", false); i.GetType() != ctrlv1.FileType_FILE_TYPE_OTHER {
		t.Errorf("a FIFO: %v, want OTHER", i)
	}
}

// ListDirectory: "Descending (depth above one) never follows symbolic
// links": a link to a directory is listed as a link, not entered.
func TestListingDescendsNoLinks(t *testing.T) {
	c, root := fileAgent(t)
	writeMode(t, filepath.Join(root, "l/real/deep/f"), "x", 0o644)
	if err := os.Symlink("real", filepath.Join(root, "l/link")); err != nil {
		t.Fatal(err)
	}
	res, err := listDir(c, &ctrlv1.ListDirectoryRequest{Path: "/l", Depth: 5})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range res.GetEntries() {
		got = append(got, e.GetPath())
		if e.GetPath() == "/l/link" && e.GetType() != ctrlv1.FileType_FILE_TYPE_SYMLINK {
			t.Errorf("/l/link listed as %v, want SYMLINK", e.GetType())
		}
	}
	want := []string{"/l/link", "/l/real", "/l/real/deep", "/l/real/deep/f"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("list /l at depth 5: %v, want %v (nothing under the link)", got, want)
	}
}

// ListDirectoryRequest: depth "At most 16"; "page_size is at most 10000;
// zero selects 1000."
func TestListDirectoryLimits(t *testing.T) {
	c, root := fileAgent(t)
	dir := filepath.Join(root, "many")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 1001 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%04d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := listDir(c, &ctrlv1.ListDirectoryRequest{Path: "/many", Depth: 16, PageSize: 10000}); err != nil {
		t.Errorf("depth 16, page_size 10000: %v", err)
	}
	_, err := listDir(c, &ctrlv1.ListDirectoryRequest{Path: "/many", Depth: 17})
	wantErr(t, "depth 17", err, connect.CodeInvalidArgument, "depth")
	_, err = listDir(c, &ctrlv1.ListDirectoryRequest{Path: "/many", PageSize: 10001})
	wantErr(t, "page_size 10001", err, connect.CodeInvalidArgument, "page_size")
	first, err := listDir(c, &ctrlv1.ListDirectoryRequest{Path: "/many"})
	if err != nil || len(first.GetEntries()) != 1000 || first.GetNextPageToken() == "" {
		t.Fatalf("page_size zero: %d entries, token %q, %v; want 1000 and a next page", len(first.GetEntries()), first.GetNextPageToken(), err)
	}
	last, err := listDir(c, &ctrlv1.ListDirectoryRequest{Path: "/many", PageToken: first.GetNextPageToken()})
	if err != nil || len(last.GetEntries()) != 1 || last.GetEntries()[0].GetPath() != "/many/1000" || last.GetNextPageToken() != "" {
		t.Errorf("the second page: %v %v, want /many/1000 alone, the last page", last, err)
	}
}

// DeleteFile "removes a file, a symbolic link (never its target) or a
// directory": recursive or not, a link goes and its target stays.
func TestDeleteFileRemovesALinkNotItsTarget(t *testing.T) {
	c, root := fileAgent(t)
	writeMode(t, filepath.Join(root, "d/f"), "kept", 0o644)
	for link, target := range map[string]string{"filelink": "d/f", "dirlink": "d"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*ctrlv1.DeleteFileRequest{{Path: "/filelink"}, {Path: "/dirlink", Recursive: true}} {
		res, err := c.DeleteFile(context.Background(), connect.NewRequest(&guestv1.DeleteFileRequest{Request: r}))
		if err != nil || !res.Msg.GetResponse().GetDeleted() {
			t.Errorf("delete %s: %v %v", r.GetPath(), res, err)
		}
		if _, err := os.Lstat(filepath.Join(root, r.GetPath())); !os.IsNotExist(err) {
			t.Errorf("%s after its delete: %v, want it gone", r.GetPath(), err)
		}
	}
	wantContent(t, root, "d/f", "kept")
}

// ReadFileResponse: "data is at most 1 MiB."
func TestReadFileChunksAreAtMostOneMiB(t *testing.T) {
	c, root := fileAgent(t)
	writeMode(t, filepath.Join(root, "big"), strings.Repeat("x", 3<<20+5), 0o644)
	stream, err := c.ReadFile(context.Background(), connect.NewRequest(&guestv1.ReadFileRequest{Request: &ctrlv1.ReadFileRequest{Path: "/big"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	total := 0
	for stream.Receive() {
		n := len(stream.Msg().GetResponse().GetData())
		if n > 1<<20 {
			t.Errorf("a message of %d bytes, more than 1 MiB", n)
		}
		total += n
	}
	if err := stream.Err(); err != nil || total != 3<<20+5 {
		t.Errorf("read %d bytes, %v", total, err)
	}
}

// WriteFile (designed here): replacing a file needs the user's write
// permission on the file, as writing it in place would, and on its
// directory, where the temporary file that keeps readers from a partial
// file is made (and, in a sticky directory, owning the file or the
// directory). Without either it is permission_denied naming the path and,
// for the directory, saying so; nothing is written. Appending writes in
// place and needs only the file.
func TestReplacingAFileNeedsItAndItsDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the guest's tests run as root, as the guest agent does")
	}
	c, root := fileAgent(t)
	for dir, mode := range map[string]os.FileMode{"locked": 0o755, "pub": 0o777, "sticky": 0o777 | os.ModeSticky} {
		if err := os.Mkdir(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(root, dir), mode); err != nil {
			t.Fatal(err)
		}
	}
	writeMode(t, filepath.Join(root, "locked/open"), "old", 0o666)
	writeMode(t, filepath.Join(root, "pub/readonly"), "old", 0o644)
	writeMode(t, filepath.Join(root, "sticky/roots"), "old", 0o666)
	for _, tc := range []struct{ path, says string }{
		{"/locked/open", "directory /locked"},
		{"/pub/readonly", "/pub/readonly"},
		{"/sticky/roots", "directory /sticky"},
	} {
		_, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: tc.path, User: "nobody"}, []byte("new"))
		wantErr(t, "nobody replacing "+tc.path, err, connect.CodePermissionDenied, "header.path")
		if err != nil && (!strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), ".kibotos-write")) {
			t.Errorf("nobody replacing %s: %q does not say why (%q)", tc.path, err.Error(), tc.says)
		}
		wantContent(t, root, tc.path, "old")
	}
	if _, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/locked/open", User: "nobody", Append: true}, []byte("+more")); err != nil {
		t.Errorf("nobody appending to a file it may write: %v", err)
	}
	wantContent(t, root, "locked/open", "old+more")
	for _, dir := range []string{"locked", "pub", "sticky"} {
		noTemporaryFiles(t, filepath.Join(root, dir))
	}
}
