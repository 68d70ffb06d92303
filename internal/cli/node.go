package cli

import (
	"strconv"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
)

// nodeCommandFlags are the flags every node lifecycle command takes.
type nodeCommandFlags struct {
	commandID string
	expected  uint64
}

func (f *nodeCommandFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	c.Flags().Uint64Var(&f.expected, "expected-version", 0, "refuse unless the registration_version is still this one")
}

// expectedVersion is the --expected-version given, or nil.
func (f *nodeCommandFlags) expectedVersion(c *cobra.Command) *uint64 {
	if !c.Flags().Changed("expected-version") {
		return nil
	}
	return &f.expected
}

var isolateHeader = []string{"NODE", "STATUS", "INCARNATION", "ISOLATED", "FAILED_WORKSPACES", "RELEASED_VOLUMES", "RELEASED_LAYERS"}

var retireHeader = []string{"NODE", "STATUS", "ADMISSION", "REVOKED_GRANTS"}

// nodeLifecycleCommands are `node drain|undrain|isolate|retire NODE_ID`.
func nodeLifecycleCommands(out *outputFlag) []*cobra.Command {
	var flags nodeCommandFlags
	drain := &cobra.Command{
		Use: "drain NODE_ID", Args: cobra.ExactArgs(1),
		Short: "Stop new placement on a node; it reads DRAINED once nothing runs there",
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			res, err := client.DrainNode(cmd.Context(), connect.NewRequest(&operatorv1.DrainNodeRequest{
				Command: newCommandMetadata(flags.commandID), NodeId: args[0], ExpectedRegistrationVersion: flags.expectedVersion(cmd),
			}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, nodeHeader, [][]string{nodeRow(res.Msg.GetRegistration())})
		},
	}
	undrain := &cobra.Command{
		Use: "undrain NODE_ID", Args: cobra.ExactArgs(1),
		Short: "Cancel a node's drain: it takes new placements again",
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			res, err := client.CancelNodeDrain(cmd.Context(), connect.NewRequest(&operatorv1.CancelNodeDrainRequest{
				Command: newCommandMetadata(flags.commandID), NodeId: args[0], ExpectedRegistrationVersion: flags.expectedVersion(cmd),
			}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, nodeHeader, [][]string{nodeRow(res.Msg.GetRegistration())})
		},
	}
	retire := &cobra.Command{
		Use: "retire NODE_ID", Args: cobra.ExactArgs(1),
		Short: "End a DRAINED or isolated node for good; its node_id is never used again",
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			res, err := client.RetireNode(cmd.Context(), connect.NewRequest(&operatorv1.RetireNodeRequest{
				Command: newCommandMetadata(flags.commandID), NodeId: args[0], ExpectedRegistrationVersion: flags.expectedVersion(cmd),
			}))
			if err != nil {
				return err
			}
			n := res.Msg.GetRegistration()
			return out.print(cmd.OutOrStdout(), res.Msg, retireHeader, [][]string{{
				n.GetNodeId(), trimEnum(n.GetStatus().String(), "NODE_REGISTRATION_STATUS_"), trimEnum(n.GetAdmission().String(), "NODE_ADMISSION_"),
				strconv.FormatUint(res.Msg.GetRevokedEnrollmentGrants(), 10),
			}})
		},
	}
	for _, c := range []*cobra.Command{drain, undrain, retire} {
		flags.register(c)
	}
	return []*cobra.Command{drain, undrain, newNodeIsolateCommand(out), retire}
}

func newNodeIsolateCommand(out *outputFlag) *cobra.Command {
	var flags nodeCommandFlags
	var incarnation uint64
	c := &cobra.Command{
		Use: "isolate NODE_ID", Args: cobra.ExactArgs(1),
		Short: "Declare a node's host powered off or cut off from its pools, and release what it held",
		Long: `isolate records your assertion that the node can no longer write to any of its
storage pools: its host is powered off, or cut off from its pools. ctrl cannot
check it. Every Workspace that executed on the node fails (unavailable,
retryable) and can start elsewhere; a node that is in fact still writing
corrupts the block files it has open. ctrl refuses while the node holds a
live control session.

The isolation applies to one incarnation: --incarnation, by default the one
the node's registration shows now.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("incarnation") {
				got, err := client.GetNodeRegistration(cmd.Context(), connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: args[0]}))
				if err != nil {
					return err
				}
				incarnation = got.Msg.GetRegistration().GetIncarnation()
			}
			res, err := client.IsolateNode(cmd.Context(), connect.NewRequest(&operatorv1.IsolateNodeRequest{
				Command: newCommandMetadata(flags.commandID), NodeId: args[0], Incarnation: incarnation,
				ExpectedRegistrationVersion: flags.expectedVersion(cmd),
			}))
			if err != nil {
				return err
			}
			n := res.Msg.GetRegistration()
			return out.print(cmd.OutOrStdout(), res.Msg, isolateHeader, [][]string{{
				n.GetNodeId(), trimEnum(n.GetStatus().String(), "NODE_REGISTRATION_STATUS_"),
				strconv.FormatUint(n.GetIncarnation(), 10), strconv.FormatBool(n.GetIsolated()),
				strconv.FormatUint(res.Msg.GetFailedWorkspaces(), 10), strconv.FormatUint(res.Msg.GetReleasedVolumes(), 10),
				strconv.FormatUint(res.Msg.GetReleasedRetainedLayers(), 10),
			}})
		},
	}
	flags.register(c)
	c.Flags().Uint64Var(&incarnation, "incarnation", 0, "the incarnation you powered off or cut off (default: the current one)")
	return c
}
