package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/store"
)

// startPiped starts cmd with its stdout on a pipe and its stderr kept; the
// test's end kills it.
func startPiped(t *testing.T, cmd *exec.Cmd) (io.ReadCloser, *strings.Builder) {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return stdout, stderr
}

// startExec runs `kibotos workspace exec` and waits until the guest
// process printed line, so that a signal sent after finds it running.
func (d *dev) startExec(t *testing.T, line string, args ...string) (*exec.Cmd, *strings.Builder, <-chan string) {
	t.Helper()
	cmd := d.command(append([]string{"workspace", "exec"}, args...)...)
	stdout, stderr := startPiped(t, cmd)
	seen, rest := make(chan bool, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == line {
				seen <- true
				b, _ := io.ReadAll(stdout)
				rest <- string(b)
				return
			}
		}
		seen <- false
		rest <- ""
	}()
	select {
	case ok := <-seen:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("exec %v ended before printing %q: %s", args, line, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("exec %v did not print %q: %s", args, line, stderr.String())
	}
	return cmd, stderr, rest
}

// exitOf waits for cmd and returns its exit code.
func exitOf(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// The CLI over the whole Workspace API on one real VM: create with every
// flag a person sets, Ctrl-C on exec reaching the guest process (or leaving
// it with --detach), background processes, update, volume resize, and the
// API's ErrorDetail in its errors. Every command is read back with -o json.
func TestCLICoversTheWorkspaceAPIOnARealVM(t *testing.T) {
	d := startDev(t)
	var revisions operatorv1.ListTemplateRevisionsResponse
	d.kibotosJSON(t, &revisions, "template", "get", "busybox")
	ref := revisions.GetRevisions()[0].GetRef()

	var vol ctrlv1.CreateVolumeResponse
	d.kibotosJSON(t, &vol, "volume", "create", "--capacity", "64Mi")
	volID := vol.GetVolume().GetVolumeId()
	if got := vol.GetVolume().GetSpec().GetCapacityBytes(); got != 64<<20 {
		t.Errorf("volume create --capacity 64Mi: %d bytes", got)
	}
	waitUntil(t, "the Volume AVAILABLE", time.Minute, func() bool {
		var got ctrlv1.GetVolumeResponse
		d.kibotosJSON(t, &got, "volume", "get", volID)
		return got.GetVolume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
	})

	var created ctrlv1.GetWorkspaceResponse
	// --node: CreateWorkspaceOnNode through the operator endpoint, followed
	// as any create through the Workspace endpoint.
	createCmd := d.command("workspace", "create", "--node", "dev", "--template", ref.GetTemplate()+"@"+ref.GetRevision(),
		"--memory", "256Mi", "--disk", "1G", "--volume", volID, "--mount-path", "/work",
		"--label", "team=a", "--annotation", "note=x", "--expire-in", "2h", "--expire-action", "delete", "--network", "deny-all", "-o", "json")
	var createErr strings.Builder
	createCmd.Stderr = &createErr
	out, err := createCmd.Output()
	if err != nil || protojson.Unmarshal(out, &created) != nil {
		t.Fatalf("workspace create: %v: %s%s", err, out, createErr.String())
	}
	// Its stages, each with the time so far, on stderr. (The CLI's follow
	// shows where the command is every half second, so a stage shorter
	// than that, placing on a fast machine, may not show; booting shows only when it outlasts the
	// delivery's last report by two seconds. The delivery of the template
	// takes seconds.)
	for _, want := range []string{"delivering the template (distributing) ", "create " + created.GetWorkspace().GetWorkspaceId() + ": done in "} {
		if !strings.Contains(createErr.String(), want) {
			t.Errorf("create's progress lacks %q:\n%s", want, createErr.String())
		}
	}
	w := created.GetWorkspace()
	id := w.GetWorkspaceId()
	spec := w.GetSpec()
	if spec.GetTemplate().GetRevision() != ref.GetRevision() || spec.GetResources().GetMemoryBytes() != 256<<20 ||
		spec.GetResources().GetWritableLayerCapacityBytes() != 1<<30 || spec.GetVolume().GetVolumeId() != volID ||
		spec.GetVolume().GetMountPath() != "/work" || w.GetLabels()["team"] != "a" || w.GetAnnotations()["note"] != "x" ||
		w.GetExpiration().GetPolicy().GetAction() != ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_DELETE ||
		spec.GetNetworkPolicy().GetMode() != ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL {
		t.Errorf("workspace create with every flag: %v", w)
	}
	if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
		t.Fatalf("workspace create followed to %v", w.GetState())
	}
	// node placements: where it executes, from ctrl's records.
	var placed operatorv1.ListWorkspacePlacementsResponse
	d.kibotosJSON(t, &placed, "node", "placements", "dev")
	if p := placed.GetWorkspacePlacements(); len(p) != 1 || p[0].GetWorkspaceId() != id || p[0].GetNodeId() != "dev" ||
		p[0].GetWorkspaceState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || p[0].GetAllocation().GetMemoryBytes() != 256<<20 {
		t.Errorf("node placements dev: %v", p)
	}
	if out, code := d.kibotos(t, "node", "placements", "--workspace", id, "-q"); code != 0 || out != id+"\n" {
		t.Errorf("node placements --workspace: exit %d, %q", code, out)
	}
	// The table's EXPIRES: the action and the deadline in UTC, RFC 3339,
	// as every other table writes a time.
	deadline := w.GetExpiration().GetPolicy().GetDeadline().AsTime().UTC().Format(time.RFC3339)
	if out, code := d.kibotos(t, "workspace", "get", id); code != 0 || !strings.Contains(out, "delete at "+deadline) {
		t.Errorf("workspace get: exit %d, want EXPIRES \"delete at %s\":\n%s", code, deadline, out)
	}

	// exec -o json: the stream's events, one message a line, then its status.
	out, err = d.command("workspace", "exec", "-o", "json", id, "--", "sh", "-c", "echo hi; exit 4").Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
		t.Errorf("exec -o json of exit 4: %v", err)
	}
	var events []*ctrlv1.ExecProcessResponse
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		ev := &ctrlv1.ExecProcessResponse{}
		if err := protojson.Unmarshal([]byte(line), ev); err != nil {
			t.Fatalf("exec -o json line %q: %v", line, err)
		}
		events = append(events, ev)
	}
	if len(events) < 3 || events[0].GetStarted() == nil || string(events[1].GetOutput().GetData()) != "hi\n" || events[len(events)-1].GetExit().GetExitCode() != 4 {
		t.Errorf("exec -o json events: %v", events)
	}

	// exec -it with a pipe for input: -t is dropped with a warning (a pty
	// would echo the input and could miss its EOF) and the shell reads the
	// pipe to its end.
	piped := d.command("workspace", "exec", "-it", id, "--", "sh")
	piped.Stdin = strings.NewReader("echo piped\nexit 3\n")
	var pipedErr strings.Builder
	piped.Stderr = &pipedErr
	out, err = piped.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 || string(out) != "piped\n" ||
		!strings.Contains(pipedErr.String(), "the input is not a terminal: running without one (-t ignored)") {
		t.Errorf("exec -it with piped input: %v, stdout %q, stderr %s", err, out, pipedErr.String())
	}

	// Ctrl-C: the guest process gets SIGINT (its trap runs and sets the
	// status), and exec ends with the stream, exiting with that status.
	cmd, stderr, rest := d.startExec(t, "ready", id, "--", "sh", "-c", `trap 'echo got-int; exit 7' INT; echo ready; while :; do sleep 1; done`)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, cmd); code != 7 || !strings.Contains(<-rest, "got-int") {
		t.Errorf("exec after Ctrl-C: exit %d, stderr %s (want 7 from the guest's trap)", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "SIGINT sent") {
		t.Errorf("exec after Ctrl-C says %q", stderr.String())
	}

	// --detach: Ctrl-C leaves the process running; process kill ends it.
	cmd, stderr, _ = d.startExec(t, "ready", "--detach", id, "--", "sh", "-c", "echo ready; exec sleep 1000")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, cmd); code != 0 || !strings.Contains(stderr.String(), "detached") {
		t.Errorf("exec --detach after Ctrl-C: exit %d: %s", code, stderr.String())
	}
	var running ctrlv1.ListProcessesResponse
	d.kibotosJSON(t, &running, "workspace", "process", "list", id)
	var sleeper string
	for _, p := range running.GetProcesses() {
		if len(p.GetArgv()) == 3 && strings.Contains(p.GetArgv()[2], "sleep 1000") && p.GetState() == ctrlv1.ProcessState_PROCESS_STATE_RUNNING {
			sleeper = p.GetProcessId()
		}
	}
	if sleeper == "" {
		t.Fatalf("process list after a detached Ctrl-C: %v", running.GetProcesses())
	}
	var killed ctrlv1.SignalProcessResponse
	d.kibotosJSON(t, &killed, "workspace", "process", "kill", id, sleeper, "--signal", "KILL")
	if !killed.GetDelivered() {
		t.Errorf("process kill: %v", &killed)
	}
	if out, code := d.kibotos(t, "workspace", "process", "wait", id, sleeper); code != 128+9 {
		t.Errorf("process wait of a killed process: exit %d: %s", code, out)
	}

	checkTerminalResize(t, d, id)

	// A background process: start returns its id, wait its status.
	var started ctrlv1.StartProcessResponse
	out, err = d.command("workspace", "process", "start", "-o", "json", id, "--", "sh", "-c", "echo out > /work/bg; echo to-stdout; echo to-stderr >&2; exit 3").Output()
	if err != nil || protojson.Unmarshal(out, &started) != nil || started.GetProcessId() == "" {
		t.Fatalf("process start -o json: %v: %s", err, out)
	}
	cmdWait := d.command("workspace", "process", "wait", id, started.GetProcessId(), "-o", "json")
	out, _ = cmdWait.Output()
	var waited ctrlv1.WaitProcessResponse
	if cmdWait.ProcessState.ExitCode() != 3 || protojson.Unmarshal(out, &waited) != nil || waited.GetExit().GetExitCode() != 3 {
		t.Errorf("process wait -o json: exit %d: %s", cmdWait.ProcessState.ExitCode(), out)
	}
	// logs: its output, again after it ended; -f exits with its status.
	logs := d.command("workspace", "process", "logs", "-f", id, started.GetProcessId())
	var logsErr bytes.Buffer
	logs.Stderr = &logsErr
	out, _ = logs.Output()
	if logs.ProcessState.ExitCode() != 3 || string(out) != "to-stdout\n" || logsErr.String() != "to-stderr\n" {
		t.Errorf("process logs -f: exit %d, stdout %q, stderr %q; want 3 and each stream", logs.ProcessState.ExitCode(), out, logsErr.String())
	}
	var got ctrlv1.GetProcessResponse
	d.kibotosJSON(t, &got, "workspace", "process", "get", id, started.GetProcessId())
	if got.GetProcess().GetState() != ctrlv1.ProcessState_PROCESS_STATE_EXITED || got.GetProcess().GetExit().GetExitCode() != 3 {
		t.Errorf("process get: %v", got.GetProcess())
	}
	var all ctrlv1.ListProcessesResponse
	d.kibotosJSON(t, &all, "workspace", "process", "list", id, "--all")
	if len(all.GetProcesses()) < 3 {
		t.Errorf("process list --all: %d processes, want the trapped, the killed and the background one", len(all.GetProcesses()))
	}

	checkCopies(t, d, id)
	checkFiles(t, d, id)
	checkSessions(t, d, id)

	// update: each change with the revision it reads; memory and the
	// binding once no execution is held.
	// stop --no-wait says which command to follow; wait follows it to its
	// end, command reads it (GetWorkspaceCommand).
	if out := d.mustKibotos(t, "workspace", "stop", id, "--no-wait", "--command-id", "cli-stop-1"); !strings.Contains(out,
		"admitted: the stop of "+id+" is command cli-stop-1; kibotos workspace wait "+id+" cli-stop-1 follows it") {
		t.Errorf("stop --no-wait does not say how to follow it:\n%s", out)
	}
	if out := d.mustKibotos(t, "workspace", "wait", id, "cli-stop-1"); !strings.Contains(out, "stop "+id+": done in") || !strings.Contains(out, "STOPPED") {
		t.Errorf("workspace wait of the stop:\n%s", out)
	}
	if out := d.mustKibotos(t, "workspace", "command", id, "cli-stop-1", "--no-headers"); !strings.HasPrefix(strings.Join(strings.Fields(out), " "), "cli-stop-1 stop SUCCEEDED") {
		t.Errorf("workspace command of the stop: %q", out)
	}
	if out, code := d.kibotos(t, "workspace", "wait", id, "no-such-command"); code != 1 || !strings.Contains(out, "not_found") {
		t.Errorf("workspace wait of an unknown command: exit %d: %s", code, out)
	}
	if out, code := d.kibotos(t, "node", "placements", "dev", "-q"); code != 0 || out != "" {
		t.Errorf("node placements of dev once the Workspace stopped: exit %d, %q", code, out)
	}
	var updated ctrlv1.Workspace
	d.kibotosJSON(t, &updated, "workspace", "update", id, "--memory", "384Mi", "--disk", "2G",
		"--label", "team-", "--label", "env=dev", "--annotation", "note=y", "--expire-in", "3h", "--release-volume",
		"--network", "public-internet", "--deny", "10.0.0.0/8")
	if updated.GetSpec().GetResources().GetMemoryBytes() != 384<<20 || updated.GetSpec().GetResources().GetWritableLayerCapacityBytes() != 2<<30 ||
		len(updated.GetLabels()) != 1 || updated.GetLabels()["env"] != "dev" || updated.GetAnnotations()["note"] != "y" ||
		updated.GetExpiration().GetPolicy().GetAction() != ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP ||
		updated.GetSpec().GetVolume().GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE ||
		updated.GetSpec().GetNetworkPolicy().GetMode() != ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET ||
		strings.Join(updated.GetSpec().GetNetworkPolicy().GetDeny(), ",") != "10.0.0.0/8" {
		t.Errorf("workspace update: %v", &updated)
	}
	d.kibotosJSON(t, &updated, "workspace", "update", id, "--no-expire", "--volume", volID)
	if updated.GetExpiration().GetPolicy() != nil || updated.GetSpec().GetVolume().GetVolumeId() != volID {
		t.Errorf("workspace update --no-expire --volume: %v", &updated)
	}
	// The API's refusal shows its ErrorDetail: the field, the stage.
	if out, code := d.kibotos(t, "workspace", "update", id, "--memory", "100Mi"); code != 1 ||
		!strings.Contains(out, "invalid_argument") || !strings.Contains(out, "field: memory_bytes") {
		t.Errorf("workspace update --memory 100Mi: exit %d: %s", code, out)
	}

	// A refusal that carries the observed record shows it.
	if out, code := d.kibotos(t, "volume", "delete", volID); code != 1 || !strings.Contains(out, "failed_precondition") ||
		!strings.Contains(out, "\n  observed volume: "+volID+" ") {
		t.Errorf("volume delete of a bound Volume: exit %d: %s", code, out)
	}

	// volume resize takes units; the Volume grows once no execution holds it.
	d.mustKibotos(t, "workspace", "update", id, "--release-volume")
	var resized ctrlv1.ResizeVolumeResponse
	d.kibotosJSON(t, &resized, "volume", "resize", volID, "128Mi")
	if resized.GetVolume().GetSpec().GetCapacityBytes() != 128<<20 {
		t.Errorf("volume resize 128Mi: %v", resized.GetVolume())
	}

	d.mustKibotos(t, "workspace", "delete", id)
}

