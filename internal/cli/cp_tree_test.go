package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

// dirFiles is a FileService over a directory of this host, standing in
// for a guest's: what cp -r calls, and how many calls run at once. The
// first file call of each direction waits (10 s at most) for a second to
// begin, so a cp that copies one file at a time shows as one.
type dirFiles struct {
	ctrlv1connect.UnimplementedFileServiceHandler
	root          string
	running, most atomic.Int32
	second        chan struct{} // closed when a second call runs beside the first
	once          sync.Once
}

func (d *dirFiles) host(p string) string { return filepath.Join(d.root, filepath.FromSlash(p)) }

func (d *dirFiles) enter() func() {
	n := d.running.Add(1)
	for m := d.most.Load(); n > m && !d.most.CompareAndSwap(m, n); m = d.most.Load() {
	}
	if n >= 2 {
		d.once.Do(func() { close(d.second) })
	}
	select {
	case <-d.second:
	case <-time.After(10 * time.Second):
		d.once.Do(func() { close(d.second) }) // no second came: the rest need not wait
	}
	return func() { d.running.Add(-1) }
}

// again readies the wait for the next direction's first call.
func (d *dirFiles) again() {
	d.most.Store(0)
	d.second, d.once = make(chan struct{}), sync.Once{}
}

func info(p string, fi os.FileInfo) *ctrlv1.FileInfo {
	t := ctrlv1.FileType_FILE_TYPE_REGULAR
	if fi.IsDir() {
		t = ctrlv1.FileType_FILE_TYPE_DIRECTORY
	}
	return &ctrlv1.FileInfo{Path: p, Name: filepath.Base(p), Type: t, SizeBytes: uint64(fi.Size()), Mode: uint32(fi.Mode().Perm())}
}

func fsErr(err error) error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, os.ErrExist):
		return connect.NewError(connect.CodeAlreadyExists, err)
	}
	return err
}

func (d *dirFiles) StatFile(_ context.Context, req *connect.Request[ctrlv1.StatFileRequest]) (*connect.Response[ctrlv1.StatFileResponse], error) {
	fi, err := os.Stat(d.host(req.Msg.GetPath()))
	if err != nil {
		return nil, fsErr(err)
	}
	return connect.NewResponse(&ctrlv1.StatFileResponse{Info: info(req.Msg.GetPath(), fi)}), nil
}

func (d *dirFiles) MakeDirectory(_ context.Context, req *connect.Request[ctrlv1.MakeDirectoryRequest]) (*connect.Response[ctrlv1.MakeDirectoryResponse], error) {
	if err := os.Mkdir(d.host(req.Msg.GetPath()), 0o755); err != nil {
		return nil, fsErr(err)
	}
	return connect.NewResponse(&ctrlv1.MakeDirectoryResponse{}), nil
}

func (d *dirFiles) WriteFile(_ context.Context, s *connect.ClientStream[ctrlv1.WriteFileRequest]) (*connect.Response[ctrlv1.WriteFileResponse], error) {
	defer d.enter()()
	var path string
	var data bytes.Buffer
	for s.Receive() {
		if h := s.Msg().GetHeader(); h != nil {
			path = h.GetPath()
		}
		data.Write(s.Msg().GetData())
	}
	if err := os.WriteFile(d.host(path), data.Bytes(), 0o644); err != nil {
		return nil, fsErr(err)
	}
	return connect.NewResponse(&ctrlv1.WriteFileResponse{}), nil
}

func (d *dirFiles) ListDirectory(_ context.Context, req *connect.Request[ctrlv1.ListDirectoryRequest]) (*connect.Response[ctrlv1.ListDirectoryResponse], error) {
	entries, err := os.ReadDir(d.host(req.Msg.GetPath()))
	if err != nil {
		return nil, fsErr(err)
	}
	res := &ctrlv1.ListDirectoryResponse{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			return nil, err
		}
		res.Entries = append(res.Entries, info(req.Msg.GetPath()+"/"+e.Name(), fi))
	}
	return connect.NewResponse(res), nil
}

func (d *dirFiles) ReadFile(_ context.Context, req *connect.Request[ctrlv1.ReadFileRequest], s *connect.ServerStream[ctrlv1.ReadFileResponse]) error {
	defer d.enter()()
	fi, err := os.Stat(d.host(req.Msg.GetPath()))
	if err != nil {
		return fsErr(err)
	}
	data, err := os.ReadFile(d.host(req.Msg.GetPath()))
	if err != nil {
		return fsErr(err)
	}
	return s.Send(&ctrlv1.ReadFileResponse{Info: info(req.Msg.GetPath(), fi), Data: data})
}

// tree lists a directory's files with their content, by relative path.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		got[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// cp -r copies a tree's files several at a time, each directory made
// before the files in it, both ways, and the tree arrives whole.
func TestCopyingATreeCopiesSeveralFilesAtOnce(t *testing.T) {
	local := t.TempDir()
	want := map[string]string{}
	for i := range 40 {
		rel := filepath.Join(fmt.Sprintf("d%d", i%4), fmt.Sprintf("e%d", i%3), fmt.Sprintf("f%d.txt", i))
		want[rel] = strings.Repeat(fmt.Sprintf("file %d\n", i), i+1)
		if err := os.MkdirAll(filepath.Join(local, filepath.Dir(rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(local, rel), []byte(want[rel]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	guest := &dirFiles{root: t.TempDir()}
	guest.again()
	onFakeEndpoint(t, func(m *http.ServeMux) { m.Handle(ctrlv1connect.NewFileServiceHandler(guest)) })
	run := func(args ...string) {
		t.Helper()
		if code, _, stderr := runCLI(args...); code != 0 {
			t.Fatalf("kibotos %v: exit %d: %s", args, code, stderr)
		}
	}

	run("workspace", "cp", "-r", local, "ws-1:/up")
	if got := tree(t, filepath.Join(guest.root, "up")); len(got) != len(want) || fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(want)) {
		t.Errorf("the guest has %d files, want the %d copied: %v", len(got), len(want), sorted(got))
	}
	up := guest.most.Load()
	guest.again()
	back := filepath.Join(t.TempDir(), "back")
	run("workspace", "cp", "-r", "ws-1:/up", back)
	if got := tree(t, back); fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(want)) {
		t.Errorf("copied back: %v", sorted(got))
	}
	if down := guest.most.Load(); up < 2 || down < 2 {
		t.Errorf("at most %d files went up and %d came down at once, want several", up, down)
	}
}

func sorted(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
