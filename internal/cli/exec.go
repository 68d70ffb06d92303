package cli

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

// exitError carries a process's exit status to the kibotos exit code.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("the process exited with %d", e.code) }

func newExecCommand(out *outputFlag) *cobra.Command {
	var env map[string]string
	var cwd, commandID string
	c := &cobra.Command{
		Use:   "exec WORKSPACE_ID -- ARGV...",
		Short: "Run a process in a Workspace and stream its output; exits with its status",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := onWorkspace(ctrlv1connect.NewProcessServiceClient)
			if err != nil {
				return err
			}
			stream, err := client.ExecProcess(cmd.Context(), connect.NewRequest(&ctrlv1.ExecProcessRequest{
				Command: newCommandMetadata(commandID), WorkspaceId: args[0],
				Spec: &ctrlv1.ProcessSpec{Argv: args[1:], Env: env, Cwd: cwd},
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
