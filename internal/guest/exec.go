package guest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
)

// BaseEnv is the environment of every Exec process, before the request's
// own variables.
var BaseEnv = map[string]string{
	"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME": "/root",
	"TERM": "xterm-256color",
}

// outputGrace is how long Exec still reads output after the process ended:
// a background child holding the pipes open must not hold the call.
const outputGrace = 500 * time.Millisecond

// execEnv merges extra over BaseEnv, sorted.
func execEnv(extra map[string]string) []string {
	m := make(map[string]string, len(BaseEnv)+len(extra))
	for k, v := range BaseEnv {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	env := make([]string, 0, len(m))
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

// lookPath finds an executable: name itself when it has a slash (relative
// to dir), else the first match in the directories of path.
func lookPath(name, path, dir string) (string, error) {
	check := func(p string) error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s: %w", p, fs.ErrPermission)
		}
		return nil
	}
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return name, check(p)
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if check(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q: executable file not found in PATH %s", name, path)
}

type outputChunk struct {
	stream guestv1.ExecStream
	data   []byte
}

// Exec runs one process to its end, streaming its output.
func (a *Agent) Exec(ctx context.Context, req *connect.Request[guestv1.ExecRequest], stream *connect.ServerStream[guestv1.ExecResponse]) error {
	if a.Reaper == nil {
		return connect.NewError(connect.CodeUnimplemented, errors.New("this agent runs no processes"))
	}
	argv := req.Msg.GetArgv()
	if len(argv) == 0 || argv[0] == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("argv is empty"))
	}
	dir := req.Msg.GetCwd()
	if dir == "" {
		dir = "/"
	}
	env := execEnv(req.Msg.GetEnv())
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	path, err := lookPath(argv[0], pathEnv, dir)
	if err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}

	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return connect.NewError(connect.CodeInternal, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{stdinR, stdinW, outR, outW} {
			f.Close()
		}
		return connect.NewError(connect.CodeInternal, err)
	}
	cmd := &exec.Cmd{
		Path: path, Args: argv, Env: env, Dir: dir,
		Stdin: stdinR, Stdout: outW, Stderr: errW,
		// Its own process group, so that a cancelled call ends its
		// children too.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	exited, err := a.Reaper.Start(cmd)
	// The child has its copies; ours of its ends must go for EOFs to come.
	stdinR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		stdinW.Close()
		outR.Close()
		errR.Close()
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	pid := cmd.Process.Pid
	defer cmd.Process.Release()

	go func() {
		if b := req.Msg.GetStdin(); len(b) > 0 {
			_, _ = stdinW.Write(b) // EPIPE: the process does not read it
		}
		stdinW.Close()
	}()
	chunks := make(chan outputChunk, 16)
	var readers sync.WaitGroup
	for _, p := range []struct {
		f *os.File
		s guestv1.ExecStream
	}{{outR, guestv1.ExecStream_EXEC_STREAM_STDOUT}, {errR, guestv1.ExecStream_EXEC_STREAM_STDERR}} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer p.f.Close()
			for {
				buf := make([]byte, 32<<10)
				n, err := p.f.Read(buf)
				if n > 0 {
					chunks <- outputChunk{p.s, buf[:n]}
				}
				if err != nil {
					return
				}
			}
		}()
	}
	readersDone := make(chan struct{})
	go func() {
		readers.Wait()
		close(readersDone)
	}()

	kill := func() { _ = unix.Kill(-pid, unix.SIGKILL) }
	// Whatever happens, the loop below runs until the process has exited
	// and its output readers have ended, so that nothing is left behind.
	sendErr := stream.Send(&guestv1.ExecResponse{Event: &guestv1.ExecResponse_Started{Started: &guestv1.ExecStarted{Pid: int32(pid)}}})
	if sendErr != nil {
		kill()
	}
	var exit *Exit
	for exit == nil || readersDone != nil {
		select {
		case c := <-chunks:
			if sendErr == nil {
				sendErr = stream.Send(&guestv1.ExecResponse{Event: &guestv1.ExecResponse_Output{Output: &guestv1.ExecOutput{Stream: c.stream, Data: c.data}}})
				if sendErr != nil {
					kill()
				}
			}
		case e := <-exited:
			exit = &e
			exited = nil
			// Output written before the exit is in the pipes; whatever a
			// background child still writes is not waited for long.
			deadline := time.Now().Add(outputGrace)
			_ = outR.SetReadDeadline(deadline)
			_ = errR.SetReadDeadline(deadline)
		case <-readersDone:
			readersDone = nil
		case <-ctx.Done():
			kill()
			ctx = context.Background() // kill once; still wait for the exit
		}
	}
	// A background child that inherited stdin and does not read it must
	// not hold the writer.
	stdinW.Close()
	// Chunks read before the readers ended.
	for len(chunks) > 0 && sendErr == nil {
		c := <-chunks
		sendErr = stream.Send(&guestv1.ExecResponse{Event: &guestv1.ExecResponse_Output{Output: &guestv1.ExecOutput{Stream: c.stream, Data: c.data}}})
	}
	if sendErr != nil {
		return sendErr
	}
	return stream.Send(&guestv1.ExecResponse{Event: &guestv1.ExecResponse_Exited{Exited: &guestv1.ExecExited{
		ExitCode: int32(exit.Code()), Signal: int32(exit.Signal())}}})
}
