package node_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/testenv"
)

// The node serves its own /metrics on the loopback listener it is given,
// without authentication: the block file a CreateVolume made there is
// counted, and the execution gauges and the boot histogram are served
// (nothing boots here). A listener on another address is refused.
func TestNodeMetricsListener(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:0", ":0"} {
		if ln, err := node.ListenMetrics(addr); err == nil {
			ln.Close()
			t.Errorf("ListenMetrics(%q) opened a listener; want it refused (no authentication)", addr)
		}
	}
	ln, err := node.ListenMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/metrics"
	c := testenv.New(t, testenv.FastFleet())
	c.StartNodeWith(t, "node-a", "", func(cfg *node.Config) { cfg.MetricsListener = ln }, node.Pool{Name: "default", Dir: t.TempDir(), Default: true})
	c.EnsureCapacity(t, "default", testenv.DefaultPoolCapacity)

	ctx := context.Background()
	res, err := c.Volumes.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "node-metrics-vol"}, Spec: &ctrlv1.VolumeSpec{CapacityBytes: 64 << 20},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetVolume().GetVolumeId()
	testenv.WaitFor(t, "volume "+id+" AVAILABLE", func() bool {
		got, err := c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: id}))
		return err == nil && got.Msg.GetVolume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
	})

	status, body := testenv.Scrape(t, url, "")
	if status != http.StatusOK {
		t.Fatalf("GET %s = %d\n%s", url, status, body)
	}
	families := testenv.ParseMetrics(t, body)
	for _, ch := range []struct {
		name     string
		labels   map[string]string
		min, max float64
	}{
		{"kibotos_node_operations_total", map[string]string{"operation": "EnsureBlockFile", "code": "ok"}, 1, 1},
		{"kibotos_node_operation_duration_seconds", map[string]string{"operation": "EnsureBlockFile"}, 1, 1},
		{"kibotos_node_executions_running", nil, 0, 0},
		{"kibotos_node_guest_probes_failing", nil, 0, 0},
		{"kibotos_node_vm_boot_seconds", nil, 0, 0},
		{"go_goroutines", nil, 1, 1e9},
	} {
		if v, found := testenv.MetricValue(families, ch.name, ch.labels); !found || v < ch.min || v > ch.max {
			t.Errorf("%s%v = %v (found %v), want in [%v, %v]", ch.name, ch.labels, v, found, ch.min, ch.max)
		}
	}
}
