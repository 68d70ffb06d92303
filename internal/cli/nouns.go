package cli

import (
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
)

// clientNouns are the client command groups.
func clientNouns(out *outputFlag) []*cobra.Command {
	return []*cobra.Command{
		newWorkspaceCommand(out),
		newVolumeCommand(out),
		newPoolNoun(out),
		newTemplateCommand(out),
		newPlatformCommand(out),
		newTransferCommand(out),
		newEgressCommand(out),
		newResolverCommand(out),
		newOvercommitCommand(out),
		newEnrollmentCommand(out),
	}
}

func nodeRegistrationClient() (operatorv1connect.NodeRegistrationServiceClient, error) {
	return onOperator(operatorv1connect.NewNodeRegistrationServiceClient)
}

// nodeHeader's CPU and MEMORY are what placement has charged to the node
// over what it admits against (allocated/schedulable), EXECUTIONS what the
// node last reported running ("-" without a live session), POOLS the pools it declares (its default
// marked *): what an operator weighs before a drain or a move.
var nodeHeader = []string{"NODE", "STATUS", "ADMISSION", "INCARNATION", "ISOLATED", "CPU", "MEMORY", "EXECUTIONS", "POOLS"}

func nodeRow(n *operatorv1.NodeRegistration) []string {
	alloc, sched := n.GetAllocated(), n.GetSchedulable()
	var pools []string
	for _, p := range n.GetStoragePools() {
		name := p.GetStoragePool()
		if p.GetDefaultPool() {
			name += "*"
		}
		pools = append(pools, name)
	}
	executions := "" // a node without a live session reports nothing now
	if n.GetSession().GetLive() {
		executions = strconv.FormatUint(uint64(n.GetObservation().GetExecutionCount()), 10)
	}
	return []string{
		n.GetNodeId(),
		trimEnum(n.GetStatus().String(), "NODE_REGISTRATION_STATUS_"),
		trimEnum(n.GetAdmission().String(), "NODE_ADMISSION_"),
		strconv.FormatUint(n.GetIncarnation(), 10),
		strconv.FormatBool(n.GetIsolated()),
		fmt.Sprintf("%dm/%dm", alloc.GetCpuMillis(), sched.GetCpuMillis()),
		showSize(alloc.GetMemoryBytes()) + "/" + showSize(sched.GetMemoryBytes()),
		executions,
		strings.Join(pools, ","),
	}
}

func newNodeCommand(out *outputFlag) *cobra.Command {
	var agent agentFlags
	c := &cobra.Command{
		Use:   "node",
		Short: "Run the node agent on this host; node list|get|placements|drain|undrain|isolate|retire manage the fleet",
		Long: `Without a subcommand, node runs the node agent on this host: it enrolls with
ctrl once (--enrollment-grant, or $KIBOTOS_ENROLLMENT_GRANT), then holds its
control session, declares its storage pools and carries out what ctrl hands it.
Its state (credential, incarnation, applied operations) is kept in --state-dir.

With a subcommand it is the operator's client for node registrations.`,
		Args: refuseUnknownCommand, // the agent takes no argument: a word is a mistyped subcommand
		RunE: func(cmd *cobra.Command, _ []string) error { return agent.run(cmd) },
	}
	agent.register(c)
	list := &cobra.Command{
		Use: "list", Short: "List node registrations", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			all, err := everyPage((*operatorv1.ListNodeRegistrationsResponse).GetRegistrations, func(token string) (*connect.Response[operatorv1.ListNodeRegistrationsResponse], error) {
				return client.ListNodeRegistrations(cmd.Context(), connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &operatorv1.ListNodeRegistrationsResponse{Registrations: all}, nodeHeader, rowsOf(all, nodeRow))
		},
	}
	get := &cobra.Command{
		Use: "get NODE_ID", Short: "Show one node registration", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			res, err := client.GetNodeRegistration(cmd.Context(), connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: args[0]}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, nodeHeader, [][]string{nodeRow(res.Msg.GetRegistration())})
		},
	}
	c.AddCommand(append([]*cobra.Command{list, get, newNodePlacementsCommand(out)}, nodeLifecycleCommands(out)...)...)
	return c
}
