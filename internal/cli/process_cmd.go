package cli

import (
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

func processClient() (ctrlv1connect.ProcessServiceClient, error) {
	return onWorkspace(ctrlv1connect.NewProcessServiceClient)
}

var processHeader = []string{"PROCESS", "PID", "STATE", "EXIT", "ARGV"}

func processRow(p *ctrlv1.Process) []string {
	exit := "-"
	if p.GetExit() != nil {
		exit = strconv.Itoa(exitCodeOfProcess(p.GetExit()))
	}
	return []string{p.GetProcessId(), strconv.Itoa(int(p.GetPid())), trimEnum(p.GetState().String(), "PROCESS_STATE_"), exit, strings.Join(p.GetArgv(), " ")}
}

// newProcessCommand is `kibotos workspace process`: background processes
// of the Workspace's current execution.
func newProcessCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{Use: "process", Aliases: []string{"ps"}, Short: "Start, list, inspect, wait for, signal and read the output of a Workspace's processes"}

	var f processFlags
	start := &cobra.Command{
		Use: "start WORKSPACE_ID -- ARGV...", Short: "Start a process in the background and print its id", Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := processClient()
			if err != nil {
				return err
			}
			res, err := client.StartProcess(cmd.Context(), connect.NewRequest(&ctrlv1.StartProcessRequest{
				Command: newCommandMetadata(f.commandID), WorkspaceId: args[0], Spec: f.spec(args[1:]),
			}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, []string{"PROCESS", "PID", "GENERATION"},
				[][]string{{res.Msg.GetProcessId(), strconv.Itoa(int(res.Msg.GetPid())), strconv.FormatUint(res.Msg.GetGeneration(), 10)}})
		},
	}
	f.register(start)
	argvAfterDash(start)

	var all bool
	list := &cobra.Command{
		Use: "list WORKSPACE_ID", Short: "List the processes started through the API in this execution", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := processClient()
			if err != nil {
				return err
			}
			res, err := client.ListProcesses(cmd.Context(), connect.NewRequest(&ctrlv1.ListProcessesRequest{WorkspaceId: args[0], IncludeExited: all}))
			if err != nil {
				return err
			}
			var rows [][]string
			for _, p := range res.Msg.GetProcesses() {
				rows = append(rows, processRow(p))
			}
			return out.print(cmd.OutOrStdout(), res.Msg, processHeader, rows)
		},
	}
	list.Flags().BoolVarP(&all, "all", "a", false, "list ended processes too")

	get := &cobra.Command{
		Use: "get WORKSPACE_ID PROCESS_ID", Short: "Show one process", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := processClient()
			if err != nil {
				return err
			}
			res, err := client.GetProcess(cmd.Context(), connect.NewRequest(&ctrlv1.GetProcessRequest{WorkspaceId: args[0], ProcessId: args[1]}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, processHeader, [][]string{processRow(res.Msg.GetProcess())})
		},
	}

	var signal string
	kill := &cobra.Command{
		Use: "kill WORKSPACE_ID PROCESS_ID", Short: "Send a signal (default TERM) to a process and its group", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sig, err := processSignal(signal)
			if err != nil {
				return err
			}
			client, err := processClient()
			if err != nil {
				return err
			}
			res, err := client.SignalProcess(cmd.Context(), connect.NewRequest(&ctrlv1.SignalProcessRequest{WorkspaceId: args[0], ProcessId: args[1], Signal: sig}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, []string{"PROCESS", "DELIVERED"}, [][]string{{args[1], strconv.FormatBool(res.Msg.GetDelivered())}})
		},
	}
	kill.Flags().StringVarP(&signal, "signal", "s", "TERM", "signal: HUP, INT, QUIT, KILL, USR1, USR2, TERM, CONT, STOP (or its number)")

	wait := &cobra.Command{
		Use: "wait WORKSPACE_ID PROCESS_ID", Short: "Wait for a process to end; exits with its status", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := processClient()
			if err != nil {
				return err
			}
			res, err := client.WaitProcess(cmd.Context(), connect.NewRequest(&ctrlv1.WaitProcessRequest{WorkspaceId: args[0], ProcessId: args[1]}))
			if err != nil {
				return err
			}
			code := exitCodeOfProcess(res.Msg.GetExit())
			if err := out.print(cmd.OutOrStdout(), res.Msg, []string{"PROCESS", "EXIT"}, [][]string{{args[1], strconv.Itoa(code)}}); err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	var follow bool
	logs := &cobra.Command{
		Use:   "logs WORKSPACE_ID PROCESS_ID",
		Short: "Print a process's output (stdout here, stderr to stderr); --follow streams it to the process's end",
		Long: `logs prints what the guest retains of a process's output (the last MiB of
each stream), stdout to this command's stdout and stderr to its stderr, and
exits 0. With --follow it goes on streaming the live output until the
process ends and exits with its status (128+N when signal N ended it), as
exec would have; Ctrl-C then ends only this command, never the process.
This is how a process started with "process start" or left by "exec
--detach" is watched again.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := processClient()
			if err != nil {
				return err
			}
			e := execution{client: client, workspaceID: args[0], out: out, cmd: cmd, watching: true, snapshot: !follow}
			return e.attach(cmd.Context(), args[1])
		},
	}
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "stream the live output until the process ends, then exit with its status")
	c.AddCommand(start, list, get, kill, wait, logs)
	return c
}

// processSignal reads TERM, SIGTERM or 15.
func processSignal(s string) (ctrlv1.ProcessSignal, error) {
	name := strings.ToUpper(s)
	if n, err := strconv.Atoi(s); err == nil {
		if _, ok := ctrlv1.ProcessSignal_name[int32(n)]; ok && n != 0 {
			return ctrlv1.ProcessSignal(n), nil
		}
	}
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if v, ok := ctrlv1.ProcessSignal_value["PROCESS_SIGNAL_"+name]; ok && v != 0 {
		return ctrlv1.ProcessSignal(v), nil
	}
	return 0, fmt.Errorf("signal %q: want one of HUP, INT, QUIT, KILL, USR1, USR2, TERM, CONT, STOP", s)
}
