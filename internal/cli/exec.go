package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

// exitError carries a process's exit status to the kibotos exit code.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("the process exited with %d", e.code) }

// processFlags are what exec and process start share: the ProcessSpec.
type processFlags struct {
	env        map[string]string
	cwd, user  string
	stdin, tty bool
	commandID  string
}

func (f *processFlags) register(c *cobra.Command) {
	c.Flags().StringToStringVarP(&f.env, "env", "e", nil, "environment variables (NAME=VALUE, repeatable)")
	c.Flags().StringVar(&f.cwd, "cwd", "", "working directory in the guest")
	c.Flags().StringVar(&f.commandID, "command-id", "", "command_id to send (a replay attaches to the same process)")
	c.Flags().StringVarP(&f.user, "user", "u", "", "guest user (name or uid) to run as (default: the Template's)")
	c.Flags().BoolVarP(&f.stdin, "stdin", "i", false, "connect the process's standard input (exec: this command's)")
}

func (f *processFlags) spec(argv []string) *ctrlv1.ProcessSpec {
	return &ctrlv1.ProcessSpec{Argv: argv, Env: f.env, Cwd: f.cwd, User: f.user, Stdin: f.stdin}
}

func newExecCommand(out *outputFlag) *cobra.Command {
	var f processFlags
	var detach bool
	c := &cobra.Command{
		Use:   "exec WORKSPACE_ID -- ARGV...",
		Short: "Run a process in a Workspace and stream its output; exits with its status",
		Long: `exec runs ARGV in the Workspace's guest and streams its output here; kibotos
exits with the process's status (128+N when signal N ended it).

Ctrl-C (or SIGTERM) sends SIGINT to the guest process and its group, and
exec goes on streaming until the process ends; a second Ctrl-C sends
SIGKILL. With --detach, Ctrl-C leaves the process running instead: exec
prints its id and returns (see "kibotos workspace process"). With --tty the
terminal is raw, so Ctrl-C reaches the guest's terminal as a key, and
resizing this terminal resizes the guest's; when the input is no terminal
(a pipe, a file), --tty is ignored with a warning and the input goes to the
process's plain stdin.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := onWorkspace(ctrlv1connect.NewProcessServiceClient)
			if err != nil {
				return err
			}
			spec := f.spec(args[1:])
			e := execution{client: client, workspaceID: args[0], out: out, cmd: cmd, detach: detach, input: f.stdin || f.tty}
			if f.tty {
				if t, ok := openTerminal(cmd.InOrStdin()); ok {
					e.term = t
					defer e.term.restore()
					spec.Pty = e.term.size()
				} else {
					// As kubectl does: a pty fed from a pipe or a file
					// cannot be given a reliable EOF (a ^D written before
					// the guest's shell turns its line editing on is read
					// as a NUL), so the input goes to a plain stdin.
					fmt.Fprintln(cmd.ErrOrStderr(), "kibotos: the input is not a terminal: running without one (-t ignored)")
					spec.Stdin = true
				}
			}
			return e.run(cmd.Context(), &ctrlv1.ExecProcessRequest{Command: newCommandMetadata(f.commandID), WorkspaceId: args[0], Spec: spec})
		},
	}
	f.register(c)
	argvAfterDash(c)
	c.Flags().BoolVarP(&f.tty, "tty", "t", false, "run the process on a pseudo-terminal the size of this one (input is sent too)")
	c.Flags().BoolVarP(&detach, "detach", "d", false, "on Ctrl-C, leave the process running and return instead of signalling it")
	return c
}

// argvAfterDash makes an unknown flag's error say where a guest command's
// own flags go: `exec ID ls -la` reads -la as exec's (as kubectl exec
// does), and the bare "unknown shorthand flag" left users guessing.
func argvAfterDash(c *cobra.Command) {
	c.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w\n(the guest command and its own flags go after --: %s WORKSPACE_ID -- ARGV...)", err, cmd.CommandPath())
	})
}

// execution is one `kibotos workspace exec`: its stream, and what the
// interrupts of this command do to the guest process.
type execution struct {
	client      ctrlv1connect.ProcessServiceClient
	workspaceID string
	out         *outputFlag
	cmd         *cobra.Command
	detach      bool
	input       bool
	term        *terminal // nil without --tty
	// watching is `process logs`: Ctrl-C ends only this command.
	watching bool
	// snapshot asks for the retained output only, and exits 0 whatever
	// the process did (`process logs` without --follow).
	snapshot bool
	// dropped counts, by ProcessOutputStream, the bytes the guest dropped
	// before they were read: it keeps the last MiB of each stream and
	// never holds the process back for a slow reader.
	dropped [3]uint64
}

// noteDropped counts the bytes between the last one shown (at) and a
// chunk that starts past it, which the guest dropped, and says so at the
// first gap of a stream.
func (e *execution) noteDropped(o *ctrlv1.ProcessOutputChunk, at uint64) {
	if o.GetOffset() <= at {
		return
	}
	if e.dropped[o.GetStream()] == 0 {
		fmt.Fprintf(e.cmd.ErrOrStderr(), "kibotos: %s: the guest dropped bytes %d to %d before this command read them (it keeps the last MiB of each stream and never waits for a reader)\n",
			streamName(o.GetStream()), at, o.GetOffset()-1)
	}
	e.dropped[o.GetStream()] += o.GetOffset() - at
}

// lost is the error that says what the guest dropped, nil when nothing.
func (e *execution) lost() error {
	var parts []string
	for stream, n := range e.dropped {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d bytes of %s", n, streamName(ctrlv1.ProcessOutputStream(stream))))
		}
	}
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("the output shown is not whole: the guest dropped %s before this command read them; read large output from a file (workspace cp, workspace files)", strings.Join(parts, " and "))
}

func streamName(s ctrlv1.ProcessOutputStream) string {
	return strings.ToLower(trimEnum(s.String(), "PROCESS_OUTPUT_STREAM_"))
}

// run streams the process to its end. The stream does not end with
// interrupted (the command's context, cancelled by Ctrl-C): it carries the
// process's exit after the signal. A stream cut as unavailable after the
// process started (ctrl restarting, the node's session replaced), or
// broken off with its connection (isCut), is resumed with
// StreamProcessOutput from the offsets already shown, as the API asks of
// its callers.
func (e *execution) run(interrupted context.Context, req *ctrlv1.ExecProcessRequest) error {
	return e.follow(interrupted, "", func(ctx context.Context) (stream, error) {
		s, err := e.client.ExecProcess(ctx, connect.NewRequest(req))
		if err != nil {
			return stream{}, err
		}
		return stream{forward(ctx, s, func(m *ctrlv1.ExecProcessResponse) *ctrlv1.ExecProcessResponse { return m }), s.Err, s}, nil
	})
}

// attach streams a running or ended process's output from its earliest
// retained byte (`process logs`): to its end, or with e.snapshot only what
// is retained now.
func (e *execution) attach(interrupted context.Context, processID string) error {
	return e.follow(interrupted, processID, func(ctx context.Context) (stream, error) {
		return e.resume(ctx, processID, [3]uint64{})
	})
}

// stream is an open output stream as follow reads it: its events, how it
// ended once they stop, and how to close it.
type stream struct {
	events <-chan *ctrlv1.ExecProcessResponse
	ended  func() error
	io.Closer
}

// resume opens StreamProcessOutput from the offsets shown.
func (e *execution) resume(ctx context.Context, processID string, shown [3]uint64) (stream, error) {
	s, err := e.client.StreamProcessOutput(ctx, connect.NewRequest(&ctrlv1.StreamProcessOutputRequest{WorkspaceId: e.workspaceID, ProcessId: processID,
		StdoutOffset: shown[ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDOUT], StderrOffset: shown[ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDERR],
		Snapshot: e.snapshot}))
	if err != nil {
		return stream{}, err
	}
	return stream{forward(ctx, s, resumedEvent), s.Err, s}, nil
}

// follow shows the stream open makes, resuming it when cut; processID is
// empty until the stream's started event names it.
func (e *execution) follow(interrupted context.Context, processID string, open func(context.Context) (stream, error)) error {
	ctx, cancel := context.WithCancel(context.WithoutCancel(interrupted))
	defer cancel()
	cur, err := open(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = cur.Close() }()
	events, ended := cur.events, cur.ended
	code := -1
	var shown [3]uint64 // by ProcessOutputStream: the offset after the last byte shown
	var cuts resumption
	interrupts := 0
	var again chan os.Signal // the interrupts after the first
	for {
		select {
		case msg, ok := <-events:
			if !ok {
				err := ended()
				if !isCut(err) || processID == "" || code >= 0 {
					return e.end(err, code)
				}
				if werr := cuts.wait(ctx, e.cmd.ErrOrStderr(), err); werr != nil {
					return werr
				}
				_ = cur.Close()
				if cur, err = e.resume(ctx, processID, shown); err != nil {
					return err
				}
				events, ended = cur.events, cur.ended
				continue
			}
			cuts.progressed()
			if started := msg.GetStarted(); started != nil {
				processID = started.GetProcessId()
				e.started(ctx, processID)
				if interrupts > 0 && e.interrupt(processID, interrupts) {
					return nil
				}
			}
			if o := msg.GetOutput(); o != nil && int(o.GetStream()) < len(shown) {
				e.noteDropped(o, shown[o.GetStream()])
				shown[o.GetStream()] = o.GetOffset() + uint64(len(o.GetData()))
			}
			code = e.show(msg, code)
		case <-interrupted.Done():
			interrupted = context.Background() // fires once
			again = make(chan os.Signal, 1)
			signal.Notify(again, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(again)
			interrupts++
			if processID != "" && e.interrupt(processID, interrupts) {
				return nil
			}
		case <-again:
			interrupts++
			if processID != "" && e.interrupt(processID, interrupts) {
				return nil
			}
		}
	}
}

// isCut reports whether a stream ended by a transient fault: unavailable,
// or its connection broken, which ends it with an error the client library
// makes up (connect-go: invalid_argument for a message cut short, internal
// for a reset stream) and ctrl never sent.
func isCut(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable:
		return true
	case connect.CodeCanceled, connect.CodeDeadlineExceeded:
		return false
	}
	return err != nil && !connect.IsWireError(err)
}

// forward hands a stream's messages, as conv makes them, to the channel it
// returns, closed when the stream ends (its Err says how).
func forward[T any](ctx context.Context, s *connect.ServerStreamForClient[T], conv func(*T) *ctrlv1.ExecProcessResponse) <-chan *ctrlv1.ExecProcessResponse {
	events := make(chan *ctrlv1.ExecProcessResponse)
	go func() {
		defer close(events)
		for s.Receive() {
			select {
			case events <- conv(s.Msg()):
			case <-ctx.Done():
				return
			}
		}
	}()
	return events
}

// resumedEvent is a StreamProcessOutput event as ExecProcess carries it.
func resumedEvent(m *ctrlv1.StreamProcessOutputResponse) *ctrlv1.ExecProcessResponse {
	switch ev := m.GetEvent().(type) {
	case *ctrlv1.StreamProcessOutputResponse_Output:
		return &ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Output{Output: ev.Output}}
	case *ctrlv1.StreamProcessOutputResponse_Exit:
		return &ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Exit{Exit: ev.Exit}}
	}
	return &ctrlv1.ExecProcessResponse{Event: &ctrlv1.ExecProcessResponse_Keepalive{Keepalive: m.GetKeepalive()}}
}

// resumeFor bounds how long exec goes on resuming a stream that delivers
// nothing before it gives up with the stream's error.
const resumeFor = 2 * time.Minute

// resumption paces the resumes of a cut stream: at once after a stream
// that delivered something, then waiting longer each time (up to 5 s)
// while none does, for at most resumeFor.
type resumption struct {
	since time.Time // the first cut since the last event; zero when none
	next  time.Duration
}

func (r *resumption) progressed() { r.since, r.next = time.Time{}, 0 }

// wait says the stream was cut and waits before the next resume, or
// answers cut once resumeFor passed without an event.
func (r *resumption) wait(ctx context.Context, stderr io.Writer, cut error) error {
	if r.since.IsZero() {
		r.since = time.Now()
		fmt.Fprintf(stderr, "kibotos: the stream was cut (%s); resuming\n", describe(cut))
	}
	if time.Since(r.since) > resumeFor {
		return cut
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.next):
	}
	r.next = min(max(2*r.next, 250*time.Millisecond), 5*time.Second)
	return nil
}

// interrupt does what the n-th Ctrl-C asks: detach (true: exec returns),
// else SIGINT, then SIGKILL.
func (e *execution) interrupt(processID string, n int) (detached bool) {
	switch {
	case e.watching:
		return true
	case e.detach:
		fmt.Fprintf(e.cmd.ErrOrStderr(), "kibotos: detached; process %[1]s keeps running in %[2]s (`kibotos workspace process logs -f %[2]s %[1]s` follows it, `kibotos workspace process kill %[2]s %[1]s` ends it)\n",
			processID, e.workspaceID)
		return true
	case n == 1:
		e.signal(processID, ctrlv1.ProcessSignal_PROCESS_SIGNAL_SIGINT, "SIGINT sent; waiting for the process to end (Ctrl-C again sends SIGKILL)")
	default:
		e.signal(processID, ctrlv1.ProcessSignal_PROCESS_SIGNAL_SIGKILL, "SIGKILL sent")
	}
	return false
}

// started begins what runs beside the stream: input, and terminal resizes.
func (e *execution) started(ctx context.Context, processID string) {
	if e.input {
		go forwardInput(ctx, e.client, e.workspaceID, processID, e.cmd.InOrStdin(), e.cmd.ErrOrStderr())
	}
	if e.term != nil {
		// Notify before the process can print: a resize from then on is sent.
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		go e.term.forwardResizes(ctx, winch, func(size *ctrlv1.ProcessPty) error {
			_, err := e.client.ResizeProcessPty(ctx, connect.NewRequest(&ctrlv1.ResizeProcessPtyRequest{WorkspaceId: e.workspaceID, ProcessId: processID, Size: size}))
			return err
		})
	}
}

// show prints one event and returns the exit code known so far.
func (e *execution) show(msg *ctrlv1.ExecProcessResponse, code int) int {
	if e.out.structured() {
		_ = e.out.line(e.cmd.OutOrStdout(), msg)
	}
	switch ev := msg.GetEvent().(type) {
	case *ctrlv1.ExecProcessResponse_Output:
		if e.out.structured() {
			break
		}
		w := e.cmd.OutOrStdout()
		if ev.Output.GetStream() == ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDERR {
			w = e.cmd.ErrOrStderr()
		}
		_, _ = w.Write(ev.Output.GetData())
	case *ctrlv1.ExecProcessResponse_Exit:
		return exitCodeOfProcess(ev.Exit)
	}
	return code
}

// signal sends sig to the process and its group.
func (e *execution) signal(processID string, sig ctrlv1.ProcessSignal, said string) {
	ctx := context.WithoutCancel(e.cmd.Context())
	if _, err := e.client.SignalProcess(ctx, connect.NewRequest(&ctrlv1.SignalProcessRequest{WorkspaceId: e.workspaceID, ProcessId: processID, Signal: sig})); err != nil {
		fmt.Fprintln(e.cmd.ErrOrStderr(), "kibotos: signal:", describe(err))
		return
	}
	fmt.Fprintln(e.cmd.ErrOrStderr(), "kibotos:", said)
}

// end is how the command ends once the stream did. Output the guest
// dropped fails an exec whose process exited 0 (a script must not take
// the output for whole) and is said on stderr otherwise; `process logs`
// only says it, reading what the guest keeps being what logs is for.
func (e *execution) end(err error, code int) error {
	lost := e.lost()
	if lost != nil && (err != nil || e.watching || code != 0) {
		fmt.Fprintln(e.cmd.ErrOrStderr(), "kibotos:", lost)
	}
	if err != nil || e.snapshot {
		return err
	}
	if code != 0 {
		return exitError{code}
	}
	if !e.watching {
		return lost
	}
	return nil
}

// exitCodeOfProcess is a shell's $? for the process: its exit code, or
// 128 plus the signal that ended it.
func exitCodeOfProcess(s *ctrlv1.ProcessExitStatus) int {
	if s.GetSignal() != 0 {
		return 128 + int(s.GetSignal())
	}
	return int(s.GetExitCode())
}

// exitCodeOf is the process exit code for err: the guest process's status,
// else 1.
func exitCodeOf(err error) int {
	var e exitError
	if errors.As(err, &e) {
		return e.code
	}
	return 1
}

// forwardInput sends in to the process's stdin as it is read, and closes
// it at EOF. Each call carries everything read while the one before was
// under way (at most maxInput), at its offset so that a retried send is
// exact: a keystroke goes at once, and piped data is not held to one
// read's 64 KiB a round trip.
func forwardInput(ctx context.Context, client ctrlv1connect.ProcessServiceClient, workspaceID, processID string, in io.Reader, errOut io.Writer) {
	reads := readAhead(ctx, in)
	var offset uint64
	for {
		next, ok := nextInput(reads)
		if !ok {
			return // ctx ended
		}
		data, err := next.data, next.err
		at := offset
		req := &ctrlv1.SendProcessInputRequest{WorkspaceId: workspaceID, ProcessId: processID, Data: data, Offset: &at, Close: err != nil}
		if len(data) > 0 || err != nil {
			if _, serr := client.SendProcessInput(ctx, connect.NewRequest(req)); serr != nil {
				if ctx.Err() == nil && connect.CodeOf(serr) != connect.CodeFailedPrecondition {
					fmt.Fprintln(errOut, "kibotos: input:", serr)
				}
				return // the process ended or closed its input
			}
		}
		offset += uint64(len(data))
		if err != nil {
			return
		}
	}
}

const (
	// maxInput is the most data one SendProcessInput carries.
	maxInput = 1 << 20
	// inputRead is the most one read of the input returns.
	inputRead = 64 << 10
)

// inputChunk is one read of the input: its bytes, and the error that
// ended it (io.EOF at the end).
type inputChunk struct {
	data []byte
	err  error
}

// readAhead reads in on a goroutine of its own, up to maxInput ahead of
// the sends, and ends after the read that failed.
func readAhead(ctx context.Context, in io.Reader) <-chan inputChunk {
	reads := make(chan inputChunk, maxInput/inputRead)
	go func() {
		defer close(reads)
		for {
			buf := make([]byte, inputRead)
			n, err := in.Read(buf)
			select {
			case reads <- inputChunk{buf[:n], err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return reads
}

// nextInput waits for the next read and joins to it those already made,
// up to maxInput, with the read error that ends the input if one came. ok
// is false once reads is closed without one (its context ended).
func nextInput(reads <-chan inputChunk) (next inputChunk, ok bool) {
	if next, ok = <-reads; !ok {
		return next, false
	}
	for next.err == nil && len(next.data) <= maxInput-inputRead {
		select {
		case c, more := <-reads:
			if !more {
				return next, false
			}
			next.data, next.err = append(next.data, c.data...), c.err
		default:
			return next, true
		}
	}
	return next, true
}

// terminal is this command's input terminal in raw mode (keys go to the
// guest's terminal as typed, ^C included).
type terminal struct {
	fd    int
	state *term.State // nil: raw mode refused
}

// openTerminal makes in raw, if it is a terminal.
func openTerminal(in io.Reader) (*terminal, bool) {
	f, ok := in.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil, false
	}
	t := &terminal{fd: int(f.Fd())}
	t.state, _ = term.MakeRaw(t.fd)
	return t, true
}

func (t *terminal) restore() {
	if t.state != nil {
		_ = term.Restore(t.fd, t.state)
	}
}

// size is the terminal's size in cells, 24x80 when unknown.
func (t *terminal) size() *ctrlv1.ProcessPty {
	if cols, rows, err := term.GetSize(t.fd); err == nil && cols > 0 && rows > 0 {
		return &ctrlv1.ProcessPty{Rows: uint32(rows), Cols: uint32(cols)}
	}
	return &ctrlv1.ProcessPty{Rows: 24, Cols: 80}
}

// forwardResizes sends the terminal's size each time it changes (a
// SIGWINCH on winch) until ctx ends.
func (t *terminal) forwardResizes(ctx context.Context, winch chan os.Signal, resize func(*ctrlv1.ProcessPty) error) {
	defer signal.Stop(winch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-winch:
			if err := resize(t.size()); err != nil && ctx.Err() == nil && connect.CodeOf(err) != connect.CodeFailedPrecondition {
				return
			}
		}
	}
}
