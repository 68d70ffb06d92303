package e2e_test

import (
	"strings"
	"testing"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// networkTable reads the one row of a `workspace network` table by its
// header's names.
func networkTable(t *testing.T, out string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a header and one row, got:\n%s", out)
	}
	header, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	if len(header) != len(row) {
		t.Fatalf("header and row differ in length:\n%s", out)
	}
	cells := map[string]string{}
	for i, h := range header {
		cells[h] = row[i]
	}
	return cells
}

func checkNetworkRow(t *testing.T, what string, got map[string]string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s is %q, want %q (row %v)", what, k, got[k], v, got)
		}
	}
}

// `workspace network get|set` on a real VM: the revision asked for and
// the one the node confirmed, set waiting for that confirmation, and the
// API's refusals of a stale revision and a bad entry. The policies used
// send no traffic: the dev node's uplink is the host's.
func TestCLINetworkGetAndSetOnARealVM(t *testing.T) {
	d := startDev(t)
	id := d.createWorkspace(t)

	checkNetworkRow(t, "network get of a new Workspace", networkTable(t, d.mustKibotos(t, "workspace", "network", "get", id)),
		map[string]string{"WORKSPACE": id, "MODE": "deny-all", "REVISION": "1", "APPLIED": "1", "ALLOW": "-", "DENY": "-", "DRAINING": "-"})
	var got ctrlv1.GetWorkspaceResponse
	d.kibotosJSON(t, &got, "workspace", "network", "get", id)
	if got.GetWorkspace().GetSpec().GetNetworkPolicy().GetRevision() != 1 || got.GetWorkspace().GetNetworkPolicyStatus().GetAppliedRevision() != 1 {
		t.Errorf("network get -o json: %v", got.GetWorkspace())
	}

	// set waits for the node's confirmation, says so on stderr, and prints
	// the policy as confirmed.
	cmd := d.command("workspace", "network", "set", id, "--network", "public-internet", "--deny", "0.0.0.0/0", "--drain-seconds", "5")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("network set: %v: %s%s", err, out, stderr.String())
	}
	checkNetworkRow(t, "network set", networkTable(t, string(out)),
		map[string]string{"MODE": "public-internet", "REVISION": "2", "APPLIED": "2", "ALLOW": "-", "DENY": "0.0.0.0/0"})
	if !strings.Contains(stderr.String(), "network policy revision 2 of "+id+": applied in ") {
		t.Errorf("network set's progress:\n%s", stderr.String())
	}
	d.kibotosJSON(t, &got, "workspace", "network", "get", id)
	if p := got.GetWorkspace().GetSpec().GetNetworkPolicy(); p.GetRevision() != 2 || got.GetWorkspace().GetNetworkPolicyStatus().GetAppliedRevision() != 2 ||
		p.GetMode() != ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET || strings.Join(p.GetDeny(), ",") != "0.0.0.0/0" {
		t.Errorf("network get -o json after set: %v", got.GetWorkspace())
	}

	// The API's refusals, with their ErrorDetail: a revision someone else
	// replaced, and an entry that is not canonical.
	if out, code := d.kibotos(t, "workspace", "network", "set", id, "--network", "deny-all", "--expected-revision", "1"); code != 1 ||
		!strings.Contains(out, "failed_precondition") || !strings.Contains(out, "expected_revision 1 is stale: the current revision is 2") {
		t.Errorf("network set --expected-revision 1 at revision 2: exit %d: %s", code, out)
	}
	if out, code := d.kibotos(t, "workspace", "network", "set", id, "--network", "public-internet", "--allow", "10.0.0.1/8"); code != 1 ||
		!strings.Contains(out, "invalid_argument") || !strings.Contains(out, "field: network_policy.allow[0]") {
		t.Errorf("network set --allow 10.0.0.1/8: exit %d: %s", code, out)
	}
	if out, code := d.kibotos(t, "workspace", "network", "set", id, "--deny", "0.0.0.0/0"); code != 1 || !strings.Contains(out, "--network is required") {
		t.Errorf("network set without --network: exit %d: %s", code, out)
	}
	checkNetworkRow(t, "network get after the refusals", networkTable(t, d.mustKibotos(t, "workspace", "network", "get", id)),
		map[string]string{"REVISION": "2", "APPLIED": "2"})

	// A wait that times out says the revision is not confirmed; the change
	// itself was admitted and the node still applies it.
	if out, code := d.kibotos(t, "workspace", "network", "set", id, "--network", "public-internet", "--allow", "1.1.1.1", "--deny", "0.0.0.0/0", "--timeout", "1ns"); code != 1 ||
		!strings.Contains(out, id+": network policy revision 3 not confirmed applied after 1ns") {
		t.Errorf("network set --timeout 1ns: exit %d: %s", code, out)
	}
	waitUntil(t, "APPLIED 3", time.Minute, func() bool {
		return networkTable(t, d.mustKibotos(t, "workspace", "network", "get", id))["APPLIED"] == "3"
	})
	checkNetworkRow(t, "network get after the timed-out set", networkTable(t, d.mustKibotos(t, "workspace", "network", "get", id)),
		map[string]string{"REVISION": "3", "ALLOW": "1.1.1.1", "DENY": "0.0.0.0/0"})

	// A stopped Workspace confirms nothing: set returns at once, the next
	// start applies the policy.
	d.mustKibotos(t, "workspace", "stop", id)
	checkNetworkRow(t, "network set on a stopped Workspace", networkTable(t, d.mustKibotos(t, "workspace", "network", "set", id, "--network", "deny-all")),
		map[string]string{"MODE": "deny-all", "REVISION": "4", "APPLIED": "-"})
	d.mustKibotos(t, "workspace", "start", id)
	checkNetworkRow(t, "network get after the start", networkTable(t, d.mustKibotos(t, "workspace", "network", "get", id)),
		map[string]string{"MODE": "deny-all", "REVISION": "4", "APPLIED": "4"})
	if out := strings.TrimSpace(d.mustKibotos(t, "workspace", "network", "get", id, "-q")); out != id {
		t.Errorf("network get -q: %q", out)
	}

	// --egress forwards destinations through an Egress: the node applies
	// it (it sends nothing until the guest dials), and the row shows it.
	eg := strings.TrimSpace(d.mustKibotos(t, "egress", "create", "--protocol", "socks5", "--endpoint", "192.0.2.10:1080", "-q"))
	setOut, err := d.command("workspace", "network", "set", id, "--network", "public-internet", "--egress", eg+"=10.0.0.0/8,172.16.0.0/12").Output()
	if err != nil {
		t.Fatalf("network set --egress: %v", err)
	}
	checkNetworkRow(t, "network set --egress", networkTable(t, string(setOut)),
		map[string]string{"MODE": "public-internet", "REVISION": "5", "APPLIED": "5", "EGRESSES": eg + "=10.0.0.0/8,172.16.0.0/12"})
	if out, code := d.kibotos(t, "workspace", "network", "set", id, "--network", "public-internet", "--egress", "nothing"); code == 0 || !strings.Contains(out, "EGRESS_ID=CIDR") {
		t.Errorf("network set --egress without =: exit %d: %s", code, out)
	}
}

