package e2e_test

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/clientconfig"
)

func (d *dev) metrics(token string) ctrlv1connect.MetricsServiceClient {
	return ctrlv1connect.NewMetricsServiceClient(httpClientWithToken(token), d.env[clientconfig.EnvWorkspaceEndpoint])
}

func (d *dev) sample(t *testing.T, id string) *ctrlv1.MetricsSample {
	t.Helper()
	res, err := d.metrics(d.env[clientconfig.EnvToken]).GetWorkspaceMetrics(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceMetricsRequest{WorkspaceId: id}))
	if err != nil {
		t.Fatalf("GetWorkspaceMetrics: %v", err)
	}
	return res.Msg.GetSample()
}

// checkMetrics reads samples of a running Workspace through the API and
// the CLI and judges them against the Workspace: plausible figures (the
// CPU average itself is unit-tested on synthetic /proc/stat readings in
// internal/guest), the filesystems in MetricsFilesystem's order, network
// counters that move when the guest sends (a DNS query the slot refuses
// under DENY_ALL), and the scope a session needs.
func checkMetrics(t *testing.T, d *dev, id string) {
	w := d.workspace(t, id)
	before := time.Now()
	s := d.sample(t, id)
	res := w.GetSpec().GetResources()
	cpus := max((res.GetCpuMillis()+999)/1000, 1)
	if s.GetGeneration() != w.GetGeneration() || s.GetCpuLimitMillis() != res.GetCpuMillis() || s.GetCpuUsageMillis() > cpus*1000 {
		t.Errorf("sample %v of workspace generation %d, cpu_millis %d", s, w.GetGeneration(), res.GetCpuMillis())
	}
	if s.GetMemoryTotalBytes() == 0 || s.GetMemoryTotalBytes() >= res.GetMemoryBytes() || s.GetMemoryUsedBytes() == 0 || s.GetMemoryUsedBytes() >= s.GetMemoryTotalBytes() {
		t.Errorf("memory used %d of %d, memory_bytes %d", s.GetMemoryUsedBytes(), s.GetMemoryTotalBytes(), res.GetMemoryBytes())
	}
	if s.GetUptime().AsDuration() <= 0 || s.GetProcessCount() == 0 {
		t.Errorf("uptime %v, %d processes", s.GetUptime().AsDuration(), s.GetProcessCount())
	}
	if at := s.GetSampledAt().AsTime(); at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("sampled_at %v, asked at %v", at, before)
	}
	want := append(append([]string{"/"}, w.GetPersistentPaths()...), "/tmp", "/run")
	var paths []string
	for _, fs := range s.GetFilesystems() {
		paths = append(paths, fs.GetPath())
		if fs.GetCapacityBytes() == 0 || fs.GetUsedBytes() > fs.GetCapacityBytes() || fs.GetCapacityInodes() == 0 || fs.GetUsedInodes() == 0 ||
			fs.GetUsedInodes() > fs.GetCapacityInodes() {
			t.Errorf("filesystem %v", fs)
		}
	}
	if !slices.Equal(paths, want) {
		t.Errorf("filesystems %v, want %v", paths, want)
	}
	if root := s.GetFilesystems()[0]; root.GetCapacityBytes() > res.GetWritableLayerCapacityBytes() && res.GetWritableLayerCapacityBytes() != 0 {
		t.Errorf("/ holds %d bytes, more than the writable layer's %d", root.GetCapacityBytes(), res.GetWritableLayerCapacityBytes())
	}

	// The guest sends a query the node's slot refuses: both counters move
	// by at least a frame.
	d.kibotos(t, "workspace", "exec", id, "--", "nslookup", "example.com")
	next := d.sample(t, id)
	if next.GetNetworkSentBytes() < s.GetNetworkSentBytes()+64 || next.GetNetworkReceivedBytes() < s.GetNetworkReceivedBytes()+64 {
		t.Errorf("network counters went from %d/%d (received/sent) to %d/%d over a DNS query", s.GetNetworkReceivedBytes(), s.GetNetworkSentBytes(),
			next.GetNetworkReceivedBytes(), next.GetNetworkSentBytes())
	}
	if next.GetUptime().AsDuration() <= s.GetUptime().AsDuration() {
		t.Errorf("uptime went from %v to %v", s.GetUptime().AsDuration(), next.GetUptime().AsDuration())
	}

	// The CLI: the API's response, and a table with the filesystems.
	var printed ctrlv1.GetWorkspaceMetricsResponse
	d.kibotosJSON(t, &printed, "workspace", "metrics", id)
	if printed.GetSample().GetGeneration() != w.GetGeneration() || len(printed.GetSample().GetFilesystems()) != len(want) {
		t.Errorf("metrics -o json: %v", &printed)
	}
	table := d.mustKibotos(t, "workspace", "metrics", id)
	t.Logf("workspace metrics:\n%s", table)
	for _, part := range []string{"GENERATION", "CPU", id, "INODES-USED", "/tmp"} {
		if !strings.Contains(table, part) {
			t.Errorf("metrics table without %q:\n%s", part, table)
		}
	}

	// A session needs the METRICS scope; one with it reads a sample.
	apiKey := d.env[clientconfig.EnvToken]
	for _, scope := range []ctrlv1.DataPlaneScope{ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_FILE, ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_METRICS} {
		issued, err := d.sessions(apiKey).IssueDataPlaneSession(context.Background(), connect.NewRequest(&ctrlv1.IssueDataPlaneSessionRequest{
			WorkspaceId: id, Scopes: []ctrlv1.DataPlaneScope{scope}}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.metrics(issued.Msg.GetSession().GetToken()).GetWorkspaceMetrics(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceMetricsRequest{WorkspaceId: id}))
		if scope == ctrlv1.DataPlaneScope_DATA_PLANE_SCOPE_FILE {
			checkDenied(t, "metrics with a FILE-only session", err, connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED)
		} else if err != nil {
			t.Errorf("metrics with a METRICS session: %v", err)
		}
	}
	_, err := d.metrics(apiKey).GetWorkspaceMetrics(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceMetricsRequest{WorkspaceId: "ws-none"}))
	if connect.CodeOf(err) != connect.CodeNotFound || stageOf(err) != ctrlv1.FailureStage_FAILURE_STAGE_READING_METRICS {
		t.Errorf("metrics of a missing Workspace: %v (stage %v)", err, stageOf(err))
	}
	_, err = d.metrics(apiKey).GetWorkspaceMetrics(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceMetricsRequest{}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || fieldOf(err) != "workspace_id" || stageOf(err) != ctrlv1.FailureStage_FAILURE_STAGE_READING_METRICS {
		t.Errorf("metrics without a workspace_id: %v (field %q, stage %v)", err, fieldOf(err), stageOf(err))
	}
	checkMetricsOfAFrozenGuest(t, d, id)
}