// checkCopies: cp as cp, scp and docker cp behave: a trailing slash means
// into that directory, -r copies trees, errors name the paths as given;
// -o json says where a copy went and what it wrote, -o name where.
// checkFiles: workspace files reaches FileService with no process in the
// guest: mkdir -p -m, ls --depth, stat, mv seen by a watch started before
// it, rm refusing a full directory without -r, rm -r, rm -f of nothing.
func checkFiles(t *testing.T, d *dev, id string) {
	t.Helper()
	if out := d.mustKibotos(t, "workspace", "files", "mkdir", "-p", "-m", "700", id, "/work/fs/a/b"); !strings.Contains(out, "/work/fs/a/b  drwx------") {
		t.Errorf("files mkdir -p -m 700: %q", out)
	}
	out := d.mustKibotos(t, "workspace", "files", "ls", "--depth", "2", "--no-headers", "-q", id, "/work/fs")
	if out != "/work/fs/a\n/work/fs/a/b\n" {
		t.Errorf("files ls --depth 2 -q: %q", out)
	}

	watch := d.command("workspace", "files", "watch", "-o", "json", id, "/work/fs")
	stdout, _ := startPiped(t, watch)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(what string) string {
		select {
		case l := <-lines:
			return l
		case <-time.After(time.Minute):
			t.Fatalf("files watch: no %s within a minute", what)
			return ""
		}
	}
	if l := next("started"); !strings.Contains(l, `"started"`) {
		t.Fatalf("files watch's first line: %q, want started", l)
	}
	d.mustKibotos(t, "workspace", "files", "mv", id, "/work/fs/a", "/work/fs/c")
	var seen ctrlv1.WatchDirectoryResponse
	if l := next("event"); protojson.Unmarshal([]byte(l), &seen) != nil || seen.GetEvent().GetKind() != ctrlv1.FileEventKind_FILE_EVENT_KIND_RENAMED ||
		seen.GetEvent().GetPath() != "/work/fs/a" || seen.GetEvent().GetNewPath() != "/work/fs/c" {
		t.Errorf("files watch after mv: %q, want /work/fs/a RENAMED to /work/fs/c", l)
	}
	_ = watch.Process.Kill()
	_ = watch.Wait()

	var st ctrlv1.StatFileResponse
	d.kibotosJSON(t, &st, "workspace", "files", "stat", id, "/work/fs/c")
	if st.GetInfo().GetType() != ctrlv1.FileType_FILE_TYPE_DIRECTORY || st.GetInfo().GetMode() != 0o700 {
		t.Errorf("files stat of the moved directory: %v", st.GetInfo())
	}
	if out, code := d.kibotos(t, "workspace", "files", "rm", id, "/work/fs/c"); code != 1 || !strings.Contains(out, "failed_precondition") {
		t.Errorf("files rm of a full directory without -r: exit %d: %s", code, out)
	}
	if out := d.mustKibotos(t, "workspace", "files", "rm", "-r", id, "/work/fs/c"); !strings.Contains(out, "/work/fs/c  true") {
		t.Errorf("files rm -r: %q", out)
	}
	if out := d.mustKibotos(t, "workspace", "files", "rm", "-f", id, "/work/fs/c"); !strings.Contains(out, "/work/fs/c  false") {
		t.Errorf("files rm -f of a missing path: %q", out)
	}
}

