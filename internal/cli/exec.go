package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

// exitError carries a process's exit status to the kibotos exit code.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("the process exited with %d", e.code) }

func newExecCommand(out *outputFlag) *cobra.Command {
	var env map[string]string
	var cwd, commandID, user string
	var stdin, tty bool
	c := &cobra.Command{
		Use:   "exec WORKSPACE_ID -- ARGV...",
		Short: "Run a process in a Workspace and stream its output; exits with its status",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := onWorkspace(ctrlv1connect.NewProcessServiceClient)
			if err != nil {
				return err
			}
			spec := &ctrlv1.ProcessSpec{Argv: args[1:], Env: env, Cwd: cwd, User: user, Stdin: stdin}
			if tty {
				restore, size := rawTerminal(cmd.InOrStdin())
				defer restore()
				spec.Pty = size
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			stream, err := client.ExecProcess(ctx, connect.NewRequest(&ctrlv1.ExecProcessRequest{
				Command: newCommandMetadata(commandID), WorkspaceId: args[0], Spec: spec,
			}))
			if err != nil {
				return err
			}
			defer stream.Close()
			code := -1
			for stream.Receive() {
				msg := stream.Msg()
				if *out == "json" {
					b, _ := protojson.Marshal(msg)
					fmt.Fprintln(cmd.OutOrStdout(), string(b))
				}
				switch ev := msg.GetEvent().(type) {
				case *ctrlv1.ExecProcessResponse_Started:
					if stdin || tty {
						go forwardInput(ctx, client, args[0], ev.Started.GetProcessId(), cmd.InOrStdin(), cmd.ErrOrStderr())
					}
				case *ctrlv1.ExecProcessResponse_Output:
					if *out == "json" {
						continue
					}
					w := cmd.OutOrStdout()
					if ev.Output.GetStream() == ctrlv1.ProcessOutputStream_PROCESS_OUTPUT_STREAM_STDERR {
						w = cmd.ErrOrStderr()
					}
					_, _ = w.Write(ev.Output.GetData())
				case *ctrlv1.ExecProcessResponse_Exit:
					code = int(ev.Exit.GetExitCode())
				}
			}
			if err := stream.Err(); err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	c.Flags().StringToStringVarP(&env, "env", "e", nil, "environment variables (NAME=VALUE, repeatable)")
	c.Flags().StringVar(&cwd, "cwd", "", "working directory in the guest")
	c.Flags().StringVar(&commandID, "command-id", "", "command_id to send")
	c.Flags().StringVarP(&user, "user", "u", "", "guest user (name or uid) to run as (default: the Template's)")
	c.Flags().BoolVarP(&stdin, "stdin", "i", false, "send this command's standard input to the process")
	c.Flags().BoolVarP(&tty, "tty", "t", false, "run the process on a pseudo-terminal the size of this one (input is sent too)")
	return c
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

// forwardInput sends in to the process's stdin as it is read, each chunk
// at its offset so that a retried send is exact, and closes it at EOF.
func forwardInput(ctx context.Context, client ctrlv1connect.ProcessServiceClient, workspaceID, processID string, in io.Reader, errOut io.Writer) {
	buf := make([]byte, 32<<10)
	var offset uint64
	for {
		n, err := in.Read(buf)
		at := offset
		req := &ctrlv1.SendProcessInputRequest{WorkspaceId: workspaceID, ProcessId: processID, Data: buf[:n], Offset: &at, Close: err != nil}
		if n > 0 || err != nil {
			if _, serr := client.SendProcessInput(ctx, connect.NewRequest(req)); serr != nil {
				if ctx.Err() == nil && connect.CodeOf(serr) != connect.CodeFailedPrecondition {
					fmt.Fprintln(errOut, "kibotos: input:", serr)
				}
				return // the process ended or closed its input
			}
		}
		offset += uint64(n)
		if err != nil {
			return
		}
	}
}

// rawTerminal puts in, when it is a terminal, in raw mode (keys go to the
// guest's terminal as typed, ^C included) and returns how to restore it
// and its size; otherwise a 24x80 terminal.
func rawTerminal(in io.Reader) (func(), *ctrlv1.ProcessPty) {
	size := &ctrlv1.ProcessPty{Rows: 24, Cols: 80}
	f, ok := in.(*os.File)
	if !ok {
		return func() {}, size
	}
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return func() {}, size
	}
	if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil && ws.Row > 0 && ws.Col > 0 {
		size = &ctrlv1.ProcessPty{Rows: uint32(ws.Row), Cols: uint32(ws.Col)}
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return func() {}, size
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, size
}
