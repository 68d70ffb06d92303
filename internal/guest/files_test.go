package guest_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/guest"
)

// fileAgent serves an agent whose root is a temporary directory with an
// /etc/passwd naming root and nobody.
func fileAgent(t *testing.T) (guestv1connect.GuestAgentServiceClient, string) {
	t.Helper()
	root := t.TempDir()
	// Other users (TestFilesAsAnotherUser) must reach the root.
	for _, dir := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return serve(t, &guest.Agent{Root: root}), root
}

func writeFile(c guestv1connect.GuestAgentServiceClient, h *ctrlv1.WriteFileHeader, chunks ...[]byte) (*ctrlv1.WriteFileResponse, error) {
	stream := c.WriteFile(context.Background())
	msgs := []*ctrlv1.WriteFileRequest{{Frame: &ctrlv1.WriteFileRequest_Header{Header: h}}}
	for _, b := range chunks {
		msgs = append(msgs, &ctrlv1.WriteFileRequest{Frame: &ctrlv1.WriteFileRequest_Data{Data: b}})
	}
	for _, m := range msgs {
		if err := stream.Send(&guestv1.WriteFileRequest{Request: m}); err != nil {
			break
		}
	}
	res, err := stream.CloseAndReceive()
	if err != nil {
		return nil, err
	}
	return res.Msg.GetResponse(), nil
}

func readFile(c guestv1connect.GuestAgentServiceClient, r *ctrlv1.ReadFileRequest) (*ctrlv1.FileInfo, []byte, error) {
	stream, err := c.ReadFile(context.Background(), connect.NewRequest(&guestv1.ReadFileRequest{Request: r}))
	if err != nil {
		return nil, nil, err
	}
	defer stream.Close()
	var info *ctrlv1.FileInfo
	var data []byte
	for stream.Receive() {
		m := stream.Msg().GetResponse()
		if m.GetInfo() != nil {
			info = m.GetInfo()
		}
		if len(m.GetData()) > 0 && m.GetOffset() != r.GetOffset()+uint64(len(data)) {
			return nil, nil, os.ErrInvalid
		}
		data = append(data, m.GetData()...)
	}
	return info, data, stream.Err()
}

// wantErr checks an error's code and the field its ErrorDetail names.
func wantErr(t *testing.T, what string, err error, code connect.Code, field string) {
	t.Helper()
	if connect.CodeOf(err) != code || (field != "" && apierr.FieldOf(err) != field) {
		t.Errorf("%s: %v (field %q), want %v naming %q", what, err, apierr.FieldOf(err), code, field)
	}
}

func TestWriteReadStatLargeFile(t *testing.T) {
	c, root := fileAgent(t)
	big := make([]byte, 3<<20+123)
	_, _ = rand.Read(big)
	size := uint64(len(big))
	res, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/home/u/big.bin", CreateParents: true, Mode: 0o600, SizeBytes: &size},
		big[:1<<20], big[1<<20:2<<20], big[2<<20:3<<20], big[3<<20:])
	if err != nil {
		t.Fatal(err)
	}
	if res.GetWrittenBytes() != size || res.GetInfo().GetSizeBytes() != size || res.GetInfo().GetMode() != 0o600 ||
		res.GetInfo().GetType() != ctrlv1.FileType_FILE_TYPE_REGULAR || res.GetInfo().GetOwner() != "root" || res.GetInfo().GetName() != "big.bin" {
		t.Errorf("write: %v", res)
	}
	info, data, err := readFile(c, &ctrlv1.ReadFileRequest{Path: "/home/u/big.bin"})
	if err != nil || !bytes.Equal(data, big) || info.GetPath() != "/home/u/big.bin" {
		t.Fatalf("read back: %d bytes, %v, info %v", len(data), err, info)
	}
	_, part, err := readFile(c, &ctrlv1.ReadFileRequest{Path: "/home/u/big.bin", Offset: 1000, Length: 5})
	if err != nil || !bytes.Equal(part, big[1000:1005]) {
		t.Errorf("offset and length: %v %v", part, err)
	}
	if _, past, err := readFile(c, &ctrlv1.ReadFileRequest{Path: "/home/u/big.bin", Offset: size + 10}); err != nil || len(past) != 0 {
		t.Errorf("past the end: %d bytes, %v", len(past), err)
	}
	// No temporary file is left beside it.
	if ents, _ := os.ReadDir(filepath.Join(root, "home/u")); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want 1", len(ents))
	}
	st, err := c.StatFile(context.Background(), connect.NewRequest(&guestv1.StatFileRequest{Request: &ctrlv1.StatFileRequest{Path: "/home/u"}}))
	if err != nil || st.Msg.GetResponse().GetInfo().GetType() != ctrlv1.FileType_FILE_TYPE_DIRECTORY {
		t.Errorf("stat /home/u: %v %v", st, err)
	}
}

