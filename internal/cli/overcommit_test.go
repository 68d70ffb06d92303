package cli_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/testenv"
)

// kibotos overcommit: the defaults and a node's ratios as tables or the
// API's messages, set-defaults keeping a ratio not given, set-node
// clearing one, the API's refusals as errors.
func TestOvercommitCommands(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	c.StartNode(t, "node-a", "", "")

	code, out, errOut := kibotos(t, c, "overcommit", "get")
	if code != 0 || !strings.Contains(out, "CPU") || !strings.Contains(out, "1x") || !strings.Contains(out, "built-in") {
		t.Errorf("overcommit get: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotos(t, c, "overcommit", "set-defaults", "--cpu", "4500", "-o", "json")
	d := &operatorv1.SetOvercommitDefaultsResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), d) != nil || d.GetDefaults().GetCpuThousandths() != 4500 ||
		d.GetDefaults().GetMemoryThousandths() != 1000 || d.GetDefaults().GetVersion() != 2 {
		t.Errorf("overcommit set-defaults --cpu 4500 -o json: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = kibotos(t, c, "overcommit", "set-defaults", "--memory", "16001")
	if code == 0 || !strings.Contains(errOut, "invalid_argument") || !strings.Contains(errOut, "memory_thousandths") {
		t.Errorf("overcommit set-defaults --memory 16001: exit %d, %s", code, errOut)
	}
	code, _, errOut = kibotos(t, c, "overcommit", "set-defaults", "--cpu", "2000", "--expected-version", "1")
	if code == 0 || !strings.Contains(errOut, "failed_precondition") {
		t.Errorf("overcommit set-defaults at a stale version: exit %d, %s", code, errOut)
	}

	code, out, errOut = kibotos(t, c, "overcommit", "set-node", "node-a", "--memory", "2000")
	if code != 0 || !strings.Contains(out, "memory") || !strings.Contains(out, "2x") || !strings.Contains(out, "NODE") || !strings.Contains(out, "4.5x") {
		t.Errorf("overcommit set-node --memory 2000: exit %d\n%s%s", code, out, errOut)
	}
	// Memory shows as every table's sizes do (2GiB), not in MiB with k8s's suffix.
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 8 && f[1] == "memory" && (!strings.HasSuffix(f[4], "iB") || !strings.HasSuffix(f[5], "iB") || !strings.HasSuffix(f[6], "B")) {
			t.Errorf("overcommit's memory row: %q, want HOST, SCHEDULABLE and ALLOCATED as sizes", line)
		}
	}
	code, out, errOut = kibotos(t, c, "overcommit", "get", "node-a", "-o", "json")
	o := &operatorv1.NodeOvercommit{}
	if code != 0 || protojson.Unmarshal([]byte(out), o) != nil || o.GetMemory().GetSource() != operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_NODE ||
		o.GetCpu().GetSource() != operatorv1.OvercommitSource_OVERCOMMIT_SOURCE_DEFAULT || o.GetCpu().GetThousandths() != 4500 {
		t.Errorf("overcommit get node-a -o json: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotos(t, c, "overcommit", "set-node", "node-a")
	if code != 0 || strings.Count(out, "DEFAULT") != 2 {
		t.Errorf("overcommit set-node without ratios (clears them): exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = kibotos(t, c, "overcommit", "set-node", "node-z", "--cpu", "1000")
	if code == 0 || !strings.Contains(errOut, "not_found") {
		t.Errorf("overcommit set-node of an unknown node: exit %d, %s", code, errOut)
	}
}
