package metrics_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/testenv"
)

// scrape GETs the Operator endpoint's /metrics with token ("" sends
// none).
func scrape(t *testing.T, c *testenv.Cluster, token string) (int, string) {
	t.Helper()
	return testenv.Scrape(t, c.Ctrl.Client.OperatorEndpoint+"/metrics", token)
}

var (
	parse = testenv.ParseMetrics
	value = testenv.MetricValue
)

// A create through the API moves the counters a scrape of the Operator
// endpoint's /metrics shows, which takes the operator key.
func TestMetricsAfterACreate(t *testing.T) {
	ctx := context.Background()
	c := testenv.New(t, testenv.FastFleet())
	c.StartNode(t, "node-a", "", t.TempDir())
	c.EnsureCapacity(t, "default", 1<<30)

	req := &ctrlv1.CreateVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "metrics-vol-1"}, Spec: &ctrlv1.VolumeSpec{CapacityBytes: 64 << 20}}
	res, err := c.Volumes.CreateVolume(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Volumes.CreateVolume(ctx, connect.NewRequest(req)); err != nil { // a replay: not admitted again
		t.Fatal(err)
	}
	id := res.Msg.GetVolume().GetVolumeId()
	testenv.WaitFor(t, "volume "+id+" AVAILABLE", func() bool {
		got, err := c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: id}))
		return err == nil && got.Msg.GetVolume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
	})
	if _, err := c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: "vol-missing"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("GetVolume of a missing Volume: %v", err)
	}

	// The runner counts the command's end after the Volume's write
	// committed: wait for it rather than race it.
	var families map[string]*dto.MetricFamily
	testenv.WaitFor(t, "CreateVolume counted as succeeded", func() bool {
		status, body := scrape(t, c, c.Ctrl.Client.OperatorToken)
		if status != http.StatusOK {
			t.Fatalf("GET /metrics with the operator key: %d\n%s", status, body)
		}
		families = parse(t, body)
		v, _ := value(families, "kibotos_commands_finished_total", map[string]string{"kind": "CreateVolume", "outcome": "succeeded"})
		return v >= 1
	})

	checks := []struct {
		name   string
		labels map[string]string
		min    float64
		max    float64 // 0: no bound
	}{
		{"kibotos_rpc_requests_total", map[string]string{"service": "kibotos.ctrl.v1.VolumeService", "method": "CreateVolume", "code": "ok"}, 2, 2},
		{"kibotos_rpc_requests_total", map[string]string{"service": "kibotos.ctrl.v1.VolumeService", "method": "GetVolume", "code": "not_found"}, 1, 1},
		{"kibotos_rpc_duration_seconds", map[string]string{"service": "kibotos.ctrl.v1.VolumeService", "method": "CreateVolume"}, 2, 2},
		// Operator calls (StartNode made a grant and set a capacity) and
		// the node endpoint's calls are counted too.
		{"kibotos_rpc_requests_total", map[string]string{"service": "kibotos.operator.v1.EnrollmentService", "method": "CreateEnrollmentGrant", "code": "ok"}, 1, 0},
		{"kibotos_rpc_requests_total", map[string]string{"service": "kibotos.node.v1.NodeSessionService", "method": "Enroll", "code": "ok"}, 1, 0},
		// A replay is not admitted again.
		{"kibotos_commands_admitted_total", map[string]string{"kind": "CreateVolume"}, 1, 1},
		{"kibotos_command_duration_seconds", map[string]string{"kind": "CreateVolume"}, 1, 1},
		// Final at admission: admitted and succeeded at once.
		{"kibotos_commands_admitted_total", map[string]string{"kind": "CreateEnrollmentGrant"}, 1, 0},
		{"kibotos_commands_finished_total", map[string]string{"kind": "CreateEnrollmentGrant", "outcome": "succeeded"}, 1, 0},
		{"kibotos_node_sessions_live", nil, 1, 1},
		{"kibotos_workspaces", map[string]string{"state": "available"}, 0, 0},
		{"kibotos_workspaces", map[string]string{"state": "creating"}, 0, 0},
		// Every admission above was a transaction, and each held the
		// database for some time.
		{"kibotos_store_transactions_total", nil, 5, 0},
		{"kibotos_store_transaction_seconds_total", nil, 1e-9, 0},
		{"go_goroutines", nil, 1, 0},
		{"process_cpu_seconds_total", nil, 0, 0},
	}
	for _, ch := range checks {
		v, found := value(families, ch.name, ch.labels)
		if !found || v < ch.min || (ch.max > 0 && v > ch.max) {
			t.Errorf("%s%v = %v (found %v), want in [%v, %v]", ch.name, ch.labels, v, found, ch.min, ch.max)
		}
	}
	if _, found := value(families, "kibotos_workspaces", map[string]string{"state": "deleted"}); found {
		t.Error("kibotos_workspaces reports deleted Workspaces")
	}

	// No key, an unknown key, a workspace key: refused as the operator
	// API refuses them.
	for _, tc := range []struct {
		name, token string
		status      int
	}{
		{"no key", "", http.StatusUnauthorized},
		{"unknown key", "kbt_not-a-key", http.StatusUnauthorized},
		{"workspace key", c.Ctrl.Client.Token, http.StatusForbidden},
	} {
		if status, body := scrape(t, c, tc.token); status != tc.status || strings.Contains(body, "kibotos_") {
			t.Errorf("%s: GET /metrics = %d, want %d\n%s", tc.name, status, tc.status, body)
		}
	}
	// Only the Operator endpoint serves it.
	for _, endpoint := range []string{c.Ctrl.Client.WorkspaceEndpoint, c.Ctrl.NodeEndpoint} {
		res, err := http.Get(endpoint + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s/metrics = %d, want 404", endpoint, res.StatusCode)
		}
	}
}

