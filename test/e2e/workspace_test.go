package e2e_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/clientconfig"
)

func (d *dev) workspaces() ctrlv1connect.WorkspaceServiceClient {
	cfg := clientconfig.Config{Token: d.env[clientconfig.EnvToken]}
	return ctrlv1connect.NewWorkspaceServiceClient(httpClientWithToken(cfg.Token), d.env[clientconfig.EnvWorkspaceEndpoint])
}

func (d *dev) workspace(t *testing.T, id string) *ctrlv1.Workspace {
	t.Helper()
	res, err := d.workspaces().GetWorkspace(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetWorkspace()
}

func (d *dev) waitState(t *testing.T, id string, want ctrlv1.WorkspaceState) *ctrlv1.Workspace {
	t.Helper()
	var w *ctrlv1.Workspace
	waitUntil(t, "workspace "+want.String(), 5*time.Minute, func() bool {
		w = d.workspace(t, id)
		if w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED {
			t.Fatalf("workspace failed: %v", w.GetFailure())
		}
		return w.GetState() == want
	})
	return w
}

// mustKibotos runs the CLI and fails the test on a non-zero exit.
func (d *dev) mustKibotos(t *testing.T, args ...string) string {
	t.Helper()
	out, code := d.kibotos(t, args...)
	if code != 0 {
		t.Fatalf("kibotos %v: exit %d: %s", args, code, out)
	}
	return out
}

// The Workspaces issue's check: a real VM, through the CLI and the API,
// with data kept across stop and start and the node agent killed under a
// running VM.
func TestWorkspaceLifecycleOnARealVM(t *testing.T) {
	d := startDev(t)
	var created struct {
		Workspace struct {
			WorkspaceID string `json:"workspaceId"`
		} `json:"workspace"`
	}
	// create follows its command to AVAILABLE, showing progress on stderr.
	cmd := d.command("workspace", "create", "--memory", "256", "-o", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("workspace create: %v: %s", err, stderr.String())
	}
	if err := json.Unmarshal(stdout, &created); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	id := created.Workspace.WorkspaceID
	w := d.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if w.GetGeneration() != 1 {
		t.Errorf("generation %d after create, want 1", w.GetGeneration())
	}
	if best := w.GetRetentionTiers()[1]; best.GetResetReason() != ctrlv1.RetentionResetReason_RETENTION_RESET_REASON_FIRST_START || best.CapacityBytes == nil {
		t.Errorf("BEST_EFFORT tier after the first start: %v", best)
	}

	uname := d.mustKibotos(t, "workspace", "exec", id, "--", "uname", "-a")
	if !strings.Contains(uname, "Linux") || !strings.Contains(uname, "amd64") {
		t.Errorf("uname -a in the guest: %q", uname)
	}
	// The guest's machine: its host name, an isolated network device with
	// an address, a default route and the link nameserver.
	machine := d.mustKibotos(t, "workspace", "exec", id, "--", "sh", "-c", "hostname; cat /etc/resolv.conf /proc/net/route /sys/class/net/eth0/address; cat /proc/net/fib_trie")
	for _, want := range []string{id + "\n", "nameserver 10.0.2.2", "eth0\t00000000\t0202000A", "10.0.2.15"} {
		if !strings.Contains(machine, want) {
			t.Errorf("guest machine lacks %q:\n%s", want, machine)
		}
	}
	// The memory requested is exactly the guest's RAM: its physical memory
	// map ends at 256 MiB (microvm maps RAM from 0, below the 32-bit hole).
	if iomem := d.mustKibotos(t, "workspace", "exec", id, "--", "grep", "System RAM", "/proc/iomem"); !strings.Contains(iomem, "-0fffffff : System RAM") {
		t.Errorf("the guest's RAM for 256 MiB requested:\n%s", iomem)
	}
	// The guest judges its memory from PSI, and the probe reports it.
	waitUntil(t, "memory condition NORMAL", 2*time.Minute, func() bool {
		return d.workspace(t, id).GetGuestObservation().GetMemoryCondition() == ctrlv1.GuestMemoryCondition_GUEST_MEMORY_CONDITION_NORMAL
	})
	sessionToken := checkDataPlaneSessions(t, d, id)
	d.mustKibotos(t, "workspace", "exec", id, "--", "sh", "-c", "echo root > /root/kept && echo vol > /data/kept && echo tmp > /tmp/gone && sync")

	sessionStream := openSessionStream(t, d, id)
	d.mustKibotos(t, "workspace", "stop", id)
	stopped := d.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	if s := stopped.GetLastStop(); s.GetCause() != ctrlv1.StopCause_STOP_CAUSE_REQUESTED || s.GetDurability() != ctrlv1.StopDurability_STOP_DURABILITY_CONFIRMED {
		t.Errorf("normal stop: %v", s)
	}
	checkSessionEndedWithExecution(t, d, id, sessionToken)
	sessionStream.checkEndedByAGracefulStop(t)
	d.mustKibotos(t, "workspace", "start", id)
	w = d.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if w.GetGeneration() != 2 || w.GetLastStop() != nil {
		t.Errorf("after start: generation %d, last_stop %v", w.GetGeneration(), w.GetLastStop())
	}
	if out, code := d.kibotos(t, "workspace", "exec", id, "--", "sh", "-c", "cat /root/kept /data/kept; ls /tmp/gone"); code == 0 ||
		!strings.Contains(out, "root") || !strings.Contains(out, "vol") {
		t.Errorf("after stop and start: exit %d: %q (want / and the Volume kept, /tmp emptied)", code, out)
	}

	// Kill the whole dev process (ctrl and its node agent) under the
	// running VM: the VM runs on, and a new dev finds it.
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	restarted := time.Now()
	d2 := restartDev(t, d)
	// dev is ready only on its own agent's session: the killed agent's
	// still looks live for a while, with a data endpoint nothing serves.
	var reg operatorv1.GetNodeRegistrationResponse
	d2.kibotosJSON(t, &reg, "node", "get", "dev")
	if r := reg.GetRegistration(); r.GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY ||
		r.GetSession().GetConnectedAt().AsTime().Before(restarted) {
		t.Errorf("dev said ready with its node %v on a session connected at %v (restarted at %v), want READY on a session since",
			r.GetStatus(), r.GetSession().GetConnectedAt().AsTime(), restarted)
	}
	if got := d2.workspace(t, id); got.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || got.GetGeneration() != 2 {
		t.Errorf("after the node agent was killed: %v generation %d", got.GetState(), got.GetGeneration())
	}
	if out := d2.mustKibotos(t, "workspace", "exec", id, "--", "cat", "/root/kept"); !strings.Contains(out, "root") {
		t.Errorf("exec after the restart: %q", out)
	}

	d2.mustKibotos(t, "workspace", "stop", "--force", id)
	forced := d2.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	if forced.GetLastStop().GetDurability() != ctrlv1.StopDurability_STOP_DURABILITY_UNCONFIRMED {
		t.Errorf("force stop: %v", forced.GetLastStop())
	}
	if out, code := d2.kibotos(t, "workspace", "exec", id, "--", "true"); code == 0 || !strings.Contains(out, "failed_precondition") {
		t.Errorf("exec in a stopped Workspace: exit %d: %s", code, out)
	}
	d2.mustKibotos(t, "workspace", "delete", id)
	d2.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED)
	if qemus, _ := exec.Command("pgrep", "-f", id).Output(); len(qemus) > 0 {
		t.Errorf("a VMM still runs for the deleted Workspace: %s", qemus)
	}
}
