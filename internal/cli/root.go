// Package cli is the kibotos command line: the process commands (ctrl, node,
// dev, version) and the client nouns, which call the API through the
// generated Connect clients.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
)

// Main runs the kibotos command line and returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		var exit exitError
		if !errors.As(err, &exit) {
			fmt.Fprintln(stderr, "kibotos:", describe(err))
		}
		return exitCodeOf(err)
	}
	return 0
}

// describe renders an error; Connect errors show their canonical code.
func describe(err error) string {
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		return fmt.Sprintf("%s: %s", cerr.Code(), cerr.Message())
	}
	return err.Error()
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
	root.PersistentFlags().VarP(&out, "output", "o", "output format: table or json (the API's messages as protojson)")
	for _, c := range []*cobra.Command{newCtrlCommand(), newNodeCommand(&out), newDevCommand(), newSimCommand(), newVersionCommand()} {
		c.GroupID = "process"
		root.AddCommand(c)
	}
	for _, c := range clientNouns(&out) {
		c.GroupID = "client"
		root.AddCommand(c)
	}
	return root
}
