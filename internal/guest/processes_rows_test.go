package guest_test

// ProcessService sentences (docs/spec-coverage/dataplane.md, PS rows) the
// older process tests touch without asserting: each test names the
// sentence it asserts, on real processes run by a local agent.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/guest"
	"github.com/kibotos/kibotos/internal/testenv"
)

const (
	stdout = ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT
	stderr = ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDERR
)

// wantRefusal checks wantErr's code and field, and the reason.
func wantRefusal(t *testing.T, what string, err error, code connect.Code, reason ctrlv1.FailureReason, field string) {
	t.Helper()
	wantErr(t, what, err, code, field)
	if got := apierr.DetailOf(err).GetReason(); got != reason {
		t.Errorf("%s: reason %v, want %v", what, got, reason)
	}
}

func getProcess(t *testing.T, c guestv1connect.GuestAgentServiceClient, id string) *ctrlv1.Process {
	t.Helper()
	res, err := c.GetProcess(context.Background(), connect.NewRequest(&guestv1.GetProcessRequest{Request: &ctrlv1.GetProcessRequest{ProcessId: id}}))
	if err != nil {
		t.Fatalf("GetProcess %s: %v", id, err)
	}
	return res.Msg.GetResponse().GetProcess()
}

func signalProcess(t *testing.T, c guestv1connect.GuestAgentServiceClient, id string, sig ctrlv1.ProcessSignal) {
	t.Helper()
	if _, err := c.SignalProcess(context.Background(), connect.NewRequest(&guestv1.SignalProcessRequest{Request: &ctrlv1.SignalProcessRequest{ProcessId: id, Signal: sig}})); err != nil {
		t.Fatalf("SignalProcess %s: %v", id, err)
	}
}

func waitProcess(t *testing.T, c guestv1connect.GuestAgentServiceClient, id string) *ctrlv1.ProcessExitStatus {
	t.Helper()
	res, err := c.WaitProcess(context.Background(), connect.NewRequest(&guestv1.WaitProcessRequest{Request: &ctrlv1.WaitProcessRequest{ProcessId: id}}))
	if err != nil {
		t.Fatalf("WaitProcess %s: %v", id, err)
	}
	return res.Msg.GetResponse().GetExit()
}

// killAtEnd ends a process the test leaves running.
func killAtEnd(t *testing.T, c guestv1connect.GuestAgentServiceClient, id string) {
	t.Cleanup(func() {
		_, _ = c.SignalProcess(context.Background(), connect.NewRequest(&guestv1.SignalProcessRequest{Request: &ctrlv1.SignalProcessRequest{
			ProcessId: id, Signal: ctrlv1.ProcessSignal_PROCESS_SIGNAL_SIGKILL}}))
	})
}

// waitOutput waits until a running process has produced at least these
// many bytes on each stream.
func waitOutput(t *testing.T, c guestv1connect.GuestAgentServiceClient, id string, out, errOut uint64) {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("%s to write %d and %d bytes", id, out, errOut), func() bool {
		p := getProcess(t, c, id)
		return p.GetStdoutEndOffset() >= out && p.GetStderrEndOffset() >= errOut
	})
}

// events reads a StreamProcessOutput to its end: its chunks, its exit
// (nil without one) and how it ended.
func events(c guestv1connect.GuestAgentServiceClient, r *ctrlv1.StreamProcessOutputRequest) ([]*ctrlv1.ProcessOutputChunk, *ctrlv1.ProcessExitStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.StreamProcessOutput(ctx, connect.NewRequest(&guestv1.StreamProcessOutputRequest{Request: r}))
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	var chunks []*ctrlv1.ProcessOutputChunk
	var exit *ctrlv1.ProcessExitStatus
	for s.Receive() {
		switch ev := s.Msg().GetResponse().GetEvent().(type) {
		case *ctrlv1.StreamProcessOutputResponse_Output:
			chunks = append(chunks, ev.Output)
		case *ctrlv1.StreamProcessOutputResponse_Exit:
			exit = ev.Exit
		}
	}
	return chunks, exit, s.Err()
}

