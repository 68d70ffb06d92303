package e2e_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/clientconfig"
)

func (d *dev) files() ctrlv1connect.FileServiceClient {
	return ctrlv1connect.NewFileServiceClient(httpClientWithToken(d.env[clientconfig.EnvToken]), d.env[clientconfig.EnvWorkspaceEndpoint])
}

func (d *dev) processes() ctrlv1connect.ProcessServiceClient {
	return ctrlv1connect.NewProcessServiceClient(httpClientWithToken(d.env[clientconfig.EnvToken]), d.env[clientconfig.EnvWorkspaceEndpoint])
}

// createWorkspace creates a Workspace with the CLI and waits until it is
// AVAILABLE.
func (d *dev) createWorkspace(t *testing.T) string {
	t.Helper()
	var created struct {
		Workspace struct {
			WorkspaceID string `json:"workspaceId"`
		} `json:"workspace"`
	}
	out := d.mustKibotos(t, "workspace", "create", "--memory", "256", "-o", "json")
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &created); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	id := created.Workspace.WorkspaceID
	d.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	return id
}

// stageOf is the failure stage an API error carries.
func stageOf(err error) ctrlv1.FailureStage {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ctrlv1.FailureStage_FAILURE_STAGE_UNSPECIFIED
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ed, ok := v.(*ctrlv1.ErrorDetail); ok {
				return ed.GetStage()
			}
		}
	}
	return ctrlv1.FailureStage_FAILURE_STAGE_UNSPECIFIED
}

func fieldOf(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ed, ok := v.(*ctrlv1.ErrorDetail); ok {
				return ed.GetField()
			}
		}
	}
	return ""
}