// checkSessions: workspace session issue hands out a token that works as
// KIBOTOS_TOKEN for its scopes only; rotate gives a new one; revoke ends
// every token of it.
func checkSessions(t *testing.T, d *dev, id string) {
	t.Helper()
	var issued ctrlv1.IssueDataPlaneSessionResponse
	d.kibotosJSON(t, &issued, "workspace", "session", "issue", id, "--scope", "file", "--ttl", "5m")
	s := issued.GetSession()
	if s.GetToken() == "" || len(s.GetScopes()) != 1 || s.GetScopes()[0] != ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_FILE {
		t.Fatalf("session issue --scope file: %v", s)
	}
	as := func(token string, args ...string) (string, int) {
		cmd := d.command(args...)
		cmd.Env = append(cmd.Env, "KIBOTOS_TOKEN="+token, "KIBOTOS_WORKSPACE_ENDPOINT="+s.GetEndpoint())
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		return string(out), 0
	}
	if out, code := as(s.GetToken(), "workspace", "files", "stat", id, "/work"); code != 0 {
		t.Errorf("files stat with a file session's token: exit %d: %s", code, out)
	}
	if out, code := as(s.GetToken(), "workspace", "exec", id, "--", "true"); code == 0 || !strings.Contains(out, "permission_denied") {
		t.Errorf("exec with a file session's token: exit %d: %s", code, out)
	}
	var rotated ctrlv1.RotateDataPlaneSessionResponse
	d.kibotosJSON(t, &rotated, "workspace", "session", "rotate", id, s.GetSessionId())
	if tok := rotated.GetSession().GetToken(); tok == "" || tok == s.GetToken() {
		t.Fatalf("session rotate: %v", rotated.GetSession())
	} else if out, code := as(tok, "workspace", "files", "stat", id, "/work"); code != 0 {
		t.Errorf("files stat with the rotated token: exit %d: %s", code, out)
	}
	d.mustKibotos(t, "workspace", "session", "revoke", id, s.GetSessionId())
	for _, tok := range []string{s.GetToken(), rotated.GetSession().GetToken()} {
		if out, code := as(tok, "workspace", "files", "stat", id, "/work"); code == 0 || !strings.Contains(out, "SESSION_REVOKED") {
			t.Errorf("files stat with a revoked session's token: exit %d: %s", code, out)
		}
	}
}