// Placements, refusals, observation batches, pools, the queue and the
// guests are on the scrape: a create placed on the node (its template
// boots nothing: it then fails at boot), and one refused by every node
// (it requires a capability no test node offers).
func TestMetricsOfPlacementsPoolsAndObservations(t *testing.T) {
	ctx := context.Background()
	c := testenv.New(t, testenv.FastFleet())
	c.StartNode(t, "node-a", "", t.TempDir())
	c.EnsureCapacity(t, "default", 1<<30)
	c.UnbootableCatalog(t)
	for id, required := range map[string][]string{"metrics-placed": nil, "metrics-refused": {capability.Sim}} {
		_, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
			Command: &ctrlv1.CommandMetadata{CommandId: id}, Spec: &ctrlv1.WorkspaceCreateSpec{
				Resources:    &ctrlv1.ResourceRequest{CpuMillis: 100, MemoryBytes: 128 << 20},
				Capabilities: &ctrlv1.CapabilityRequirements{Required: required},
			},
		}))
		if err != nil {
			t.Fatal(err)
		}
	}
	var families map[string]*dto.MetricFamily
	testenv.WaitFor(t, "a placement placed and one refused", func() bool {
		_, body := scrape(t, c, c.Ctrl.Client.OperatorToken)
		families = parse(t, body)
		placed, _ := value(families, "kibotos_placements_total", map[string]string{"outcome": "placed"})
		refused, _ := value(families, "kibotos_placement_refusals_total", map[string]string{"by": "nodes", "reason": "unavailable"})
		return placed >= 1 && refused >= 1
	})
	checks := []struct {
		name       string
		labels     map[string]string
		min, max   float64 // max 0: no bound
		wantZeroOK bool
	}{
		{"kibotos_placements_total", map[string]string{"outcome": "refused"}, 1, 0, false},
		{"kibotos_storage_pool_capacity_bytes", map[string]string{"pool": "default"}, 1 << 30, 0, false},
		// The placed create reserves its writable layer there until its
		// failed boot releases it.
		{"kibotos_storage_pool_reserved_bytes", map[string]string{"pool": "default"}, 0, 0, true},
		// The node's registration and observations were written in batches.
		{"kibotos_observation_batch_writes", nil, 1, 0, false},
		{"kibotos_observation_batch_commit_seconds", nil, 1, 0, false},
		{"kibotos_command_queue_depth", nil, 0, 10, true},
		// Nothing boots here.
		{"kibotos_guests_running", nil, 0, 0, true},
		{"kibotos_guests_unresponsive", nil, 0, 0, true},
		{"kibotos_guests_memory_saturated", nil, 0, 0, true},
		{"kibotos_guest_memory_kills", nil, 0, 0, true},
	}
	for _, ch := range checks {
		v, found := value(families, ch.name, ch.labels)
		if !found || v < ch.min || (ch.max > 0 && v > ch.max) || (!ch.wantZeroOK && v == 0) {
			t.Errorf("%s%v = %v (found %v), want in [%v, %v]", ch.name, ch.labels, v, found, ch.min, ch.max)
		}
	}
}
