package guest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
)

// Processes the agent keeps (ProcessService): each runs in a session of
// its own, its output kept in a window of the last retainBytes of each
// stream, so that a caller can come back to it (StreamProcessOutput from
// the offsets it has) and a slow caller never blocks it.

const (
	// retainBytes is how much of each output stream a process keeps.
	retainBytes = 1 << 20
	// outputChunkMax is the API's largest output chunk.
	outputChunkMax = 64 << 10
	// keptEnded is how many ended processes stay listed.
	keptEnded = 256
	// keepaliveEvery is the idle time after which a stream sends a
	// keepalive.
	keepaliveEvery = 15 * time.Second
	// maxInput is the largest SendProcessInput.
	maxInput = 1 << 20
	// ptyEOF is the terminal's EOF character (VEOF, ^D), which closes a
	// pty's input.
	ptyEOF = 0x04
)

// processTable holds the processes of this boot. Its zero value is ready.
type processTable struct {
	// starting is held from a start's replay lookup until its process is
	// in the table, so that concurrent replays of one command start one
	// process ("A replay of the command ... starts nothing").
	starting  sync.Mutex
	mu        sync.Mutex
	byID      map[string]*apiProcess
	byCommand map[string]*apiProcess
	order     []*apiProcess // by start
}

// apiProcess is one process started through the API.
type apiProcess struct {
	info  *ctrlv1.Process // immutable parts; state lives below
	start *ctrlv1.StartProcessResponse

	mu       sync.Mutex
	changed  chan struct{} // closed at every change
	out      [3]window     // by ctrlv1.ProcessOutputStream
	input    *os.File      // stdin pipe or pty master; nil without or closed
	pty      *os.File
	size     *ctrlv1.ProcessPty
	exit     *ctrlv1.ProcessExitStatus
	pgid     int
	inMu     sync.Mutex    // held by SendProcessInput (never with mu)
	inOffset atomic.Uint64 // stdin bytes written
}

// window is the retained tail of one output stream.
type window struct {
	buf   []byte
	start uint64 // offset of buf[0]
}

func (w *window) end() uint64 { return w.start + uint64(len(w.buf)) }

func (w *window) append(b []byte) {
	w.buf = append(w.buf, b...)
	if len(w.buf) > 2*retainBytes {
		drop := len(w.buf) - retainBytes
		w.buf = append([]byte(nil), w.buf[drop:]...)
		w.start += uint64(drop)
	}
}

// from returns up to outputChunkMax bytes at offset (or the earliest kept,
// when offset was dropped) and their offset.
func (w *window) from(offset uint64) ([]byte, uint64) {
	if offset < w.start {
		offset = w.start
	}
	if offset >= w.end() {
		return nil, offset
	}
	i := offset - w.start
	n := min(uint64(len(w.buf))-i, outputChunkMax)
	return slices.Clone(w.buf[i : i+n]), offset
}

// notify wakes every waiter; call with p.mu held.
func (p *apiProcess) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (t *processTable) get(id string) (*apiProcess, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.byID[id]; p != nil {
		return p, nil
	}
	return nil, codeErr(connect.CodeNotFound, ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, "process_id",
		"no process %q in this execution", id)
}

func (t *processTable) add(p *apiProcess) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID == nil {
		t.byID, t.byCommand = map[string]*apiProcess{}, map[string]*apiProcess{}
	}
	t.byID[p.info.GetProcessId()] = p
	if c := p.info.GetCommandId(); c != "" {
		t.byCommand[c] = p
	}
	t.order = append(t.order, p)
}

// prune forgets the ended processes beyond the keptEnded that ended last
// ("at least the 256 most recently ended"): by when they ended, not when
// they started, so that a long process is not forgotten as it ends.
func (t *processTable) prune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ended []*apiProcess
	for _, p := range t.order {
		if p.ended() {
			ended = append(ended, p)
		}
	}
	if len(ended) <= keptEnded {
		return
	}
	slices.SortStableFunc(ended, func(x, y *apiProcess) int { return y.endedAt().Compare(x.endedAt()) })
	forget := map[*apiProcess]bool{}
	for _, p := range ended[keptEnded:] {
		forget[p] = true
		delete(t.byID, p.info.GetProcessId())
		delete(t.byCommand, p.info.GetCommandId())
	}
	t.order = slices.DeleteFunc(t.order, func(p *apiProcess) bool { return forget[p] })
}