func TestWriteFileRules(t *testing.T) {
	c, _ := fileAgent(t)
	if _, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/f"}, []byte("old")); err != nil {
		t.Fatal(err)
	}
	wrong := uint64(10)
	_, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/f", SizeBytes: &wrong}, []byte("new"))
	wantErr(t, "a size that does not match", err, connect.CodeInvalidArgument, "header.size_bytes")
	_, err = writeFile(c, &ctrlv1.WriteFileHeader{Path: "/f", Exclusive: true}, []byte("new"))
	wantErr(t, "exclusive over an existing file", err, connect.CodeAlreadyExists, "header.path")
	_, err = writeFile(c, &ctrlv1.WriteFileHeader{Path: "/f", Exclusive: true, Append: true})
	wantErr(t, "exclusive with append", err, connect.CodeInvalidArgument, "header.exclusive")
	if _, data, _ := readFile(c, &ctrlv1.ReadFileRequest{Path: "/f"}); string(data) != "old" {
		t.Errorf("failed writes changed the file: %q", data)
	}
	if _, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/f", Append: true}, []byte("+more")); err != nil {
		t.Fatal(err)
	}
	if _, data, _ := readFile(c, &ctrlv1.ReadFileRequest{Path: "/f"}); string(data) != "old+more" {
		t.Errorf("after append: %q", data)
	}
	_, err = writeFile(c, &ctrlv1.WriteFileHeader{Path: "/no/such/dir/f"}, []byte("x"))
	wantErr(t, "a missing parent", err, connect.CodeNotFound, "header.path")
	_, err = writeFile(c, &ctrlv1.WriteFileHeader{Path: "/etc"}, []byte("x"))
	wantErr(t, "a directory", err, connect.CodeFailedPrecondition, "header.path")
	// A first message without a header.
	stream := c.WriteFile(context.Background())
	_ = stream.Send(&guestv1.WriteFileRequest{Request: &ctrlv1.WriteFileRequest{Frame: &ctrlv1.WriteFileRequest_Data{Data: []byte("x")}}})
	_, err = stream.CloseAndReceive()
	wantErr(t, "no header", err, connect.CodeInvalidArgument, "header")
}

func TestPathsOutsideTheRootAreRejected(t *testing.T) {
	c, root := fileAgent(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	// A link to a file that does not exist yet: appending through it would
	// create the file outside (found by FuzzGuestPath).
	if err := os.Symlink(filepath.Join(outside, "new"), filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"etc/passwd", "/etc/../..", "/../etc", "/etc/", "/a//b", "/./a", "", "/escape/secret"} {
		_, _, err := readFile(c, &ctrlv1.ReadFileRequest{Path: p})
		wantErr(t, "read "+p, err, connect.CodeInvalidArgument, "path")
	}
	_, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/dangling", Append: true}, []byte("x"))
	wantErr(t, "append through a dangling link", err, connect.CodeInvalidArgument, "header.path")
	if _, err := os.Lstat(filepath.Join(outside, "new")); !os.IsNotExist(err) {
		t.Errorf("a file was created outside the root: %v", err)
	}
	_, err = c.MoveFile(context.Background(), connect.NewRequest(&guestv1.MoveFileRequest{Request: &ctrlv1.MoveFileRequest{SourcePath: "/etc", DestinationPath: "x"}}))
	wantErr(t, "move to a relative path", err, connect.CodeInvalidArgument, "destination_path")
	_, err = c.DeleteFile(context.Background(), connect.NewRequest(&guestv1.DeleteFileRequest{Request: &ctrlv1.DeleteFileRequest{Path: "/", Recursive: true}}))
	wantErr(t, "delete /", err, connect.CodeInvalidArgument, "path")
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Errorf("the file outside was touched: %v", err)
	}
}