// joined is the bytes of one stream's chunks, in order.
func joined(chunks []*ctrlv1.ProcessOutputChunk, s ctrlv1.ProcessOutputStream) string {
	var b strings.Builder
	for _, c := range chunks {
		if c.GetStream() == s {
			b.Write(c.GetData())
		}
	}
	return b.String()
}

// firstOffset is the offset of a stream's first chunk, or -1 without one.
func firstOffset(chunks []*ctrlv1.ProcessOutputChunk, s ctrlv1.ProcessOutputStream) int64 {
	for _, c := range chunks {
		if c.GetStream() == s {
			return int64(c.GetOffset())
		}
	}
	return -1
}

// sharedTempDir is a new directory every user may search (t.TempDir's
// parent is not), removed when the test ends.
func sharedTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kibotos-proc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// passwd is a user's home and shell as the machine's /etc/passwd says.
func passwd(t *testing.T, name string) (home, shell string) {
	t.Helper()
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, ":"); len(f) == 7 && f[0] == name {
			return f[5], f[6]
		}
	}
	t.Fatalf("no %s in /etc/passwd", name)
	return "", ""
}

// StartProcess: "An argv[0] or cwd that does not exist is
// failed_precondition with reason FAILURE_REASON_NOT_FOUND; one the user
// may not execute or enter is failed_precondition with reason
// FAILURE_REASON_PERMISSION_DENIED ... Malformed input is
// invalid_argument"; ProcessSpec.argv "is required and argv[0] must not be
// empty"; ProcessPty "rows and cols are each 1 to 4096".
func TestStartRefusalsNameTheirReason(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	dir := sharedTempDir(t)
	if err := os.WriteFile(filepath.Join(dir, "data.txt"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "root-only"), prog, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "private"), 0o700); err != nil {
		t.Fatal(err)
	}
	const (
		fp      = connect.CodeFailedPrecondition
		ia      = connect.CodeInvalidArgument
		missing = ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND
		denied  = ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED
		bad     = ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST
	)
	for _, tc := range []struct {
		what   string
		spec   *ctrlv1.ProcessSpec
		code   connect.Code
		reason ctrlv1.FailureReason
		field  string
	}{
		{"a program not in PATH", &ctrlv1.ProcessSpec{Argv: []string{"no-such-program"}}, fp, missing, "spec.argv"},
		{"a path to no program", &ctrlv1.ProcessSpec{Argv: []string{"/no/such/program"}}, fp, missing, "spec.argv"},
		{"a cwd that does not exist", &ctrlv1.ProcessSpec{Argv: []string{"true"}, Cwd: "/no/such/dir"}, fp, missing, "spec.cwd"},
		{"a file without execute bits", &ctrlv1.ProcessSpec{Argv: []string{filepath.Join(dir, "data.txt")}}, fp, denied, "spec.argv"},
		{"a program only root may execute, as nobody", &ctrlv1.ProcessSpec{Argv: []string{filepath.Join(dir, "root-only")}, User: "nobody", Cwd: "/"}, fp, denied, "spec.argv"},
		{"a cwd nobody may not enter", &ctrlv1.ProcessSpec{Argv: []string{"true"}, User: "nobody", Cwd: filepath.Join(dir, "private")}, fp, denied, "spec.cwd"},
		{"no argv", &ctrlv1.ProcessSpec{}, ia, bad, "spec.argv"},
		{"an empty argv[0]", &ctrlv1.ProcessSpec{Argv: []string{"", "x"}}, ia, bad, "spec.argv"},
		{"a pty 4097 columns wide", &ctrlv1.ProcessSpec{Argv: []string{"true"}, Pty: &ctrlv1.ProcessPty{Rows: 24, Cols: 4097}}, ia, bad, "spec.pty"},
	} {
		_, err := c.StartProcess(context.Background(), connect.NewRequest(&guestv1.StartProcessRequest{ProcessId: "refused", Spec: tc.spec}))
		wantRefusal(t, tc.what, err, tc.code, tc.reason, tc.field)
	}
	// The limits themselves are taken.
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"true"}, Pty: &ctrlv1.ProcessPty{Rows: 1, Cols: 4096}})
	if exit := waitProcess(t, c, p.GetProcessId()); exit.GetExitCode() != 0 {
		t.Errorf("a 1x4096 pty: %v", exit)
	}
}

