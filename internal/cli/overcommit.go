package cli

import (
	"strconv"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
)

var defaultsHeader = []string{"CPU", "MEMORY", "VERSION", "UPDATED"}

// ratio shows thousandths as a multiple: 1500 is 1.5x.
func ratio(thousandths uint32) string {
	return strconv.FormatFloat(float64(thousandths)/1000, 'f', -1, 64) + "x"
}

func defaultsRow(d *operatorv1.OvercommitDefaults) []string {
	updated := "built-in"
	if d.GetUpdatedAt() != nil {
		updated = d.GetUpdatedAt().AsTime().Format("2006-01-02T15:04:05Z07:00")
	}
	return []string{ratio(d.GetCpuThousandths()), ratio(d.GetMemoryThousandths()), strconv.FormatUint(d.GetVersion(), 10), updated}
}

var nodeOvercommitHeader = []string{"NODE", "RESOURCE", "RATIO", "SOURCE", "HOST", "SCHEDULABLE", "ALLOCATED", "REGISTRATION_VERSION"}

// nodeOvercommitRows are a node's two ratios, where each comes from and
// what they make schedulable (CPU in millis, memory as every table's sizes).
func nodeOvercommitRows(n *operatorv1.NodeRegistration) [][]string {
	host, sched, alloc := n.GetObservation().GetResources(), n.GetSchedulable(), n.GetAllocated()
	version := strconv.FormatUint(n.GetRegistrationVersion(), 10)
	row := func(resource string, r *operatorv1.OvercommitRatio, cell func(uint64) string, h, s, a uint64) []string {
		return []string{n.GetNodeId(), resource, ratio(r.GetThousandths()), trimEnum(r.GetSource().String(), "OVERCOMMIT_SOURCE_"),
			cell(h), cell(s), cell(a), version}
	}
	millis := func(m uint64) string { return strconv.FormatUint(m, 10) + "m" }
	return [][]string{
		row("cpu", n.GetOvercommit().GetCpu(), millis, uint64(host.GetCpuMillis()), uint64(sched.GetCpuMillis()), uint64(alloc.GetCpuMillis())),
		row("memory", n.GetOvercommit().GetMemory(), showSize, host.GetMemoryBytes(), sched.GetMemoryBytes(), alloc.GetMemoryBytes()),
	}
}

// newOvercommitCommand is `kibotos overcommit get|set-defaults|set-node`.
func newOvercommitCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{
		Use:   "overcommit",
		Short: "Read and set overcommit ratios (cluster-wide defaults and per-node overrides)",
		Long: `A node's schedulable CPU and memory are the host resources it reports times
the ratio in effect for it: its own override, or else the cluster-wide
default. Ratios are given in thousandths: 1000 is 1x, 4500 is 4.5x, each in
[1, 16000]. A change takes effect at the next placement; lowering a ratio
evicts nothing.`,
	}
	c.AddCommand(newOvercommitGetCommand(out), newOvercommitSetDefaultsCommand(out), newOvercommitSetNodeCommand(out))
	return c
}

func newOvercommitGetCommand(out *outputFlag) *cobra.Command {
	return &cobra.Command{
		Use: "get [NODE_ID]", Args: cobra.MaximumNArgs(1),
		Short: "Show the cluster-wide defaults, or the ratios in effect on one node and their source",
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				res, err := client.GetNodeRegistration(cmd.Context(), connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: args[0]}))
				if err != nil {
					return err
				}
				return out.print(cmd.OutOrStdout(), res.Msg.GetRegistration().GetOvercommit(), nodeOvercommitHeader, nodeOvercommitRows(res.Msg.GetRegistration()))
			}
			res, err := client.GetOvercommitDefaults(cmd.Context(), connect.NewRequest(&operatorv1.GetOvercommitDefaultsRequest{}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg.GetDefaults(), defaultsHeader, [][]string{defaultsRow(res.Msg.GetDefaults())})
		},
	}
}

func newOvercommitSetDefaultsCommand(out *outputFlag) *cobra.Command {
	var flags nodeCommandFlags
	var cpu, memory uint32
	c := &cobra.Command{
		Use: "set-defaults --cpu THOUSANDTHS --memory THOUSANDTHS", Args: cobra.NoArgs,
		Short: "Replace the cluster-wide ratios (a ratio not given keeps its current value)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			req := &operatorv1.SetOvercommitDefaultsRequest{
				Command: newCommandMetadata(flags.commandID), ExpectedVersion: flags.expected, CpuThousandths: cpu, MemoryThousandths: memory,
			}
			if !cmd.Flags().Changed("expected-version") || !cmd.Flags().Changed("cpu") || !cmd.Flags().Changed("memory") {
				cur, err := client.GetOvercommitDefaults(cmd.Context(), connect.NewRequest(&operatorv1.GetOvercommitDefaultsRequest{}))
				if err != nil {
					return err
				}
				d := cur.Msg.GetDefaults()
				if !cmd.Flags().Changed("expected-version") {
					req.ExpectedVersion = d.GetVersion()
				}
				if !cmd.Flags().Changed("cpu") {
					req.CpuThousandths = d.GetCpuThousandths()
				}
				if !cmd.Flags().Changed("memory") {
					req.MemoryThousandths = d.GetMemoryThousandths()
				}
			}
			res, err := client.SetOvercommitDefaults(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, defaultsHeader, [][]string{defaultsRow(res.Msg.GetDefaults())})
		},
	}
	c.Flags().StringVar(&flags.commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	c.Flags().Uint64Var(&flags.expected, "expected-version", 0, "refuse unless the defaults' version is still this one (default: the current one)")
	c.Flags().Uint32Var(&cpu, "cpu", 0, "CPU ratio in thousandths (1000 is 1x)")
	c.Flags().Uint32Var(&memory, "memory", 0, "memory ratio in thousandths (1000 is 1x)")
	return c
}

func newOvercommitSetNodeCommand(out *outputFlag) *cobra.Command {
	var flags nodeCommandFlags
	var cpu, memory uint32
	c := &cobra.Command{
		Use: "set-node NODE_ID [--cpu THOUSANDTHS] [--memory THOUSANDTHS]", Args: cobra.ExactArgs(1),
		Short: "Replace one node's overrides; a ratio not given clears its override (the node follows the default)",
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			req := &operatorv1.SetNodeOvercommitRequest{Command: newCommandMetadata(flags.commandID), NodeId: args[0], ExpectedRegistrationVersion: flags.expected}
			if cmd.Flags().Changed("cpu") {
				req.CpuThousandths = &cpu
			}
			if cmd.Flags().Changed("memory") {
				req.MemoryThousandths = &memory
			}
			if !cmd.Flags().Changed("expected-version") {
				cur, err := client.GetNodeRegistration(cmd.Context(), connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: args[0]}))
				if err != nil {
					return err
				}
				req.ExpectedRegistrationVersion = cur.Msg.GetRegistration().GetRegistrationVersion()
			}
			res, err := client.SetNodeOvercommit(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, nodeOvercommitHeader, nodeOvercommitRows(res.Msg.GetRegistration()))
		},
	}
	c.Flags().StringVar(&flags.commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	c.Flags().Uint64Var(&flags.expected, "expected-version", 0, "refuse unless the node's registration_version is still this one (default: the current one)")
	c.Flags().Uint32Var(&cpu, "cpu", 0, "the node's CPU ratio in thousandths (1000 is 1x); not given: follow the default")
	c.Flags().Uint32Var(&memory, "memory", 0, "the node's memory ratio in thousandths; not given: follow the default")
	return c
}