func TestDirectoriesMovesAndDeletes(t *testing.T) {
	c, _ := fileAgent(t)
	ctx := context.Background()
	mkdir := func(r *ctrlv1.MakeDirectoryRequest) (*ctrlv1.FileInfo, error) {
		res, err := c.MakeDirectory(ctx, connect.NewRequest(&guestv1.MakeDirectoryRequest{Request: r}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetResponse().GetInfo(), nil
	}
	info, err := mkdir(&ctrlv1.MakeDirectoryRequest{Path: "/w/a/b", CreateParents: true, Mode: 0o700})
	if err != nil || info.GetMode() != 0o700 || info.GetType() != ctrlv1.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("mkdir -p: %v %v", info, err)
	}
	if _, err := mkdir(&ctrlv1.MakeDirectoryRequest{Path: "/w/a/b", CreateParents: true}); err != nil {
		t.Errorf("mkdir -p of an existing directory: %v", err)
	}
	_, err = mkdir(&ctrlv1.MakeDirectoryRequest{Path: "/w/a/b"})
	wantErr(t, "mkdir of an existing directory", err, connect.CodeAlreadyExists, "path")
	_, err = mkdir(&ctrlv1.MakeDirectoryRequest{Path: "/w/x/y"})
	wantErr(t, "mkdir without its parent", err, connect.CodeNotFound, "path")
	for _, p := range []string{"/w/a/f1", "/w/a/b/f2", "/w/z"} {
		if _, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: p}, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}

	list := func(r *ctrlv1.ListDirectoryRequest) ([]string, string, error) {
		res, err := c.ListDirectory(ctx, connect.NewRequest(&guestv1.ListDirectoryRequest{Request: r}))
		if err != nil {
			return nil, "", err
		}
		var paths []string
		for _, e := range res.Msg.GetResponse().GetEntries() {
			paths = append(paths, e.GetPath())
		}
		return paths, res.Msg.GetResponse().GetNextPageToken(), nil
	}
	all, _, err := list(&ctrlv1.ListDirectoryRequest{Path: "/w", Depth: 3})
	want := []string{"/w/a", "/w/a/b", "/w/a/b/f2", "/w/a/f1", "/w/z"}
	if err != nil || len(all) != len(want) {
		t.Fatalf("list depth 3: %v %v", all, err)
	}
	for i := range want {
		if all[i] != want[i] {
			t.Errorf("list depth 3: %v, want %v", all, want)
			break
		}
	}
	// Pages of two continue where the last ended.
	var paged []string
	token := ""
	for {
		page, next, err := list(&ctrlv1.ListDirectoryRequest{Path: "/w", Depth: 3, PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, page...)
		if next == "" {
			break
		}
		token = next
		if _, _, err := list(&ctrlv1.ListDirectoryRequest{Path: "/w", Depth: 2, PageSize: 2, PageToken: token}); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("a token with another depth: %v", err)
		}
	}
	if len(paged) != len(want) {
		t.Errorf("paged: %v", paged)
	}
	top, _, _ := list(&ctrlv1.ListDirectoryRequest{Path: "/w"})
	if len(top) != 2 {
		t.Errorf("depth 1: %v", top)
	}
	_, _, err = list(&ctrlv1.ListDirectoryRequest{Path: "/w/z"})
	wantErr(t, "list a file", err, connect.CodeFailedPrecondition, "path")

	move := func(r *ctrlv1.MoveFileRequest) (*ctrlv1.FileInfo, error) {
		res, err := c.MoveFile(ctx, connect.NewRequest(&guestv1.MoveFileRequest{Request: r}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetResponse().GetInfo(), nil
	}
	_, err = move(&ctrlv1.MoveFileRequest{SourcePath: "/w/a", DestinationPath: "/w/a/b/in"})
	wantErr(t, "move into itself", err, connect.CodeInvalidArgument, "destination_path")
	_, err = move(&ctrlv1.MoveFileRequest{SourcePath: "/w/a/f1", DestinationPath: "/w/z"})
	wantErr(t, "move over a file without overwrite", err, connect.CodeAlreadyExists, "destination_path")
	if info, err := move(&ctrlv1.MoveFileRequest{SourcePath: "/w/a/f1", DestinationPath: "/w/z", Overwrite: true}); err != nil || info.GetPath() != "/w/z" {
		t.Errorf("move with overwrite: %v %v", info, err)
	}
	if _, data, _ := readFile(c, &ctrlv1.ReadFileRequest{Path: "/w/z"}); string(data) != "/w/a/f1" {
		t.Errorf("moved content: %q", data)
	}
	if _, err := move(&ctrlv1.MoveFileRequest{SourcePath: "/w/a", DestinationPath: "/v/moved", CreateParents: true}); err != nil {
		t.Errorf("move a directory to new parents: %v", err)
	}
	_, err = move(&ctrlv1.MoveFileRequest{SourcePath: "/w/gone", DestinationPath: "/w/x"})
	wantErr(t, "move a missing path", err, connect.CodeNotFound, "source_path")

	del := func(r *ctrlv1.DeleteFileRequest) (bool, error) {
		res, err := c.DeleteFile(ctx, connect.NewRequest(&guestv1.DeleteFileRequest{Request: r}))
		if err != nil {
			return false, err
		}
		return res.Msg.GetResponse().GetDeleted(), nil
	}
	_, err = del(&ctrlv1.DeleteFileRequest{Path: "/v/moved"})
	wantErr(t, "delete a non-empty directory", err, connect.CodeFailedPrecondition, "path")
	if ok, err := del(&ctrlv1.DeleteFileRequest{Path: "/v/moved", Recursive: true}); !ok || err != nil {
		t.Errorf("recursive delete: %v %v", ok, err)
	}
	_, err = del(&ctrlv1.DeleteFileRequest{Path: "/v/moved"})
	wantErr(t, "delete a missing path", err, connect.CodeNotFound, "path")
	if ok, err := del(&ctrlv1.DeleteFileRequest{Path: "/v/moved", AllowMissing: true}); ok || err != nil {
		t.Errorf("allow_missing: %v %v", ok, err)
	}
	_, _, err = readFile(c, &ctrlv1.ReadFileRequest{Path: "/w"})
	wantErr(t, "read a directory", err, connect.CodeFailedPrecondition, "path")
}

func TestFilesAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("taking another user's identity needs root")
	}
	c, _ := fileAgent(t)
	if _, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/private", Mode: 0o600}, []byte("root only")); err != nil {
		t.Fatal(err)
	}
	_, _, err := readFile(c, &ctrlv1.ReadFileRequest{Path: "/private", User: "nobody"})
	wantErr(t, "nobody reads root's 0600 file", err, connect.CodePermissionDenied, "path")
	if _, err := c.MakeDirectory(context.Background(), connect.NewRequest(&guestv1.MakeDirectoryRequest{Request: &ctrlv1.MakeDirectoryRequest{Path: "/pub", Mode: 0o777}})); err != nil {
		t.Fatal(err)
	}
	res, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/pub/mine", User: "65534"}, []byte("x"))
	if err != nil || res.GetInfo().GetUid() != 65534 || res.GetInfo().GetOwner() != "nobody" || res.GetInfo().GetGroup() != "nogroup" {
		t.Errorf("a file nobody writes: %v %v", res, err)
	}
	_, _, err = readFile(c, &ctrlv1.ReadFileRequest{Path: "/private", User: "ghost"})
	wantErr(t, "an unknown user", err, connect.CodeFailedPrecondition, "user")
}
