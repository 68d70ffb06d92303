package metrics_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/testenv"
)

// A Workspace on a real microVM moves the boot, execution and operation
// families of its node's listener, and ctrl's placement and guest
// families.
func TestMetricsOfARunningWorkspace(t *testing.T) {
	ctx := context.Background()
	ln, err := node.ListenMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := testenv.New(t, testenv.FastFleet())
	c.BootableCatalog(t)
	n := c.StartNodeWith(t, "node-a", "", func(cfg *node.Config) { cfg.MetricsListener = ln }, node.Pool{Name: "default", Dir: t.TempDir(), Default: true})
	t.Cleanup(n.PowerOff) // a VM outlives its agent
	c.EnsureCapacity(t, "default", testenv.DefaultPoolCapacity)

	res, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "metrics-vm-create"}, Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 << 20, WritableLayerCapacityBytes: 256 << 20},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	deadline := time.Now().Add(5 * time.Minute) // a first boot under TCG fetches and boots slowly
	for {
		got, err := c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
		if err != nil {
			t.Fatal(err)
		}
		if s := got.Msg.GetWorkspace().GetState(); s == ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
			break
		} else if s == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED || time.Now().After(deadline) {
			t.Fatalf("Workspace %s is %v, want AVAILABLE", id, got.Msg.GetWorkspace())
		}
		time.Sleep(200 * time.Millisecond) // polling a condition, not waiting for one
	}

	nodeURL := "http://" + ln.Addr().String() + "/metrics"
	var nodeFamilies, ctrlFamilies map[string]*dto.MetricFamily
	testenv.WaitFor(t, "ctrl to hear of the running guest", func() bool {
		_, body := scrape(t, c, c.Ctrl.Client.OperatorToken)
		ctrlFamilies = parse(t, body)
		v, _ := value(ctrlFamilies, "kibotos_guests_running", nil)
		return v == 1
	})
	_, body := testenv.Scrape(t, nodeURL, "")
	nodeFamilies = parse(t, body)
	for _, ch := range []struct {
		families map[string]*dto.MetricFamily
		name     string
		labels   map[string]string
		min, max float64
	}{
		{nodeFamilies, "kibotos_node_vm_boot_seconds", nil, 1, 1},
		{nodeFamilies, "kibotos_node_executions_running", nil, 1, 1},
		{nodeFamilies, "kibotos_node_guest_probes_failing", nil, 0, 0},
		{nodeFamilies, "kibotos_node_operations_total", map[string]string{"operation": "StartExecution", "code": "ok"}, 1, 1},
		{ctrlFamilies, "kibotos_placements_total", map[string]string{"outcome": "placed"}, 1, 1},
		{ctrlFamilies, "kibotos_guests_unresponsive", nil, 0, 0},
		{ctrlFamilies, "kibotos_workspaces", map[string]string{"state": "available"}, 1, 1},
	} {
		if v, found := value(ch.families, ch.name, ch.labels); !found || v < ch.min || v > ch.max {
			t.Errorf("%s%v = %v (found %v), want in [%v, %v]", ch.name, ch.labels, v, found, ch.min, ch.max)
		}
	}
}
