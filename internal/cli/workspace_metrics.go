package cli

import (
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

var metricsHeader = []string{"WORKSPACE", "GENERATION", "UPTIME", "CPU", "MEMORY", "PROCESSES", "NET-RX", "NET-TX"}

var metricsFilesystemHeader = []string{"PATH", "SIZE", "USED", "INODES", "INODES-USED"}

func newWorkspaceMetricsCommand(out *outputFlag) *cobra.Command {
	return &cobra.Command{
		Use: "metrics WORKSPACE_ID", Short: "Show a running Workspace's resource usage now", Args: cobra.ExactArgs(1),
		Long: `metrics asks the guest and its host for one sample (nothing is stored): the
guest's uptime, its CPU use averaged over the last 10 seconds in thousandths of
a CPU against the Workspace's limit (250m/1000m), the memory its kernel counts
as used against what it manages, the processes, the bytes its network
interface received and sent since the execution started as the host counts
them, and below, each filesystem: / (the writable layer), the Volume, /tmp and
/run. -o json or yaml prints the API's response.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := onWorkspace(ctrlv1connect.NewMetricsServiceClient)
			if err != nil {
				return err
			}
			res, err := client.GetWorkspaceMetrics(cmd.Context(), connect.NewRequest(&ctrlv1.GetWorkspaceMetricsRequest{WorkspaceId: args[0]}))
			if err != nil {
				return err
			}
			s := res.Msg.GetSample()
			if err := out.print(cmd.OutOrStdout(), res.Msg, metricsHeader, [][]string{metricsRow(args[0], s)}); err != nil {
				return err
			}
			if out.structured() || out.quiet || out.is("name") || len(s.GetFilesystems()) == 0 {
				return nil
			}
			var rows [][]string
			for _, fs := range s.GetFilesystems() {
				rows = append(rows, []string{fs.GetPath(), showSize(fs.GetCapacityBytes()), showSize(fs.GetUsedBytes()),
					strconv.FormatUint(fs.GetCapacityInodes(), 10), strconv.FormatUint(fs.GetUsedInodes(), 10)})
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return out.print(cmd.OutOrStdout(), res.Msg, metricsFilesystemHeader, rows)
		},
	}
}

// metricsRow is a sample's figures for people: CPU in thousandths as
// kubectl writes them (250m), sizes with units.
func metricsRow(id string, s *ctrlv1.MetricsSample) []string {
	return []string{
		id,
		strconv.FormatUint(s.GetGeneration(), 10),
		s.GetUptime().AsDuration().Round(time.Second).String(),
		fmt.Sprintf("%dm/%dm", s.GetCpuUsageMillis(), s.GetCpuLimitMillis()),
		showSize(s.GetMemoryUsedBytes()) + "/" + showSize(s.GetMemoryTotalBytes()),
		strconv.FormatUint(uint64(s.GetProcessCount()), 10),
		showSize(s.GetNetworkReceivedBytes()),
		showSize(s.GetNetworkSentBytes()),
	}
}