// StreamProcessOutput: "a caller resumes from the offsets it has
// received"; "An offset past what the stream has produced is
// out_of_range"; snapshot "ends the stream after the retained output ...;
// `exit` is sent only if the process has already ended."
func TestStreamResumesFromTheOffsetsReceived(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", `printf abc; printf XYZ >&2; read line; printf "def$line"`}, Stdin: true})
	id := p.GetProcessId()
	waitOutput(t, c, id, 3, 3)

	chunks, exit, err := events(c, &ctrlv1.StreamProcessOutputRequest{ProcessId: id, StdoutOffset: 1, StderrOffset: 2, Snapshot: true})
	if err != nil || exit != nil || joined(chunks, stdout) != "bc" || joined(chunks, stderr) != "Z" ||
		firstOffset(chunks, stdout) != 1 || firstOffset(chunks, stderr) != 2 {
		t.Errorf("a snapshot from 1 and 2 of a running process: %v exit %v %v, want bc at 1, Z at 2, no exit, OK", chunks, exit, err)
	}
	_, _, err = events(c, &ctrlv1.StreamProcessOutputRequest{ProcessId: id, StdoutOffset: 4})
	wantRefusal(t, "stdout_offset 4 of 3 bytes", err, connect.CodeOutOfRange, ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST, "stdout_offset")
	_, _, err = events(c, &ctrlv1.StreamProcessOutputRequest{ProcessId: id, StderrOffset: 9})
	wantRefusal(t, "stderr_offset 9 of 3 bytes", err, connect.CodeOutOfRange, ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST, "stderr_offset")

	// The reconnect: from the offsets received, the rest and the exit.
	if _, err := input(c, id, "!\n", nil, true); err != nil {
		t.Fatal(err)
	}
	chunks, exit, err = events(c, &ctrlv1.StreamProcessOutputRequest{ProcessId: id, StdoutOffset: 3, StderrOffset: 3})
	if err != nil || joined(chunks, stdout) != "def!" || firstOffset(chunks, stdout) != 3 || joined(chunks, stderr) != "" || exit.GetExitCode() != 0 {
		t.Errorf("resumed from 3 and 3: %v exit %v %v, want def! at 3 and the exit", chunks, exit, err)
	}
	chunks, exit, err = events(c, &ctrlv1.StreamProcessOutputRequest{ProcessId: id, Snapshot: true})
	if err != nil || joined(chunks, stdout) != "abcdef!" || joined(chunks, stderr) != "XYZ" || exit == nil {
		t.Errorf("a snapshot of the ended process: %v exit %v %v, want everything and the exit", chunks, exit, err)
	}
}

// SendProcessInput: "data is at most 1 MiB"; "an offset beyond
// stdin_offset is failed_precondition"; a process "whose stdin is closed
// ... is failed_precondition"; Process.stdin_open "is true while
// SendProcessInput is accepted."
func TestInputLimitsAndAClosedStdin(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "cat >/dev/null; echo eof; exec sleep 60"}, Stdin: true})
	id := p.GetProcessId()
	killAtEnd(t, c, id)
	if !getProcess(t, c, id).GetStdinOpen() {
		t.Error("stdin_open is false before any input")
	}
	_, err := c.SendProcessInput(context.Background(), connect.NewRequest(&guestv1.SendProcessInputRequest{Request: &ctrlv1.SendProcessInputRequest{
		ProcessId: id, Data: make([]byte, 1<<20+1)}}))
	wantErr(t, "1 MiB + 1 byte of input", err, connect.CodeInvalidArgument, "data")
	if n, err := input(c, id, string(make([]byte, 1<<20)), nil, false); err != nil || n != 1<<20 {
		t.Fatalf("1 MiB of input: %d %v", n, err)
	}
	beyond := uint64(1<<20 + 1)
	_, err = input(c, id, "x", &beyond, false)
	wantErr(t, "input at an offset beyond stdin_offset", err, connect.CodeFailedPrecondition, "offset")
	if n, err := input(c, id, "", nil, true); err != nil || n != 1<<20 {
		t.Fatalf("close: %d %v", n, err)
	}
	waitOutput(t, c, id, uint64(len("eof\n")), 0)
	if got := getProcess(t, c, id); got.GetStdinOpen() || got.GetState() != ctrlv1.ProcessState_PROCESS_STATE_RUNNING {
		t.Errorf("after close: stdin_open %v state %v, want false while it runs on", got.GetStdinOpen(), got.GetState())
	}
	_, err = input(c, id, "late", nil, false)
	wantErr(t, "input to a running process whose stdin is closed", err, connect.CodeFailedPrecondition, "")
}