func (p *apiProcess) ended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit != nil
}

// endedAt is when p ended (zero while it runs).
func (p *apiProcess) endedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit == nil {
		return time.Time{}
	}
	return p.exit.GetEndedAt().AsTime()
}

// StartProcess starts a process the agent keeps.
func (a *Agent) StartProcess(_ context.Context, req *connect.Request[guestv1.StartProcessRequest]) (*connect.Response[guestv1.StartProcessResponse], error) {
	if a.Reaper == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this agent runs no processes"))
	}
	r := req.Msg
	a.procs.starting.Lock()
	defer a.procs.starting.Unlock()
	if c := r.GetCommandId(); c != "" {
		a.procs.mu.Lock()
		p := a.procs.byCommand[c]
		a.procs.mu.Unlock()
		if p != nil {
			return connect.NewResponse(&guestv1.StartProcessResponse{Response: p.start}), nil
		}
	}
	if r.GetProcessId() == "" {
		return nil, invalid("process_id", "is required")
	}
	if _, err := a.procs.get(r.GetProcessId()); err == nil {
		return nil, codeErr(connect.CodeAlreadyExists, ctrlv1.FailureReason_FAILURE_REASON_CONFLICT, "process_id", "process %q exists", r.GetProcessId())
	}
	spec := r.GetSpec()
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	u, err := a.lookupUser("spec.user", spec.GetUser())
	if err != nil {
		return nil, err
	}
	p, err := a.spawn(r, u)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&guestv1.StartProcessResponse{Response: p.start}), nil
}

// checkSpec checks what can be checked without the guest's files.
func checkSpec(s *ctrlv1.ProcessSpec) error {
	if len(s.GetArgv()) == 0 || s.GetArgv()[0] == "" {
		return invalid("spec.argv", "must name a program")
	}
	for _, arg := range s.GetArgv() {
		if strings.ContainsRune(arg, 0) {
			return invalid("spec.argv", "contains NUL")
		}
	}
	for k, v := range s.GetEnv() {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return invalid("spec.env", "key %q: keys are non-empty without '=', and nothing contains NUL", k)
		}
	}
	if c := s.GetCwd(); c != "" && (!strings.HasPrefix(c, "/") || path.Clean(c) != c || strings.ContainsRune(c, 0)) {
		return invalid("spec.cwd", "%q is not an absolute clean path", c)
	}
	if pty := s.GetPty(); pty != nil && !validSize(pty) {
		return invalid("spec.pty", "rows and cols are each 1 to 4096")
	}
	return nil
}

// validSize reports whether a terminal size is one the API allows.
func validSize(s *ctrlv1.ProcessPty) bool {
	return s.GetRows() >= 1 && s.GetRows() <= 4096 && s.GetCols() >= 1 && s.GetCols() <= 4096
}

// loginEnv is u's login environment with extra over it.
func loginEnv(u *User, pty bool, extra map[string]string) map[string]string {
	pathEnv := "/usr/local/bin:/usr/bin:/bin"
	if u.UID == 0 {
		pathEnv = BaseEnv["PATH"]
	}
	env := map[string]string{"HOME": u.Home, "USER": u.Name, "LOGNAME": u.Name, "SHELL": u.Shell, "PATH": pathEnv}
	if pty {
		env["TERM"] = "xterm-256color"
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// startFailure turns a failure to start into the API's answer: a program
// or directory that does not exist is NOT_FOUND, one the user may not use
// PERMISSION_DENIED, both failed_precondition.
func startFailure(field string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) || strings.Contains(err.Error(), "not found"):
		return codeErr(connect.CodeFailedPrecondition, ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, field, "%v", err)
	case errors.Is(err, fs.ErrPermission):
		return codeErr(connect.CodeFailedPrecondition, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED, field, "%v", err)
	}
	return codeErr(connect.CodeFailedPrecondition, ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST, field, "%v", err)
}