// The data plane on one real VM: files through the API and `workspace cp`,
// processes with stdin, signals and a pty, metrics, and all refused once
// the Workspace is stopped. One VM for every check: boots are slow under TCG.
func TestDataPlaneOnARealVM(t *testing.T) {
	d := startDev(t)
	id := d.createWorkspace(t)
	ctx := context.Background()
	files := d.files()

	// Write (several chunks), read back, stat.
	content := make([]byte, 2<<20+17)
	_, _ = rand.Read(content)
	w := files.WriteFile(ctx)
	size := uint64(len(content))
	_ = w.Send(&ctrlv1.WriteFileRequest{WorkspaceId: id, Frame: &ctrlv1.WriteFileRequest_Header{Header: &ctrlv1.WriteFileHeader{
		Path: "/data/dir/blob", CreateParents: true, Mode: 0o640, SizeBytes: &size}}})
	for off := 0; off < len(content); off += 1 << 20 {
		_ = w.Send(&ctrlv1.WriteFileRequest{Frame: &ctrlv1.WriteFileRequest_Data{Data: content[off:min(off+1<<20, len(content))]}})
	}
	wres, err := w.CloseAndReceive()
	if err != nil || wres.Msg.GetWrittenBytes() != size || wres.Msg.GetInfo().GetMode() != 0o640 {
		t.Fatalf("write: %v %v", wres, err)
	}
	r, err := files.ReadFile(ctx, connect.NewRequest(&ctrlv1.ReadFileRequest{WorkspaceId: id, Path: "/data/dir/blob"}))
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for r.Receive() {
		got = append(got, r.Msg().GetData()...)
	}
	if r.Err() != nil || !bytes.Equal(got, content) {
		t.Fatalf("read back: %d bytes, %v", len(got), r.Err())
	}
	st, err := files.StatFile(ctx, connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: id, Path: "/data/dir/blob"}))
	if err != nil || st.Msg.GetInfo().GetSizeBytes() != size || st.Msg.GetInfo().GetOwner() != "root" {
		t.Errorf("stat: %v %v", st, err)
	}

	// mkdir, list, move (within a filesystem and across: /data to /tmp),
	// delete.
	if _, err := files.MakeDirectory(ctx, connect.NewRequest(&ctrlv1.MakeDirectoryRequest{WorkspaceId: id, Path: "/data/dir/sub"})); err != nil {
		t.Fatal(err)
	}
	ls, err := files.ListDirectory(ctx, connect.NewRequest(&ctrlv1.ListDirectoryRequest{WorkspaceId: id, Path: "/data/dir"}))
	if err != nil || len(ls.Msg.GetEntries()) != 2 || ls.Msg.GetEntries()[0].GetPath() != "/data/dir/blob" || ls.Msg.GetEntries()[1].GetType() != ctrlv1.FileType_FILE_TYPE_DIRECTORY {
		t.Errorf("list: %v %v", ls, err)
	}
	if _, err := files.MoveFile(ctx, connect.NewRequest(&ctrlv1.MoveFileRequest{WorkspaceId: id, SourcePath: "/data/dir/blob", DestinationPath: "/data/dir/sub/blob"})); err != nil {
		t.Errorf("move: %v", err)
	}
	mv, err := files.MoveFile(ctx, connect.NewRequest(&ctrlv1.MoveFileRequest{WorkspaceId: id, SourcePath: "/data/dir/sub", DestinationPath: "/tmp/sub"}))
	if err != nil || mv.Msg.GetInfo().GetType() != ctrlv1.FileType_FILE_TYPE_DIRECTORY {
		t.Errorf("move across filesystems: %v %v", mv, err)
	}
	if _, err := files.StatFile(ctx, connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: id, Path: "/tmp/sub/blob"})); err != nil {
		t.Errorf("the moved file: %v", err)
	}
	del, err := files.DeleteFile(ctx, connect.NewRequest(&ctrlv1.DeleteFileRequest{WorkspaceId: id, Path: "/tmp/sub", Recursive: true}))
	if err != nil || !del.Msg.GetDeleted() {
		t.Errorf("delete: %v %v", del, err)
	}
	if _, err := files.StatFile(ctx, connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: id, Path: "/tmp/sub"})); connect.CodeOf(err) != connect.CodeNotFound ||
		stageOf(err) != ctrlv1.FailureStage_FAILURE_STAGE_INSPECTING_FILE {
		t.Errorf("stat of a deleted path: %v (stage %v)", err, stageOf(err))
	}
	_, err = files.StatFile(ctx, connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: id, Path: "/data/../../etc"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || fieldOf(err) != "path" {
		t.Errorf("a path climbing out of the root: %v (field %q)", err, fieldOf(err))
	}

	// A watch sees a file written after its start.
	watchCtx, stopWatch := context.WithCancel(ctx)
	watch, err := files.WatchDirectory(watchCtx, connect.NewRequest(&ctrlv1.WatchDirectoryRequest{WorkspaceId: id, Path: "/tmp", Recursive: true}))
	if err != nil || !watch.Receive() || watch.Msg().GetStarted() == nil {
		t.Fatalf("watch: %v", err)
	}
	w = files.WriteFile(ctx)
	_ = w.Send(&ctrlv1.WriteFileRequest{WorkspaceId: id, Frame: &ctrlv1.WriteFileRequest_Header{Header: &ctrlv1.WriteFileHeader{Path: "/tmp/watched"}}})
	if _, err := w.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	sawRename := false // WriteFile renames its temporary file into place
	for !sawRename && watch.Receive() {
		ev := watch.Msg().GetEvent()
		sawRename = ev.GetKind() == ctrlv1.FileEventKind_FILE_EVENT_KIND_RENAMED && ev.GetNewPath() == "/tmp/watched"
	}
	if !sawRename {
		t.Errorf("the watch did not see the write: %v", watch.Err())
	}
	stopWatch()
	watch.Close()

	// workspace cp, both ways, through the CLI.
	local := filepath.Join(t.TempDir(), "up.txt")
	if err := os.WriteFile(local, []byte("copied in\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.mustKibotos(t, "workspace", "cp", local, id+":/root")
	if out := d.mustKibotos(t, "workspace", "cp", id+":/root/up.txt", "-"); out != "copied in\n" {
		t.Errorf("cp to stdout: %q", out)
	}
	back := filepath.Join(t.TempDir(), "down.txt")
	d.mustKibotos(t, "workspace", "cp", id+":/root/up.txt", back)
	if b, err := os.ReadFile(back); err != nil || string(b) != "copied in\n" {
		t.Errorf("cp back: %q %v", b, err)
	}
	if out, code := d.kibotos(t, "workspace", "cp", id+":/no/such", back); code == 0 || !strings.Contains(out, "not_found") {
		t.Errorf("cp of a missing file: exit %d: %s", code, out)
	}

	testProcessesOnTheVM(t, d, id)
	recorded := testStartsAreCommands(t, d, id)
	checkMetrics(t, d, id)

	// A stream open when the execution ends fails as failed_precondition,
	// with an API key or with a session.
	long, err := d.processes().ExecProcess(ctx, connect.NewRequest(&ctrlv1.ExecProcessRequest{WorkspaceId: id, Spec: &ctrlv1.ProcessSpec{Argv: []string{"sleep", "600"}}}))
	if err != nil || !long.Receive() || long.Msg().GetStarted() == nil {
		t.Fatalf("exec sleep: %v", err)
	}
	streamEnd := make(chan error, 1)
	go func() {
		for long.Receive() {
		}
		streamEnd <- long.Err()
	}()
	withSession := openSessionStream(t, d, id)
	d.mustKibotos(t, "workspace", "stop", "--force", id)
	d.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	withSession.checkEndedWithItsExecution(t)
	select {
	case err := <-streamEnd:
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || stageOf(err) != ctrlv1.FailureStage_FAILURE_STAGE_STREAMING_PROCESS {
			t.Errorf("a stream open when its execution ended: %v (stage %v)", err, stageOf(err))
		}
	case <-time.After(time.Minute):
		t.Error("a stream open when its execution ended did not end")
	}
	_, err = files.StatFile(ctx, connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: id, Path: "/"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || stageOf(err) != ctrlv1.FailureStage_FAILURE_STAGE_INSPECTING_FILE {
		t.Errorf("a file call on a stopped Workspace: %v (stage %v)", err, stageOf(err))
	}
	_, err = d.processes().StartProcess(ctx, connect.NewRequest(&ctrlv1.StartProcessRequest{WorkspaceId: id, Spec: &ctrlv1.ProcessSpec{Argv: []string{"true"}}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || stageOf(err) != ctrlv1.FailureStage_FAILURE_STAGE_STARTING_PROCESS {
		t.Errorf("a process in a stopped Workspace: %v (stage %v)", err, stageOf(err))
	}
	// A replay after the execution ended answers the recorded process and
	// starts nothing.
	if res, err := d.processes().StartProcess(ctx, connect.NewRequest(recordedStart(id))); err != nil || res.Msg.GetProcessId() != recorded.GetProcessId() {
		t.Errorf("replay of a start in a stopped Workspace: %v %v, want process %s", res, err, recorded.GetProcessId())
	}
	if out, code := d.kibotos(t, "workspace", "cp", local, id+":/root/x"); code == 0 || !strings.Contains(out, "failed_precondition") {
		t.Errorf("cp into a stopped Workspace: exit %d: %s", code, out)
	}
	checkMetricsStopped(t, d, id)
	d.mustKibotos(t, "workspace", "delete", id)
}

// testProcessesOnTheVM runs the process checks on a running Workspace:
// stdin, a signal, a pty, a user, and the process records.
func testProcessesOnTheVM(t *testing.T, d *dev, id string) {
	ctx := context.Background()
	procs := d.processes()
	if out := d.mustKibotos(t, "workspace", "exec", id, "--", "cat", "/root/up.txt"); out != "copied in\n" {
		t.Errorf("exec: %q", out)
	}
	start := func(spec *ctrlv1.ProcessSpec) *ctrlv1.StartProcessResponse {
		t.Helper()
		res, err := procs.StartProcess(ctx, connect.NewRequest(&ctrlv1.StartProcessRequest{WorkspaceId: id, Spec: spec}))
		if err != nil {
			t.Fatalf("start %v: %v", spec.GetArgv(), err)
		}
		return res.Msg
	}
	wait := func(processID string) *ctrlv1.ProcessExitStatus {
		t.Helper()
		res, err := procs.WaitProcess(ctx, connect.NewRequest(&ctrlv1.WaitProcessRequest{WorkspaceId: id, ProcessId: processID}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.GetExit()
	}
	stdout := func(processID string) string {
		t.Helper()
		s, err := procs.StreamProcessOutput(ctx, connect.NewRequest(&ctrlv1.StreamProcessOutputRequest{WorkspaceId: id, ProcessId: processID}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var out strings.Builder
		for s.Receive() {
			out.Write(s.Msg().GetOutput().GetData())
		}
		if s.Err() != nil {
			t.Fatal(s.Err())
		}
		return out.String()
	}

	// workspace exec -i sends this side's stdin; --user picks the user.
	execIn := exec.Command(kibotosBin, "workspace", "exec", "-i", "--user", "0", id, "--", "sh", "-c", "tr a-z A-Z; id -u")
	execIn.Env = []string{"KIBOTOS_HOME=" + d.home, "HOME=" + d.home, "PATH=" + os.Getenv("PATH")}
	execIn.Stdin = strings.NewReader("piped in\n")
	if out, err := execIn.CombinedOutput(); err != nil || string(out) != "PIPED IN\n0\n" {
		t.Errorf("workspace exec -i: %q %v", out, err)
	}

	// stdin, streamed in two inputs and closed.
	cat := start(&ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "cat > /tmp/in; wc -c < /tmp/in"}, Stdin: true})
	for _, in := range []*ctrlv1.SendProcessInputRequest{{Data: []byte("abc")}, {Data: []byte("def"), Close: true}} {
		in.WorkspaceId, in.ProcessId = id, cat.GetProcessId()
		if _, err := procs.SendProcessInput(ctx, connect.NewRequest(in)); err != nil {
			t.Fatal(err)
		}
	}
	if exit := wait(cat.GetProcessId()); exit.GetExitCode() != 0 || strings.TrimSpace(stdout(cat.GetProcessId())) != "6" {
		t.Errorf("stdin: exit %v, output %q", exit, stdout(cat.GetProcessId()))
	}

	// A signal ends a background process.
	sleeper := start(&ctrlv1.ProcessSpec{Argv: []string{"sleep", "600"}})
	sig, err := procs.SignalProcess(ctx, connect.NewRequest(&ctrlv1.SignalProcessRequest{WorkspaceId: id, ProcessId: sleeper.GetProcessId(), Signal: ctrlv1.ProcessSignal_PROCESS_SIGNAL_SIGKILL}))
	if err != nil || !sig.Msg.GetDelivered() {
		t.Errorf("signal: %v %v", sig, err)
	}
	if exit := wait(sleeper.GetProcessId()); exit.GetCause() != ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_SIGNALED || exit.GetSignal() != 9 {
		t.Errorf("after SIGKILL: %v", exit)
	}

	// A pty of the size asked for.
	tty := start(&ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "stty size"}, Pty: &ctrlv1.ProcessPty{Rows: 30, Cols: 90}})
	if out := stdout(tty.GetProcessId()); strings.TrimSpace(out) != "30 90" {
		t.Errorf("stty size on a pty: %q", out)
	}

	list, err := procs.ListProcesses(ctx, connect.NewRequest(&ctrlv1.ListProcessesRequest{WorkspaceId: id, IncludeExited: true}))
	if err != nil || len(list.Msg.GetProcesses()) < 3 {
		t.Errorf("list: %v %v", list, err)
	}
	_, err = procs.GetProcess(ctx, connect.NewRequest(&ctrlv1.GetProcessRequest{WorkspaceId: id, ProcessId: "proc-none"}))
	if connect.CodeOf(err) != connect.CodeNotFound || stageOf(err) != ctrlv1.FailureStage_FAILURE_STAGE_USING_PROCESS {
		t.Errorf("an unknown process: %v (stage %v)", err, stageOf(err))
	}
}

func recordedStart(id string) *ctrlv1.StartProcessRequest {
	return &ctrlv1.StartProcessRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "start-recorded"}, WorkspaceId: id,
		Spec: &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "echo started >> /tmp/starts"}},
	}
}

// testStartsAreCommands checks StartProcess under a command_id is a
// command: a replay answers the same process and starts nothing, other
// input (or ExecProcess) under the same id is already_exists, and a start
// the guest refuses is not recorded. It returns the recorded start.
func testStartsAreCommands(t *testing.T, d *dev, id string) *ctrlv1.StartProcessResponse {
	ctx := context.Background()
	procs := d.processes()
	first, err := procs.StartProcess(ctx, connect.NewRequest(recordedStart(id)))
	if err != nil {
		t.Fatal(err)
	}
	again, err := procs.StartProcess(ctx, connect.NewRequest(recordedStart(id)))
	if err != nil || again.Msg.GetProcessId() != first.Msg.GetProcessId() || again.Msg.GetPid() != first.Msg.GetPid() {
		t.Errorf("replay: %v %v, want %v", again, err, first.Msg)
	}
	if _, err := procs.WaitProcess(ctx, connect.NewRequest(&ctrlv1.WaitProcessRequest{WorkspaceId: id, ProcessId: first.Msg.GetProcessId()})); err != nil {
		t.Fatal(err)
	}
	if out := d.mustKibotos(t, "workspace", "exec", id, "--", "cat", "/tmp/starts"); out != "started\n" {
		t.Errorf("the replayed start ran again: %q", out)
	}
	other := recordedStart(id)
	other.Spec.Argv = []string{"true"}
	if _, err := procs.StartProcess(ctx, connect.NewRequest(other)); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("other input under the same command_id: %v, want already_exists", err)
	}
	exec, err := procs.ExecProcess(ctx, connect.NewRequest(&ctrlv1.ExecProcessRequest{Command: other.GetCommand(), WorkspaceId: id, Spec: recordedStart(id).GetSpec()}))
	if err == nil {
		for exec.Receive() {
		}
		err = exec.Err()
		exec.Close()
	}
	if connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("ExecProcess under a StartProcess command_id: %v, want already_exists", err)
	}
	bad := &ctrlv1.StartProcessRequest{Command: &ctrlv1.CommandMetadata{CommandId: "start-refused"}, WorkspaceId: id, Spec: &ctrlv1.ProcessSpec{Argv: []string{"/no/such/program"}}}
	if _, err := procs.StartProcess(ctx, connect.NewRequest(bad)); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("a missing program: %v, want failed_precondition", err)
	}
	bad.Spec.Argv = []string{"true"}
	if _, err := procs.StartProcess(ctx, connect.NewRequest(bad)); err != nil {
		t.Errorf("a refused start is not recorded, so its command_id serves again: %v", err)
	}
	return first.Msg
}
