// Package cli is the kibotos command line: the process commands (ctrl, node,
// dev, version) and the client nouns, which call the API through the
// generated Connect clients.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// Main runs the kibotos command line and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		var exit exitError
		switch {
		case errors.As(err, &exit):
		case ctx.Err() != nil && (errors.Is(err, context.Canceled) || connect.CodeOf(err) == connect.CodeCanceled):
			// Interrupted (Ctrl-C) while waiting on ctrl: what ctrl admitted
			// is not undone by the client going away.
			fmt.Fprintln(stderr, "kibotos: interrupted; anything ctrl admitted goes on there")
		default:
			fmt.Fprintln(stderr, "kibotos:", describe(err))
		}
		return exitCodeOf(err)
	}
	return 0
}

// describe renders an error; Connect errors show their canonical code and,
// on the lines below, what their ErrorDetail says.
func describe(err error) string {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return err.Error()
	}
	s := fmt.Sprintf("%s: %s", cerr.Code(), cerr.Message())
	var dial *net.OpError
	if errors.As(err, &dial) && dial.Op == "dial" {
		s += "\n  nothing listens there: is ctrl (`kibotos dev` or `kibotos ctrl`) running at the client configuration's endpoint?"
	}
	for _, d := range cerr.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*ctrlv1.ErrorDetail); ok {
				s += detailLines(ed)
			}
		}
	}
	return s
}

// detailLines are an ErrorDetail's facts, one indented line each.
func detailLines(d *ctrlv1.ErrorDetail) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, "\n  "+format, args...) }
	var facts []string
	if d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_UNSPECIFIED {
		facts = append(facts, "stage "+trimEnum(d.GetStage().String(), "FAILURE_STAGE_"))
	}
	if d.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNSPECIFIED {
		facts = append(facts, "reason "+trimEnum(d.GetReason().String(), "FAILURE_REASON_"))
	}
	if d.GetRetryable() {
		facts = append(facts, "retryable")
	}
	if len(facts) > 0 {
		line("%s", strings.Join(facts, ", "))
	}
	if d.GetField() != "" {
		line("field: %s", d.GetField())
	}
	if d.GetCommandId() != "" {
		line("command: %s", d.GetCommandId())
	}
	if w := d.GetObservedWorkspace(); w != nil {
		line("observed workspace: %s", strings.Join(workspaceRow(w), " "))
	}
	if v := d.GetObservedVolume(); v != nil {
		line("observed volume: %s", strings.Join(volumeRow(v), " "))
	}
	return b.String()
}

// NewRootCommand builds the whole command tree.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "kibotos",
		Short:         "Kibotos runs Workspaces: isolated microVMs on a fleet of nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddGroup(
		&cobra.Group{ID: "process", Title: "Processes:"},
		&cobra.Group{ID: "client", Title: "Client commands (read $KIBOTOS_HOME/config.env, overridden by KIBOTOS_* variables):"},
	)
	var out outputFlag
	out.register(root)
	for _, c := range []*cobra.Command{newCtrlCommand(), newNodeCommand(&out), newDevCommand(), newSimCommand(), newVersionCommand()} {
		c.GroupID = "process"
		root.AddCommand(c)
	}
	for _, c := range clientNouns(&out) {
		c.GroupID = "client"
		root.AddCommand(c)
	}
	argsShowUsage(root)
	nounsRefuseUnknownCommands(root)
	registerIDCompletion(root)
	return root
}

// argsShowUsage has the argument check of every command without
// subcommands add the command's usage line to its error: cobra's own
// says only "accepts 1 arg(s), received 0", not which arguments.
func argsShowUsage(c *cobra.Command) {
	for _, sub := range c.Commands() {
		argsShowUsage(sub)
	}
	check := c.Args
	if check == nil || c.HasSubCommands() {
		return
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return fmt.Errorf("%w\nusage: %s", err, cmd.UseLine())
		}
		return nil
	}
}

// nounsRefuseUnknownCommands gives every command group that runs nothing
// itself (the root, workspace, volume, ...) a RunE that shows its help, and
// has a word it does not know fail (see refuseUnknownCommand): cobra's own
// check gives the root no usage hint and exits 0 for the others.
func nounsRefuseUnknownCommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		nounsRefuseUnknownCommands(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.Args = refuseUnknownCommand
	c.DisableFlagsInUseLine = true
	c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
}

// refuseUnknownCommand is the Args of a command with subcommands that
// takes no argument itself: a word there is a mistyped subcommand, an
// error naming it, what was likely meant, and where the usage is.
func refuseUnknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, which it sets only in its own check
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return fmt.Errorf("%s\n\nRun '%s --help' for usage", msg, cmd.CommandPath())
}