// spawn starts the process and its output readers.
func (a *Agent) spawn(r *guestv1.StartProcessRequest, u *User) (*apiProcess, error) {
	spec := r.GetSpec()
	dir := spec.GetCwd()
	if dir == "" {
		dir = "/"
		if fi, err := os.Stat(u.Home); err == nil && fi.IsDir() {
			dir = u.Home
		}
	}
	if err := asUser(u, func() error {
		fi, err := os.Stat(dir)
		if err == nil && !fi.IsDir() {
			err = &fs.PathError{Op: "chdir", Path: dir, Err: fs.ErrNotExist}
		}
		if err == nil {
			// As the user's filesystem ids (asUser): access(2) would ask
			// as the agent's real id, root, and always pass.
			err = unix.Faccessat(unix.AT_FDCWD, dir, unix.X_OK, unix.AT_EACCESS)
		}
		return err
	}); err != nil {
		return nil, startFailure("spec.cwd", err)
	}
	envMap := loginEnv(u, spec.GetPty() != nil, spec.GetEnv())
	var prog string
	if err := asUser(u, func() (err error) { prog, err = lookPath(spec.GetArgv()[0], envMap["PATH"], dir); return err }); err != nil {
		return nil, startFailure("spec.argv", err)
	}
	env := make([]string, 0, len(envMap))
	for k, v := range envMap {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	cmd := &exec.Cmd{Path: prog, Args: spec.GetArgv(), Env: env, Dir: dir,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if u.UID != 0 || u.GID != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
	}
	p := &apiProcess{changed: make(chan struct{})}
	io, err := p.attach(cmd, spec)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	exited, err := a.Reaper.Start(cmd)
	io.closeChildEnds()
	if err != nil {
		io.closeAll()
		return nil, startFailure("spec.argv", err)
	}
	now := time.Now()
	p.pgid = cmd.Process.Pid
	_ = cmd.Process.Release()
	keys := make([]string, 0, len(spec.GetEnv()))
	for k := range spec.GetEnv() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	p.info = &ctrlv1.Process{
		ProcessId: r.GetProcessId(), Pid: int32(p.pgid), CommandId: r.GetCommandId(), Generation: r.GetGeneration(),
		Argv: spec.GetArgv(), EnvKeys: keys, Cwd: dir, User: u.Name, StartedAt: timestamppb.New(now),
	}
	p.start = &ctrlv1.StartProcessResponse{ProcessId: r.GetProcessId(), Pid: int32(p.pgid), StartedAt: p.info.GetStartedAt(), Generation: r.GetGeneration()}
	a.procs.add(p)
	go p.run(exited, io, &a.procs, a.memoryKilled)
	return p, nil
}

// processIO is the descriptors of one process: the child's ends, which go
// once it started, and ours.
type processIO struct {
	child   []*os.File
	readers map[ctrlv1.ProcessOutputStream]*os.File
}

func (io *processIO) closeChildEnds() {
	for _, f := range io.child {
		f.Close()
	}
	io.child = nil
}

func (io *processIO) closeAll() {
	io.closeChildEnds()
	for _, f := range io.readers {
		f.Close()
	}
}

// attach gives cmd its stdin, stdout and stderr: one pty, or pipes (stdin
// /dev/null unless asked for).
func (p *apiProcess) attach(cmd *exec.Cmd, spec *ctrlv1.ProcessSpec) (*processIO, error) {
	io := &processIO{readers: map[ctrlv1.ProcessOutputStream]*os.File{}}
	if size := spec.GetPty(); size != nil {
		master, tty, err := openPty()
		if err != nil {
			return nil, err
		}
		if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(size.GetRows()), Col: uint16(size.GetCols())}); err != nil {
			master.Close()
			tty.Close()
			return nil, err
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr.Setctty = true
		cmd.SysProcAttr.Ctty = 0
		io.child = []*os.File{tty}
		// One descriptor reads and writes: dup it so reader and writer
		// close independently.
		in, err := dupFile(master)
		if err != nil {
			master.Close()
			tty.Close()
			return nil, err
		}
		io.readers[ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT] = master
		p.input, p.pty, p.size = in, master, &ctrlv1.ProcessPty{Rows: size.GetRows(), Cols: size.GetCols()}
		return io, nil
	}
	if spec.GetStdin() {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdin = r
		io.child = append(io.child, r)
		p.input = w
	} else {
		null, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		cmd.Stdin = null
		io.child = append(io.child, null)
	}
	for _, s := range []ctrlv1.ProcessOutputStream{ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT, ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDERR} {
		r, w, err := os.Pipe()
		if err != nil {
			io.closeAll()
			return nil, err
		}
		if s == ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT {
			cmd.Stdout = w
		} else {
			cmd.Stderr = w
		}
		io.child = append(io.child, w)
		io.readers[s] = r
	}
	return io, nil
}

func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// openPty opens a new pseudo-terminal: its master and its terminal.
func openPty() (master, tty *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, tty, nil
}