// A policy the node cannot apply fails set clearly, and leaves no policy
// confirmed. The usernet guest network enforces DENY_ALL only, so a live
// change to PUBLIC_INTERNET is refused by the node (and sends nothing).
func TestCLINetworkSetFailsWhenTheNodeCannotApplyIt(t *testing.T) {
	d := startDevAt(t, t.TempDir(), "--guest-network", "usernet")
	id := d.createWorkspace(t)
	checkNetworkRow(t, "network get on usernet", networkTable(t, d.mustKibotos(t, "workspace", "network", "get", id)),
		map[string]string{"MODE": "deny-all", "REVISION": "1", "APPLIED": "1"})

	out, code := d.kibotos(t, "workspace", "network", "set", id, "--network", "public-internet", "--deny", "0.0.0.0/0")
	if code != 1 || !strings.Contains(out, id+": network policy revision 2 not applied, at APPLYING_NETWORK") ||
		!strings.Contains(out, "no policy is confirmed in force (APPLIED -)") {
		t.Errorf("network set the node refuses: exit %d: %s", code, out)
	}
	checkNetworkRow(t, "network get after the refused application", networkTable(t, d.mustKibotos(t, "workspace", "network", "get", id)),
		map[string]string{"MODE": "public-internet", "REVISION": "2", "APPLIED": "-"})
}