// ProcessSpec.stdin: "When false stdin is /dev/null."
func TestWithoutStdinItIsDevNull(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"readlink", "/proc/self/fd/0"}})
	if out, _, _ := output(t, c, p.GetProcessId()); out != "/dev/null\n" {
		t.Errorf("stdin of a process started without stdin: %q, want /dev/null", out)
	}
}

// ProcessSpec.pty: "stdout and stderr are then one stream, reported as
// stdout, and input is always accepted, whatever stdin says"; env's
// TERM=xterm-256color with a pty; Process.pty "is the current terminal
// size"; ResizeProcessPty's "rows and cols are each 1 to 4096; anything
// else is invalid_argument"; close "With a pty ... sends the terminal's
// EOF character".
func TestPtyRules(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", `echo "term=$TERM"; echo to-stderr >&2; cat; echo after-eof`},
		Pty: &ctrlv1.ProcessPty{Rows: 24, Cols: 80}})
	id := p.GetProcessId()
	if got := getProcess(t, c, id); got.GetPty().GetRows() != 24 || got.GetPty().GetCols() != 80 || !got.GetStdinOpen() {
		t.Errorf("a pty process: pty %v stdin_open %v, want 24x80 and input accepted", got.GetPty(), got.GetStdinOpen())
	}
	resize := func(rows, cols uint32) error {
		_, err := c.ResizeProcessPty(context.Background(), connect.NewRequest(&guestv1.ResizeProcessPtyRequest{Request: &ctrlv1.ResizeProcessPtyRequest{
			ProcessId: id, Size: &ctrlv1.ProcessPty{Rows: rows, Cols: cols}}}))
		return err
	}
	wantErr(t, "resize to 0 rows", resize(0, 80), connect.CodeInvalidArgument, "size")
	wantErr(t, "resize to 4097 columns", resize(30, 4097), connect.CodeInvalidArgument, "size")
	if err := resize(30, 90); err != nil {
		t.Fatal(err)
	}
	if got := getProcess(t, c, id).GetPty(); got.GetRows() != 30 || got.GetCols() != 90 {
		t.Errorf("pty after a resize to 30x90: %v", got)
	}
	if _, err := input(c, id, "line\n", nil, true); err != nil {
		t.Fatal(err)
	}
	out, errOut, exit := output(t, c, id)
	for _, want := range []string{"term=xterm-256color", "to-stderr", "after-eof"} {
		if !strings.Contains(out, want) {
			t.Errorf("pty stdout %q lacks %q", out, want)
		}
	}
	if errOut != "" || getProcess(t, c, id).GetStderrEndOffset() != 0 || exit.GetExitCode() != 0 {
		t.Errorf("pty stderr %q, exit %v: want nothing on stderr and cat ended by the EOF character", errOut, exit)
	}
}

// ResizeProcessPty: "A process without a pty ... is failed_precondition";
// Process.pty is "absent without a pty".
func TestResizeWithoutAPty(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sleep", "60"}})
	killAtEnd(t, c, p.GetProcessId())
	_, err := c.ResizeProcessPty(context.Background(), connect.NewRequest(&guestv1.ResizeProcessPtyRequest{Request: &ctrlv1.ResizeProcessPtyRequest{
		ProcessId: p.GetProcessId(), Size: &ctrlv1.ProcessPty{Rows: 30, Cols: 90}}}))
	wantErr(t, "resize of a process without a pty", err, connect.CodeFailedPrecondition, "")
	if got := getProcess(t, c, p.GetProcessId()); got.GetPty() != nil || got.GetState() != ctrlv1.ProcessState_PROCESS_STATE_RUNNING {
		t.Errorf("a running process without a pty: pty %v state %v", got.GetPty(), got.GetState())
	}
}