// run collects the process's output until it ended and its output is
// read, then records its exit.
func (p *apiProcess) run(exited <-chan Exit, io *processIO, table *processTable, memoryKilled func(pid int) bool) {
	var readers sync.WaitGroup
	for s, f := range io.readers {
		readers.Add(1)
		go func() {
			defer readers.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := f.Read(buf)
				if n > 0 {
					p.mu.Lock()
					p.out[s].append(buf[:n])
					p.notify()
					p.mu.Unlock()
				}
				if err != nil {
					return // EOF, EIO (a pty whose terminal closed), or the deadline
				}
			}
		}()
	}
	e := <-exited
	// Output written before the exit is in the pipes; a background child
	// holding them open is not waited for long.
	for _, f := range io.readers {
		_ = f.SetReadDeadline(time.Now().Add(outputGrace))
	}
	readers.Wait()
	io.closeAll()
	status := &ctrlv1.ProcessExitStatus{EndedAt: timestamppb.Now(), CoreDumped: e.Status.CoreDump()}
	if sig := e.Signal(); sig != 0 {
		status.Cause, status.Signal = ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_SIGNALED, int32(sig)
		if sig == int(unix.SIGKILL) && memoryKilled(e.Pid) {
			status.Cause = ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_MEMORY_KILLED
		}
	} else {
		status.Cause, status.ExitCode = ctrlv1.ProcessEndCause_PROCESS_END_CAUSE_EXITED, int32(e.Code())
	}
	p.recordExit(status)
	table.prune()
}

// recordExit records how the process ended and closes its input.
func (p *apiProcess) recordExit(status *ctrlv1.ProcessExitStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.exit = status
	if p.input != nil {
		p.input.Close()
		p.input = nil
	}
	p.notify()
}

// memoryKilled reports whether the memory watch's latest kill was pid.
func (a *Agent) memoryKilled(pid int) bool {
	return a.Memory.Report().GetLatestKill().GetPid() == int32(pid)
}

// snapshot is the Process as it is now.
func (p *apiProcess) snapshot() *ctrlv1.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := protoClone(p.info)
	out.StdinOpen = p.input != nil
	out.StdoutEndOffset = p.out[ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT].end()
	out.StderrEndOffset = p.out[ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDERR].end()
	out.StdinOffset = p.inOffset.Load()
	out.State = ctrlv1.ProcessState_PROCESS_STATE_RUNNING
	if p.size != nil {
		out.Pty = protoClone(p.size)
	}
	if p.exit != nil {
		out.State, out.Exit = ctrlv1.ProcessState_PROCESS_STATE_EXITED, protoClone(p.exit)
	}
	return out
}