func checkCopies(t *testing.T, d *dev, id string) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	for name, content := range map[string]string{"a.txt": "a\n", "sub/b.txt": "b\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d.mustKibotos(t, "workspace", "cp", filepath.Join(src, "a.txt"), id+":/work/")
	if out, code := d.kibotos(t, "workspace", "cp", filepath.Join(src, "a.txt"), id+":/work/none/"); code != 1 || !strings.Contains(out, id+":/work/none/: no such directory in the guest") {
		t.Errorf("cp into a missing directory/: exit %d: %s", code, out)
	}
	if out, code := d.kibotos(t, "workspace", "cp", src, id+":/work"); code != 1 || !strings.Contains(out, "is a directory: copy it with -r") {
		t.Errorf("cp of a directory without -r: exit %d: %s", code, out)
	}
	var copied structpb.Struct
	d.kibotosJSON(t, &copied, "workspace", "cp", "-r", src, id+":/work") // into /work: /work/src
	if want := map[string]any{"source": src, "destination": id + ":/work/src", "files": 2.0, "bytes": 4.0}; !reflect.DeepEqual(copied.AsMap(), want) {
		t.Errorf("cp -r -o json: %v, want %v", copied.AsMap(), want)
	}
	d.mustKibotos(t, "workspace", "cp", "-r", src, id+":/work/copy") // missing: becomes the copy
	if out := d.mustKibotos(t, "workspace", "exec", id, "--", "cat", "/work/a.txt", "/work/src/a.txt", "/work/src/sub/b.txt", "/work/copy/sub/b.txt"); out != "a\na\nb\nb\n" {
		t.Errorf("the guest after the copies: %q", out)
	}
	back := filepath.Join(t.TempDir(), "back")
	if out := d.mustKibotos(t, "workspace", "cp", "-r", id+":/work/src", back, "-o", "name"); out != back+"\n" {
		t.Errorf("cp -r -o name out of the guest: %q", out)
	}
	if out, code := d.kibotos(t, "workspace", "cp", id+":/work/a.txt", "-", "-o", "json"); code != 1 || !strings.Contains(out, "-o json: standard output carries the file") {
		t.Errorf("cp to standard output with -o json: exit %d: %s", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(back, "sub", "b.txt")); err != nil || string(b) != "b\n" {
		t.Errorf("cp -r out of the guest: %q %v", b, err)
	}
	missing := filepath.Join(t.TempDir(), "no", "such", "a.txt")
	if out, code := d.kibotos(t, "workspace", "cp", id+":/work/a.txt", missing); code != 1 ||
		!strings.Contains(out, missing+": no such directory "+filepath.Dir(missing)) || strings.Contains(out, ".kibotos-") {
		t.Errorf("cp to a missing local directory: exit %d: %s", code, out)
	}
}

// kibotos dev with a state directory of its own says where its endpoints
// file is and what to run next, and on Ctrl-C that the VMs keep running
// and how to stop them, with that state directory. The API keys it prints
// once, marked, at the start that made them; a later start prints where
// they are and not the keys.
func TestDevSaysWhereItsEndpointsAreAndWhatCtrlCLeaves(t *testing.T) {
	home, state := t.TempDir(), filepath.Join(t.TempDir(), "elsewhere")
	endpoints := filepath.Join(state, "endpoints.env")
	first := runDevUntilCtrlC(t, home, state)
	for _, want := range []string{
		"endpoints file: " + endpoints + "\n",
		"in a shell, for curl or grpcurl: . " + endpoints + "\n",
		"client configuration: " + filepath.Join(home, "config.env"),
		" workspace create\n",
		"API keys (shown once; also in " + endpoints + ", mode 0600):\n",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("dev's start lacks %q:\n%s", want, first)
		}
	}
	env, err := clientconfig.ReadEnvFile(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{env[clientconfig.EnvToken], env[clientconfig.EnvOperatorToken]}
	for _, key := range keys {
		if key == "" || !strings.Contains(first, key) {
			t.Errorf("the first start does not show the key %q it made:\n%s", key, first)
		}
	}

	again := runDevUntilCtrlC(t, home, state)
	for _, key := range keys {
		if strings.Contains(again, key) {
			t.Errorf("a later start prints an API key:\n%s", again)
		}
	}
	if want := "API keys: in " + endpoints + " (mode 0600)\n"; !strings.Contains(again, want) || strings.Contains(again, "shown once") {
		t.Errorf("a later start does not say only where the keys are (%q):\n%s", want, again)
	}
	// Its node enrolled at the first start; the later one made no grant,
	// which would have lain unused and able to enroll for its hour.
	if grants := storedGrants(t, filepath.Join(state, "ctrl.db")); len(grants) != 1 ||
		grants[0].GetState() != operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_CONSUMED {
		t.Errorf("enrollment grants after two starts: %v, want the first start's, consumed", grants)
	}
}

// storedGrants are the enrollment grants in the SQLite database at path,
// read once no ctrl uses it.
func storedGrants(t *testing.T, path string) []*operatorv1.EnrollmentGrant {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var grants []*operatorv1.EnrollmentGrant
	if err := st.Tx(context.Background(), func(tx *store.Tx) error {
		grants, err = tx.ListGrants("", 100)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return grants
}

// runDevUntilCtrlC runs kibotos dev on state until it is ready, then
// interrupts it and checks what it says it leaves; it returns what dev
// printed on its standard output until ready.
func runDevUntilCtrlC(t *testing.T, home, state string) string {
	t.Helper()
	cmd := exec.Command(kibotosBin, "dev", "--state-dir", state,
		"--workspace-listen", "127.0.0.1:0", "--operator-listen", "127.0.0.1:0", "--node-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "KIBOTOS_HOME="+home)
	stdout, stderr := startPiped(t, cmd)
	var said strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "ready; Ctrl-C stops" {
		said.WriteString(sc.Text() + "\n")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, cmd); code != 0 {
		t.Errorf("dev after Ctrl-C: exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"VMs keep running", "kibotos dev --state-dir " + state, "kibotos workspace stop WORKSPACE_ID"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("dev's Ctrl-C message lacks %q:\n%s", want, stderr.String())
		}
	}
	return said.String()
}

// README's "The CLI" block, run as written (bin/kibotos being the binary
// under test) against a fresh kibotos dev, in a directory holding a copy of
// README.md, with no terminal.
func TestREADMEUsageWorksAsWritten(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n### The CLI\n")
	_, block, ok2 := strings.Cut(section, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`README has no "### The CLI" section with a sh block`)
	}
	d := startDev(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "README.md"), readme, 0o644); err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(block, "bin/kibotos ", kibotosBin+" ")
	cmd := exec.Command("bash", "-euo", "pipefail", "-xc", script)
	cmd.Env = d.command().Env
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README's CLI block: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "data-copy", "README.md")); err != nil || string(b) != string(readme) {
		t.Errorf("cp -r $ID:/data ./data-copy: %v", err)
	}
}

// checkTerminalResize: exec -t on a terminal starts the guest's pty at
// this terminal's size, and a resize here (SIGWINCH) reaches the guest.
func checkTerminalResize(t *testing.T, d *dev, id string) {
	t.Helper()
	ptmx, pts := openPty(t)
	setSize := func(rows, cols uint16) {
		if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
			t.Fatal(err)
		}
	}
	setSize(30, 100)
	cmd := d.command("workspace", "exec", "-t", id, "--", "sh", "-c", `stty size; trap 'stty size; exit 0' WINCH; while :; do sleep 1; done`)
	cmd.Stdin = pts
	stdout, stderr := startPiped(t, cmd)
	t.Cleanup(func() { _ = ptmx.Close() })
	lines := bufio.NewScanner(stdout)
	next := func() string {
		if !lines.Scan() {
			return ""
		}
		return strings.TrimSpace(lines.Text())
	}
	if got := next(); got != "30 100" {
		t.Fatalf("stty size in exec -t on a 30x100 terminal: %q (%s)", got, stderr.String())
	}
	setSize(40, 120)
	if err := cmd.Process.Signal(syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "40 120" {
		t.Errorf("stty size after the terminal became 40x120: %q (%s)", got, stderr.String())
	}
	if code := exitOf(t, cmd); code != 0 {
		t.Errorf("exec -t: exit %d: %s", code, stderr.String())
	}
}

// openPty opens a pseudo-terminal pair: the master and the terminal.
func openPty(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pts.Close() })
	return ptmx, pts
}