// procState is a process's state letter in /proc, or "" once it is gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2 : i+3]
	}
	return ""
}

// SignalProcess "sends a signal to the process's group: every process
// starts as the leader of its own session and group, so its children
// receive it too."
func TestASignalReachesTheProcessesChildren(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "sleep 60 & echo $!; wait"}})
	id := p.GetProcessId()
	killAtEnd(t, c, id)
	var child int
	testenv.WaitFor(t, "the child's pid", func() bool {
		chunks, _, err := events(c, &ctrlv1.StreamProcessOutputRequest{ProcessId: id, Snapshot: true})
		line, ok := strings.CutSuffix(joined(chunks, stdout), "\n")
		child, _ = strconv.Atoi(line)
		return err == nil && ok && child > 0
	})
	if s := procState(child); s == "" || s == "Z" {
		t.Fatalf("the child %d before the signal: state %q", child, s)
	}
	sid, _ := unix.Getsid(child)
	pgid, _ := unix.Getpgid(child)
	if sid != int(p.GetPid()) || pgid != int(p.GetPid()) {
		t.Errorf("the child's session %d and group %d, want the process's pid %d", sid, pgid, p.GetPid())
	}
	signalProcess(t, c, id, ctrlv1.ProcessSignal_PROCESS_SIGNAL_SIGTERM)
	if exit := waitProcess(t, c, id); exit.GetSignal() != int32(unix.SIGTERM) {
		t.Errorf("the shell: %v, want SIGTERM", exit)
	}
	// Orphaned, the child is reaped by whoever inherits it, or left a
	// zombie: either way it ended.
	testenv.WaitFor(t, fmt.Sprintf("the child %d to end by the group's SIGTERM", child), func() bool {
		s := procState(child)
		return s == "" || s == "Z"
	})
}

// ListProcesses "lists the processes started through this API in the
// current execution, oldest first. It does not list every process in the
// guest (children, daemons)."
func TestListProcessesIsOldestFirstWithoutChildren(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	var ids []string
	for range 4 {
		p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "sleep 60 & echo child; wait"}})
		killAtEnd(t, c, p.GetProcessId())
		ids = append(ids, p.GetProcessId())
	}
	for _, id := range ids {
		waitOutput(t, c, id, uint64(len("child\n")), 0)
	}
	res, err := c.ListProcesses(context.Background(), connect.NewRequest(&guestv1.ListProcessesRequest{Request: &ctrlv1.ListProcessesRequest{}}))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, p := range res.Msg.GetResponse().GetProcesses() {
		listed = append(listed, p.GetProcessId())
	}
	if !slices.Equal(listed, ids) {
		t.Errorf("listed %v, want the four started, oldest first: %v (their children are not listed)", listed, ids)
	}
}

// ProcessSpec.env "is added to the user's login environment (HOME, USER,
// LOGNAME, SHELL, PATH, and TERM=xterm-256color with a pty); an entry here
// wins"; argv "An argv[0] without a slash is looked up in the PATH of the
// resulting environment"; Process.env_keys "are the keys of
// ProcessSpec.env, sorted".
func TestTheLoginEnvironment(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	bin := sharedTempDir(t)
	script := "#!/bin/sh\necho \"HOME=$HOME USER=$USER LOGNAME=$LOGNAME SHELL=$SHELL TERM=${TERM-unset} EXTRA=${EXTRA-unset}\"\n"
	if err := os.WriteFile(filepath.Join(bin, "show-env"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := c.StartProcess(context.Background(), connect.NewRequest(&guestv1.StartProcessRequest{ProcessId: "no-path",
		Spec: &ctrlv1.ProcessSpec{Argv: []string{"show-env"}}}))
	wantRefusal(t, "show-env without its directory in PATH", err, connect.CodeFailedPrecondition, ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, "spec.argv")

	rootHome, rootShell := passwd(t, "root")
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"show-env"},
		Env: map[string]string{"PATH": bin, "LOGNAME": "chosen", "EXTRA": "x"}})
	want := fmt.Sprintf("HOME=%s USER=root LOGNAME=chosen SHELL=%s TERM=unset EXTRA=x\n", rootHome, rootShell)
	if out, _, _ := output(t, c, p.GetProcessId()); out != want {
		t.Errorf("root's environment: %q, want %q", out, want)
	}
	if keys := getProcess(t, c, p.GetProcessId()).GetEnvKeys(); !slices.Equal(keys, []string{"EXTRA", "LOGNAME", "PATH"}) {
		t.Errorf("env_keys %v, want EXTRA LOGNAME PATH", keys)
	}

	nobodyHome, nobodyShell := passwd(t, "nobody")
	p = startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"show-env"}, User: "nobody", Cwd: "/",
		Env: map[string]string{"PATH": bin}, Pty: &ctrlv1.ProcessPty{Rows: 24, Cols: 200}})
	want = fmt.Sprintf("HOME=%s USER=nobody LOGNAME=nobody SHELL=%s TERM=xterm-256color EXTRA=unset\r\n", nobodyHome, nobodyShell)
	if out, _, _ := output(t, c, p.GetProcessId()); out != want {
		t.Errorf("nobody's environment on a pty: %q, want %q", out, want)
	}
}

