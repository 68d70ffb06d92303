package dataplane_test

// FileService through ctrl (docs/spec-coverage/dataplane.md, FS and DP
// rows): ctrl adds each call's stage to what the guest refuses; the guest
// agent here is real, on a root of its own (the env of process_test.go).

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/guest"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

// files is ctrl's FileService on the env's database.
func (e *env) files(t *testing.T) ctrlv1connect.FileServiceClient {
	t.Helper()
	srv := e.serve(t)
	return ctrlv1connect.NewFileServiceClient(srv.Client(), srv.URL)
}

// fileExecution is execution with a guest agent whose root is a directory
// of the test's own, returned.
func (e *env) fileExecution(t *testing.T, instance string) (workspaceID, root string) {
	t.Helper()
	workspaceID, root = e.execution(t, instance, "node-a", 1), t.TempDir()
	e.data.mu.Lock()
	e.data.guests[instance] = (&guest.Agent{Root: root}).Handler()
	e.data.mu.Unlock()
	return workspaceID, root
}

// fileCall is one FileService RPC on a path the guest does not have, its
// stage (FileService's comments) and the field its not_found names.
type fileCall struct {
	name, field string
	stage       ctrlv1.FailureStage
	do          func(c ctrlv1connect.FileServiceClient, ws string) error
}

var everyFileCall = []fileCall{
	{"ReadFile", "path", ctrlv1.FailureStage_FAILURE_STAGE_READING_FILE, func(c ctrlv1connect.FileServiceClient, ws string) error {
		s, err := c.ReadFile(bg, connect.NewRequest(&ctrlv1.ReadFileRequest{WorkspaceId: ws, Path: "/missing"}))
		if err == nil {
			_, err = drain(s)
		}
		return err
	}},
	{"WriteFile", "header.path", ctrlv1.FailureStage_FAILURE_STAGE_WRITING_FILE, func(c ctrlv1connect.FileServiceClient, ws string) error {
		s := c.WriteFile(bg)
		_ = s.Send(&ctrlv1.WriteFileRequest{WorkspaceId: ws, Frame: &ctrlv1.WriteFileRequest_Header{Header: &ctrlv1.WriteFileHeader{Path: "/missing/f"}}})
		_, err := s.CloseAndReceive()
		return err
	}},
	{"StatFile", "path", ctrlv1.FailureStage_FAILURE_STAGE_INSPECTING_FILE, func(c ctrlv1connect.FileServiceClient, ws string) error {
		_, err := c.StatFile(bg, connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: ws, Path: "/missing"}))
		return err
	}},
	{"ListDirectory", "path", ctrlv1.FailureStage_FAILURE_STAGE_INSPECTING_FILE, func(c ctrlv1connect.FileServiceClient, ws string) error {
		_, err := c.ListDirectory(bg, connect.NewRequest(&ctrlv1.ListDirectoryRequest{WorkspaceId: ws, Path: "/missing"}))
		return err
	}},
	{"MakeDirectory", "path", ctrlv1.FailureStage_FAILURE_STAGE_CREATING_DIRECTORY, func(c ctrlv1connect.FileServiceClient, ws string) error {
		_, err := c.MakeDirectory(bg, connect.NewRequest(&ctrlv1.MakeDirectoryRequest{WorkspaceId: ws, Path: "/missing/d"}))
		return err
	}},
	{"MoveFile", "source_path", ctrlv1.FailureStage_FAILURE_STAGE_MOVING_FILE, func(c ctrlv1connect.FileServiceClient, ws string) error {
		_, err := c.MoveFile(bg, connect.NewRequest(&ctrlv1.MoveFileRequest{WorkspaceId: ws, SourcePath: "/missing", DestinationPath: "/moved"}))
		return err
	}},
	{"DeleteFile", "path", ctrlv1.FailureStage_FAILURE_STAGE_DELETING_FILE, func(c ctrlv1connect.FileServiceClient, ws string) error {
		_, err := c.DeleteFile(bg, connect.NewRequest(&ctrlv1.DeleteFileRequest{WorkspaceId: ws, Path: "/missing"}))
		return err
	}},
	{"WatchDirectory", "path", ctrlv1.FailureStage_FAILURE_STAGE_WATCHING_DIRECTORY, func(c ctrlv1connect.FileServiceClient, ws string) error {
		s, err := c.WatchDirectory(bg, connect.NewRequest(&ctrlv1.WatchDirectoryRequest{WorkspaceId: ws, Path: "/missing"}))
		if err == nil {
			_, err = drain(s)
		}
		return err
	}},
}

