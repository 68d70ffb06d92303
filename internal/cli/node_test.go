package cli_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/cli"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/testenv"
)

// kibotos runs the CLI against the cluster and returns its exit code and
// output.
func kibotos(t *testing.T, c *testenv.Cluster, args ...string) (int, string, string) {
	t.Helper()
	useOperator(t, c)
	var stdout, stderr strings.Builder
	code := cli.Main(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// useOperator points the client configuration at c's Operator endpoint
// only.
func useOperator(t *testing.T, c *testenv.Cluster) {
	t.Setenv(clientconfig.EnvConfig, filepath.Join(t.TempDir(), "none.env"))
	t.Setenv(clientconfig.EnvOperatorEndpoint, c.Ctrl.Client.OperatorEndpoint)
	t.Setenv(clientconfig.EnvOperatorToken, c.Ctrl.Client.OperatorToken)
}

// The node lifecycle from the command line: tables by default, the API's
// messages with -o json, the API's refusals as errors.
func TestNodeLifecycleCommands(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	n := c.StartNode(t, "node-a", "", "")

	// What placement charged over what it admits against, what runs there,
	// the pools (the default marked *): one word a cell.
	code, out, errOut := kibotos(t, c, "node", "get", "node-a", "--no-headers")
	reg := c.Registration(t, "node-a")
	want := fmt.Sprintf("node-a READY ADMITTED %d false 0m/%dm 0B/", reg.GetIncarnation(), reg.GetSchedulable().GetCpuMillis())
	if cells := strings.Fields(out); code != 0 || !strings.HasPrefix(strings.Join(cells, " "), want) || len(cells) != 9 || cells[7] != "0" || cells[8] != "default*" {
		t.Errorf("node get: exit %d, %q, want %q... 0 default*\n%s", code, out, want, errOut)
	}

	code, out, errOut = kibotos(t, c, "node", "drain", "node-a")
	if code != 0 || !strings.Contains(out, "NODE") || !strings.Contains(out, "DRAINED") {
		t.Errorf("node drain: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotos(t, c, "node", "undrain", "node-a", "-o", "json")
	undrained := &operatorv1.CancelNodeDrainResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), undrained) != nil || undrained.GetRegistration().GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY {
		t.Errorf("node undrain -o json: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = kibotos(t, c, "node", "isolate", "node-a")
	if code == 0 || !strings.Contains(errOut, "failed_precondition") {
		t.Errorf("node isolate of a connected node: exit %d, %s", code, errOut)
	}

	n.Stop(t)
	c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	code, out, errOut = kibotos(t, c, "node", "isolate", "node-a")
	if code != 0 || !strings.Contains(out, "FAILED_WORKSPACES") || !strings.Contains(out, "true") {
		t.Errorf("node isolate: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotos(t, c, "node", "retire", "node-a", "--command-id", "retire-1", "-o", "json")
	retired := &operatorv1.RetireNodeResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), retired) != nil || retired.GetRegistration().GetAdmission() != operatorv1.NodeAdmission_NODE_ADMISSION_RETIRED {
		t.Errorf("node retire -o json: exit %d\n%s%s", code, out, errOut)
	}
	code, again, _ := kibotos(t, c, "node", "retire", "node-a", "--command-id", "retire-1", "-o", "json")
	if code != 0 || again != out {
		t.Errorf("node retire replayed with its --command-id: exit %d\n%s", code, again)
	}
	code, _, errOut = kibotos(t, c, "node", "drain", "node-a")
	if code == 0 || !strings.Contains(errOut, "retired") {
		t.Errorf("node drain of a retired node: exit %d, %s", code, errOut)
	}
	code, _, errOut = kibotos(t, c, "node", "undrain", "node-z")
	if code == 0 || !strings.Contains(errOut, "not_found") {
		t.Errorf("node undrain of an unknown node: exit %d, %s", code, errOut)
	}
}