// checkMetricsOfAFrozenGuest freezes the VMM (SIGSTOP): a guest that does
// not answer is unavailable, retryable, and answers again once thawed.
func checkMetricsOfAFrozenGuest(t *testing.T, d *dev, id string) {
	pid := vmmPID(t, id)
	thaw := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(thaw)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	client := d.metrics(d.env[clientconfig.EnvToken])
	_, err := client.GetWorkspaceMetrics(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceMetricsRequest{WorkspaceId: id}))
	thaw()
	if connect.CodeOf(err) != connect.CodeUnavailable || stageOf(err) != ctrlv1.FailureStage_FAILURE_STAGE_READING_METRICS ||
		!strings.Contains(err.Error(), "did not answer") {
		t.Errorf("metrics of a frozen guest: %v (stage %v), want unavailable: the guest did not answer", err, stageOf(err))
	}
	waitUntil(t, "a sample once the guest is thawed", time.Minute, func() bool {
		_, err := client.GetWorkspaceMetrics(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceMetricsRequest{WorkspaceId: id}))
		return err == nil
	})
}

// checkMetricsStopped checks a stopped Workspace has no sample to give.
func checkMetricsStopped(t *testing.T, d *dev, id string) {
	_, err := d.metrics(d.env[clientconfig.EnvToken]).GetWorkspaceMetrics(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceMetricsRequest{WorkspaceId: id}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || stageOf(err) != ctrlv1.FailureStage_FAILURE_STAGE_READING_METRICS {
		t.Errorf("metrics of a stopped Workspace: %v (stage %v)", err, stageOf(err))
	}
}