// ProcessSpec.cwd: "Empty selects the user's home directory, or / when it
// has none."
func TestTheDefaultCwdIsTheHome(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	rootHome, _ := passwd(t, "root")
	nobodyHome, _ := passwd(t, "nobody")
	if fi, err := os.Stat(rootHome); err != nil || !fi.IsDir() {
		t.Fatalf("root's home %s: %v: the test needs it", rootHome, err)
	}
	if _, err := os.Stat(nobodyHome); !os.IsNotExist(err) {
		t.Fatalf("nobody's home %s exists (%v): the test needs a user without one", nobodyHome, err)
	}
	for user, want := range map[string]string{"root": rootHome, "nobody": "/"} {
		p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"pwd"}, User: user})
		if out, _, _ := output(t, c, p.GetProcessId()); out != want+"\n" {
			t.Errorf("%s's default cwd: %q, want %s", user, out, want)
		}
		if got := getProcess(t, c, p.GetProcessId()).GetCwd(); got != want {
			t.Errorf("%s's Process.cwd %q, want %s", user, got, want)
		}
	}
}

// ProcessOutputChunk: "The guest keeps at least the last 1 MiB of each
// stream; older bytes are dropped ... A chunk whose offset is above the
// offset asked for means the bytes in between were dropped"; data "is at
// most 64 KiB".
func TestOutputPastTheWindowIsDroppedAndSaysSo(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	const produced = 3_000_000
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"head", "-c", strconv.Itoa(produced), "/dev/zero"}})
	waitProcess(t, c, p.GetProcessId())
	chunks, exit, err := events(c, &ctrlv1.StreamProcessOutputRequest{ProcessId: p.GetProcessId()})
	if err != nil || exit == nil || len(chunks) == 0 {
		t.Fatalf("%d chunks, exit %v, %v", len(chunks), exit, err)
	}
	first := chunks[0].GetOffset()
	if first == 0 || produced-first < 1<<20 {
		t.Errorf("asked from 0 of %d bytes, the first chunk is at %d: want above 0 (bytes dropped) with at least 1 MiB kept", produced, first)
	}
	next := first
	for _, ch := range chunks {
		if len(ch.GetData()) > 64<<10 || ch.GetOffset() != next {
			t.Fatalf("chunk at %d of %d bytes, want at most 64 KiB at %d", ch.GetOffset(), len(ch.GetData()), next)
		}
		next += uint64(len(ch.GetData()))
	}
	if next != produced {
		t.Errorf("the chunks end at %d, want %d", next, produced)
	}
}