// StreamProcessOutput sends a process's output from the offsets asked for,
// then its live output, then its exit.
func (a *Agent) StreamProcessOutput(ctx context.Context, req *connect.Request[guestv1.StreamProcessOutputRequest], out *connect.ServerStream[guestv1.StreamProcessOutputResponse]) error {
	r := req.Msg.GetRequest()
	p, err := a.procs.get(r.GetProcessId())
	if err != nil {
		return err
	}
	offsets := map[ctrlv1.ProcessOutputStream]uint64{
		ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT: r.GetStdoutOffset(),
		ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDERR: r.GetStderrOffset(),
	}
	p.mu.Lock()
	for s, off := range offsets {
		if off > p.out[s].end() {
			p.mu.Unlock()
			return codeErr(connect.CodeOutOfRange, ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST, strings.ToLower(strings.TrimPrefix(s.String(), "PROCESS_OUTPUT_STREAM_"))+"_offset",
				"offset %d is past the %d bytes %s has produced", off, p.out[s].end(), s)
		}
	}
	p.mu.Unlock()
	send := func(m *ctrlv1.StreamProcessOutputResponse) error {
		return out.Send(&guestv1.StreamProcessOutputResponse{Response: m})
	}
	idle := time.NewTimer(keepaliveEvery)
	defer idle.Stop()
	for {
		p.mu.Lock()
		var chunk *ctrlv1.ProcessOutputChunk
		for _, s := range []ctrlv1.ProcessOutputStream{ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT, ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDERR} {
			if data, at := p.out[s].from(offsets[s]); len(data) > 0 {
				chunk = &ctrlv1.ProcessOutputChunk{Stream: s, Offset: at, Data: data}
				offsets[s] = at + uint64(len(data))
				break
			}
		}
		exit, changed := p.exit, p.changed
		p.mu.Unlock()
		switch {
		case chunk != nil:
			if err := send(&ctrlv1.StreamProcessOutputResponse{Event: &ctrlv1.StreamProcessOutputResponse_Output{Output: chunk}}); err != nil {
				return err
			}
			idle.Reset(keepaliveEvery)
			continue
		case exit != nil:
			return send(&ctrlv1.StreamProcessOutputResponse{Event: &ctrlv1.StreamProcessOutputResponse_Exit{Exit: exit}})
		case r.GetSnapshot():
			return nil
		}
		select {
		case <-changed:
		case <-idle.C:
			if err := send(&ctrlv1.StreamProcessOutputResponse{Event: &ctrlv1.StreamProcessOutputResponse_Keepalive{Keepalive: &ctrlv1.ProcessKeepalive{}}}); err != nil {
				return err
			}
			idle.Reset(keepaliveEvery)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// inputWait bounds a SendProcessInput whose caller set no deadline, when
// the process does not read its input.
const inputWait = 30 * time.Second

// SendProcessInput writes to a process's stdin (or its terminal).
func (a *Agent) SendProcessInput(ctx context.Context, req *connect.Request[guestv1.SendProcessInputRequest]) (*connect.Response[guestv1.SendProcessInputResponse], error) {
	r := req.Msg.GetRequest()
	if len(r.GetData()) > maxInput {
		return nil, invalid("data", "is more than %d bytes", maxInput)
	}
	p, err := a.procs.get(r.GetProcessId())
	if err != nil {
		return nil, err
	}
	// inMu orders the inputs (offsets stay exact) and is held while
	// writing, which may block; mu is not, so output is still collected.
	p.inMu.Lock()
	defer p.inMu.Unlock()
	p.mu.Lock()
	in, ended := p.input, p.exit != nil
	p.mu.Unlock()
	switch {
	case ended:
		return nil, precondition("process %s has ended", r.GetProcessId())
	case in == nil:
		return nil, precondition("process %s has no open stdin (started without stdin, or closed)", r.GetProcessId())
	}
	data, written := r.GetData(), p.inOffset.Load()
	if r.Offset != nil {
		if *r.Offset > written {
			return nil, codeErr(connect.CodeFailedPrecondition, ctrlv1.FailureReason_FAILURE_REASON_CONFLICT, "offset",
				"offset %d is beyond the %d bytes written", *r.Offset, written)
		}
		// Bytes already written are skipped: a retry is exact.
		data = data[min(uint64(len(data)), written-*r.Offset):]
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(inputWait)
	}
	_ = in.SetWriteDeadline(deadline)
	n, err := in.Write(data)
	p.inOffset.Add(uint64(n))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, codeErr(connect.CodeDeadlineExceeded, ctrlv1.FailureReason_FAILURE_REASON_TIMED_OUT, "",
			"the process read %d of %d bytes; send the rest from offset %d", n, len(data), p.inOffset.Load())
	case err != nil:
		return nil, precondition("write stdin: %v (the process ended or closed it)", err)
	}
	if r.GetClose() {
		if err := p.closeInput(in); err != nil {
			return nil, precondition("close stdin: %v", err)
		}
	}
	return connect.NewResponse(&guestv1.SendProcessInputResponse{Response: &ctrlv1.SendProcessInputResponse{StdinOffset: p.inOffset.Load()}}), nil
}

// closeInput ends the process's input: EOF on a pipe; on a pty, the
// terminal's EOF character (the terminal stays open for output). The
// process may have ended since its input was written, its exit closing
// in (recordExit): its input is then closed, as asked.
func (p *apiProcess) closeInput(in *os.File) error {
	if p.pty != nil {
		// Not under mu: the write may wait for the process to read.
		_, err := in.Write([]byte{ptyEOF})
		if errors.Is(err, os.ErrClosed) {
			return nil
		}
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.input != in {
		return nil
	}
	p.input = nil
	p.notify()
	return in.Close()
}

func precondition(format string, args ...any) error {
	return codeErr(connect.CodeFailedPrecondition, ctrlv1.FailureReason_FAILURE_REASON_CONFLICT, "", format, args...)
}

// ResizeProcessPty sets a process's terminal size; the kernel delivers
// SIGWINCH.
func (a *Agent) ResizeProcessPty(_ context.Context, req *connect.Request[guestv1.ResizeProcessPtyRequest]) (*connect.Response[guestv1.ResizeProcessPtyResponse], error) {
	r := req.Msg.GetRequest()
	if !validSize(r.GetSize()) {
		return nil, invalid("size", "rows and cols are each 1 to 4096")
	}
	p, err := a.procs.get(r.GetProcessId())
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.pty == nil:
		return nil, precondition("process %s has no pty", r.GetProcessId())
	case p.exit != nil:
		return nil, precondition("process %s has ended", r.GetProcessId())
	}
	if err := unix.IoctlSetWinsize(int(p.pty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(r.GetSize().GetRows()), Col: uint16(r.GetSize().GetCols())}); err != nil {
		return nil, precondition("resize: %v", err)
	}
	p.size = protoClone(r.GetSize())
	p.notify()
	return connect.NewResponse(&guestv1.ResizeProcessPtyResponse{Response: &ctrlv1.ResizeProcessPtyResponse{}}), nil
}

// signalOf is the Linux signal of a ProcessSignal: the enum's numbers are
// Linux's.
func signalOf(s ctrlv1.ProcessSignal) (unix.Signal, bool) {
	if s == ctrlv1.ProcessSignal_PROCESS_SIGNAL_UNSPECIFIED {
		return 0, false
	}
	_, known := ctrlv1.ProcessSignal_name[int32(s)]
	return unix.Signal(s), known
}

// SignalProcess signals a process's group.
func (a *Agent) SignalProcess(_ context.Context, req *connect.Request[guestv1.SignalProcessRequest]) (*connect.Response[guestv1.SignalProcessResponse], error) {
	r := req.Msg.GetRequest()
	sig, ok := signalOf(r.GetSignal())
	if !ok {
		return nil, invalid("signal", "is required and must be one of ProcessSignal")
	}
	p, err := a.procs.get(r.GetProcessId())
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delivered := false
	if p.exit == nil {
		// The lock keeps the exit from being recorded meanwhile, so the
		// group's id cannot have been reused.
		err := unix.Kill(-p.pgid, sig)
		if err != nil && !errors.Is(err, unix.ESRCH) {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		delivered = err == nil
	}
	return connect.NewResponse(&guestv1.SignalProcessResponse{Response: &ctrlv1.SignalProcessResponse{Delivered: delivered}}), nil
}

// GetProcess reads one process.
func (a *Agent) GetProcess(_ context.Context, req *connect.Request[guestv1.GetProcessRequest]) (*connect.Response[guestv1.GetProcessResponse], error) {
	p, err := a.procs.get(req.Msg.GetRequest().GetProcessId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&guestv1.GetProcessResponse{Response: &ctrlv1.GetProcessResponse{Process: p.snapshot()}}), nil
}

// ListProcesses lists the processes of this boot, oldest first.
func (a *Agent) ListProcesses(_ context.Context, req *connect.Request[guestv1.ListProcessesRequest]) (*connect.Response[guestv1.ListProcessesResponse], error) {
	a.procs.mu.Lock()
	all := slices.Clone(a.procs.order)
	a.procs.mu.Unlock()
	res := &ctrlv1.ListProcessesResponse{}
	for _, p := range all {
		s := p.snapshot()
		if s.GetState() == ctrlv1.ProcessState_PROCESS_STATE_RUNNING || req.Msg.GetRequest().GetIncludeExited() {
			res.Processes = append(res.Processes, s)
		}
	}
	return connect.NewResponse(&guestv1.ListProcessesResponse{Response: res}), nil
}

// WaitProcess returns once the process has ended.
func (a *Agent) WaitProcess(ctx context.Context, req *connect.Request[guestv1.WaitProcessRequest]) (*connect.Response[guestv1.WaitProcessResponse], error) {
	p, err := a.procs.get(req.Msg.GetRequest().GetProcessId())
	if err != nil {
		return nil, err
	}
	for {
		p.mu.Lock()
		exit, changed := p.exit, p.changed
		p.mu.Unlock()
		if exit != nil {
			return connect.NewResponse(&guestv1.WaitProcessResponse{Response: &ctrlv1.WaitProcessResponse{Exit: exit}}), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, connect.NewError(connect.CodeDeadlineExceeded, fmt.Errorf("process %s still runs", req.Msg.GetRequest().GetProcessId()))
		}
	}
}

func protoClone[T proto.Message](m T) T { return proto.Clone(m).(T) }