// FileService: "Errors (ErrorDetail stage is the call's, given on each
// RPC)": what the guest refuses (here a missing path: not_found naming
// it) reaches the caller with the call's stage, READING_FILE,
// WRITING_FILE, INSPECTING_FILE (StatFile, ListDirectory),
// CREATING_DIRECTORY, MOVING_FILE, DELETING_FILE and WATCHING_DIRECTORY;
// so does a refusal of bad input (deleting /), on both databases.
func TestRefusalsOfAGuestCarryTheFileCallsStage(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b.DSN(t))
			ws, root := e.fileExecution(t, "ws-files.1")
			c := e.files(t)
			for _, call := range everyFileCall {
				wantDetail(t, call.name+" of a missing path", call.do(c, ws), connect.CodeNotFound, call.stage, call.field)
			}
			_, err := c.DeleteFile(bg, connect.NewRequest(&ctrlv1.DeleteFileRequest{WorkspaceId: ws, Path: "/", Recursive: true}))
			wantDetail(t, "DeleteFile of /", err, connect.CodeInvalidArgument, ctrlv1.FailureStage_FAILURE_STAGE_DELETING_FILE, "path")
			// The same route reaches the guest's files.
			if _, err := c.MakeDirectory(bg, connect.NewRequest(&ctrlv1.MakeDirectoryRequest{WorkspaceId: ws, Path: "/made"})); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(filepath.Join(root, "made")); err != nil || !fi.IsDir() {
				t.Errorf("the directory made through ctrl: %v", err)
			}
		})
	}
}

// FileService: "A missing Workspace is not_found; one not AVAILABLE is
// failed_precondition; an unresponsive guest or a node without a live
// control session is unavailable", each at the call's stage. A guest
// whose node's data endpoint does not answer stands for one that does not.
func TestEveryFileCallNeedsAnAvailableWorkspaceAndALiveGuest(t *testing.T) {
	e := newEnv(t, storetest.SQLiteDSN(t))
	e.unreachable(t)
	c := e.files(t)
	for _, call := range everyFileCall {
		wantDetail(t, call.name+" on a missing Workspace", call.do(c, "ws-none"), connect.CodeNotFound, call.stage, "")
		wantDetail(t, call.name+" on a STOPPED Workspace", call.do(c, "ws-stopped"), connect.CodeFailedPrecondition, call.stage, "")
		wantDetail(t, call.name+" on a node without a live session", call.do(c, "ws-lapsed"), connect.CodeUnavailable, call.stage, "")
		wantDetail(t, call.name+" to a guest that does not answer", call.do(c, "ws-silent"), connect.CodeUnavailable, call.stage, "")
	}
}

// WriteFile: "a failed or cancelled write leaves the old file as it was",
// through ctrl: a caller that cancels mid-stream cuts ctrl's stream to the
// guest, which removes its temporary file and keeps the old one.
func TestAWriteCancelledThroughCtrlLeavesTheOldFile(t *testing.T) {
	e := newEnv(t, storetest.SQLiteDSN(t))
	ws, root := e.fileExecution(t, "ws-files.1")
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := e.files(t).WriteFile(ctx)
	for _, m := range []*ctrlv1.WriteFileRequest{
		{WorkspaceId: ws, Frame: &ctrlv1.WriteFileRequest_Header{Header: &ctrlv1.WriteFileHeader{Path: "/f"}}},
		{Frame: &ctrlv1.WriteFileRequest_Data{Data: []byte("partial")}},
	} {
		if err := s.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	temporary := func() []string { left, _ := filepath.Glob(filepath.Join(root, ".kibotos-write-*")); return left }
	testenv.WaitFor(t, "the write's temporary file", func() bool { return len(temporary()) == 1 })
	cancel() // before closing the stream, which would end it as complete
	testenv.WaitFor(t, "the temporary file removed", func() bool { return len(temporary()) == 0 })
	if b, err := os.ReadFile(filepath.Join(root, "f")); err != nil || string(b) != "old" {
		t.Errorf("/f after the cancelled write: %q %v, want \"old\"", b, err)
	}
}

// The relay asks the guest for no compression: a guest agent compresses
// every message for a caller that accepts gzip, on the Workspace's own
// CPU (under emulation, at a few MB/s), for ctrl to inflate at once. A
// file read and a process's output through ctrl come uncompressed.
func TestTheRelayAsksTheGuestForNoCompression(t *testing.T) {
	e := newEnv(t, storetest.SQLiteDSN(t))
	ws, root := e.fileExecution(t, "ws-1.1")
	if err := os.WriteFile(filepath.Join(root, "f"), bytes.Repeat([]byte("compressible "), 1<<16), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := e.files(t).ReadFile(bg, connect.NewRequest(&ctrlv1.ReadFileRequest{WorkspaceId: ws, Path: "/f"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drain(s); err != nil {
		t.Fatal(err)
	}
	start(t, e.procs, e.execution(t, "ws-2.1", "node-a", 1), "", &ctrlv1.ProcessSpec{Argv: []string{"true"}})
	e.data.mu.Lock()
	defer e.data.mu.Unlock()
	if len(e.data.headers) < 2 {
		t.Fatalf("%d calls reached the node, want the read and the start", len(e.data.headers))
	}
	for _, h := range e.data.headers {
		for _, name := range []string{"Connect-Accept-Encoding", "Grpc-Accept-Encoding", "Accept-Encoding"} {
			if strings.Contains(h.Get(name), "gzip") {
				t.Errorf("ctrl asked the node for %s: %q", name, h.Get(name))
			}
		}
	}
}