// ProcessExitStatus: core_dumped; "ended_at is on the clock of the guest's
// host" (here, the test's own).
func TestExitStatusCoreDumpedAndEndedAt(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	before := time.Now()
	dumps := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "ulimit -c unlimited; kill -QUIT $$"}, Cwd: t.TempDir()})
	plain := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", "exit 0"}})
	dumped, exited := waitProcess(t, c, dumps.GetProcessId()), waitProcess(t, c, plain.GetProcessId())
	after := time.Now()
	if dumped.GetCause() != ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_SIGNALED || dumped.GetSignal() != int32(unix.SIGQUIT) || !dumped.GetCoreDumped() {
		t.Errorf("SIGQUIT with no core limit: %v, want SIGNALED by 3 with core_dumped", dumped)
	}
	if exited.GetCoreDumped() {
		t.Errorf("exit 0: %v, want no core_dumped", exited)
	}
	for _, pair := range []struct {
		start *ctrlv1.StartProcessResponse
		exit  *ctrlv1.ProcessExitStatus
	}{{dumps, dumped}, {plain, exited}} {
		end := pair.exit.GetEndedAt().AsTime()
		if end.Before(pair.start.GetStartedAt().AsTime()) || end.Before(before) || end.After(after) {
			t.Errorf("ended_at %v, started_at %v, want between %v and %v", end, pair.start.GetStartedAt().AsTime(), before, after)
		}
	}
}

// ProcessEndCause SIGNALED: "a signal ended it (SignalProcess, another
// guest process, or a graceful stop's SIGTERM)". A graceful stop sends
// SIGTERM with kill(2) from PID 1, outside the API; a test cannot be PID
// 1, so another process sends it the same way.
func TestASignalFromOutsideTheAPIIsSignaled(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sleep", "60"}})
	killAtEnd(t, c, p.GetProcessId())
	if err := unix.Kill(int(p.GetPid()), unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exit := waitProcess(t, c, p.GetProcessId()); exit.GetCause() != ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_SIGNALED || exit.GetSignal() != int32(unix.SIGTERM) || exit.GetExitCode() != 0 {
		t.Errorf("sleep ended by another process's SIGTERM: %v, want SIGNALED, signal 15, exit_code 0", exit)
	}
}

// ProcessKeepalive "is sent after 15 seconds without another event".
func TestAKeepaliveAfterFifteenIdleSeconds(t *testing.T) {
	t.Parallel() // it waits 15 s
	c := serve(t, &guest.Agent{Reaper: reaper})
	p := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sleep", "60"}})
	killAtEnd(t, c, p.GetProcessId())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	begun := time.Now()
	s, err := c.StreamProcessOutput(ctx, connect.NewRequest(&guestv1.StreamProcessOutputRequest{Request: &ctrlv1.StreamProcessOutputRequest{ProcessId: p.GetProcessId()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Receive() {
		t.Fatalf("the idle stream ended: %v", s.Err())
	}
	if s.Msg().GetResponse().GetKeepalive() == nil || time.Since(begun) < 15*time.Second {
		t.Errorf("first event of an idle stream after %v: %v, want a keepalive after 15 s", time.Since(begun), s.Msg().GetResponse())
	}
}

// ListProcessesRequest: "include_exited also lists ended processes."
func TestIncludeExitedListsEndedProcesses(t *testing.T) {
	c := serve(t, &guest.Agent{Reaper: reaper})
	ended := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"true"}})
	waitProcess(t, c, ended.GetProcessId())
	running := startProcess(t, c, "", &ctrlv1.ProcessSpec{Argv: []string{"sleep", "60"}})
	killAtEnd(t, c, running.GetProcessId())
	list := func(includeExited bool) map[string]ctrlv1.ProcessState {
		res, err := c.ListProcesses(context.Background(), connect.NewRequest(&guestv1.ListProcessesRequest{Request: &ctrlv1.ListProcessesRequest{IncludeExited: includeExited}}))
		if err != nil {
			t.Fatal(err)
		}
		states := map[string]ctrlv1.ProcessState{}
		for _, p := range res.Msg.GetResponse().GetProcesses() {
			states[p.GetProcessId()] = p.GetState()
		}
		return states
	}
	if got := list(true); len(got) != 2 || got[ended.GetProcessId()] != ctrlv1.ProcessState_PROCESS_STATE_EXITED || got[running.GetProcessId()] != ctrlv1.ProcessState_PROCESS_STATE_RUNNING {
		t.Errorf("include_exited: %v, want the ended process EXITED and the running one", got)
	}
	if got := list(false); len(got) != 1 || got[running.GetProcessId()] != ctrlv1.ProcessState_PROCESS_STATE_RUNNING {
		t.Errorf("without include_exited: %v, want only the running process", got)
	}
}
