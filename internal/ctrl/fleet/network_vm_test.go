package fleet_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/node/netslot/usernet"
	"github.com/kibotos/kibotos/internal/testenv"
)

// A PUBLIC_INTERNET policy the node cannot apply (its network is QEMU's
// isolated user-mode network, --guest-network usernet) is not left
// silently unenforced: the create fails at FAILURE_STAGE_APPLYING_NETWORK,
// saying why, and is not retryable. DENY_ALL it applies: a query to the
// link nameserver, which nothing answers there, fails at once (the guest
// routes it as unreachable) instead of timing out.
func TestAUserModeNetworkNodeRefusesPublicInternetAndFailsDNSAtOnce(t *testing.T) {
	e := newVMEnv(t)
	n := e.c.StartNodeWith(t, "node-a", "", func(cfg *node.Config) { cfg.Network = usernet.New() },
		node.Pool{Name: "default", Dir: t.TempDir(), Default: true})
	e.c.EnsureCapacity(t, "default", testenv.DefaultPoolCapacity)
	t.Cleanup(n.PowerOff)
	req := createRequest("create-public")
	req.Spec.NetworkPolicy = &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET}
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	w := e.waitState(created.Msg.GetWorkspace().GetWorkspaceId(), ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED)
	f := w.GetFailure()
	if f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_APPLYING_NETWORK || f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNSUPPORTED ||
		f.GetRetryable() || !strings.Contains(f.GetMessage(), "PUBLIC_INTERNET cannot be applied on this node") || !strings.Contains(f.GetMessage(), "not built") {
		t.Errorf("failure %v, want APPLYING_NETWORK, UNSUPPORTED, not retryable, naming why", f)
	}

	created, err = e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(createRequest("create-deny")))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	out, code := e.c.Exec(t, id, "nslookup", "example.com", "10.0.2.3")
	if code == 0 || strings.Contains(out, "timed out") || !strings.Contains(out, "No route to host") {
		t.Errorf("nslookup at the link address under DENY_ALL: exit %d, %q; want it refused at once (no route to host), not timed out", code, out)
	}

	// A StartWorkspace fails the same way: stopped, given PUBLIC_INTERNET
	// (nothing runs to apply it to), it fails to start at
	// FAILURE_STAGE_APPLYING_NETWORK rather than run unenforced.
	if _, err := e.c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmd("stop-deny"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	stopped := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	public := &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET}
	if _, err := e.c.Workspaces.UpdateWorkspaceNetworkPolicy(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceNetworkPolicyRequest{Command: cmd("policy-public"),
		WorkspaceId: id, ExpectedRevision: stopped.GetSpec().GetNetworkPolicy().GetRevision(), NetworkPolicy: public})); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd("start-public"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	w = e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED)
	if f := w.GetFailure(); f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_APPLYING_NETWORK || f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNSUPPORTED || f.GetCommandId() != "start-public" {
		t.Errorf("a start under PUBLIC_INTERNET on this node: failure %v, want APPLYING_NETWORK, UNSUPPORTED, of start-public", f)
	}

	// And so does a RestoreWorkspace's start: an imported Workspace given
	// PUBLIC_INTERNET is restored (its layer imported on the node) and
	// fails to start at FAILURE_STAGE_APPLYING_NETWORK.
	busybox, err := e.c.Ctrl.Catalog().GetTemplateRevision(ctx, &operatorv1.GetTemplateRevisionRequest{
		Selector: &ctrlv1.TemplateSelector{Template: "busybox", Revision: "1"}})
	if err != nil {
		t.Fatal(err)
	}
	tr := e.c.Import(t, "import-public", testenv.WorkspaceArchive(t, 1, "complete", busybox.GetRevision().GetImageDigest()))
	restored, err := e.c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{Command: cmd("restore-public"), TransferId: tr.GetTransferId(),
		Spec: &ctrlv1.WorkspaceCreateSpec{NetworkPolicy: public}}))
	if err != nil {
		t.Fatal(err)
	}
	w = e.waitState(restored.Msg.GetWorkspace().GetWorkspaceId(), ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED)
	if f := w.GetFailure(); f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_APPLYING_NETWORK || f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNSUPPORTED || f.GetCommandId() != "restore-public" {
		t.Errorf("a restore under PUBLIC_INTERNET on this node: failure %v, want APPLYING_NETWORK, UNSUPPORTED, of restore-public", f)
	}
}

// Under DENY_ALL on a network slot (the default) the link DNS address is
// the gateway, the guest's only nameserver, and the slot answers a query
// to it REFUSED at once instead of letting it time out; nothing else
// leaves: a TCP connection to a public address is reset at once and a
// ping is answered "administratively prohibited".
func TestDenyAllOnANetworkSlotRefusesAtOnce(t *testing.T) {
	e := newVMEnv(t)
	e.startNode("node-a", "")
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(createRequest("create-deny")))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	e.waitStarted(id, "create-deny")
	out, code := e.c.Exec(t, id, "sh", "-c", "cat /etc/resolv.conf; nslookup example.com")
	if code == 0 || !strings.Contains(out, "nameserver 10.0.2.2\n") || strings.Contains(out, "timed out") || !strings.Contains(out, "REFUSED") {
		t.Errorf("nslookup under DENY_ALL: exit %d, %q; want the gateway as nameserver and REFUSED at once", code, out)
	}
	out, code = e.c.Exec(t, id, "sh", "-c", "nc -w 10 8.8.8.8 80 </dev/null; echo nc=$?; ping -c 1 -W 10 8.8.8.8; echo ping=$?")
	if !strings.Contains(out, "nc=1") || !strings.Contains(out, "Connection refused") || !strings.Contains(out, "ping=1") {
		t.Errorf("TCP and ping to a public address under DENY_ALL: exit %d, %q; want both refused", code, out)
	}
}

// A guest that resets its machine comes back within the same execution:
// the Workspace stays AVAILABLE at its generation, and once the guest
// answers again its guest_observation counts the reset (restart_count,
// last_reset_at) and says it rebooted.
func TestGuestResetIsObservedAndTheWorkspaceRuns(t *testing.T) {
	e := newVMEnv(t)
	e.startNode("node-a", "")
	created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(createRequest("create-reset")))
	if err != nil {
		t.Fatal(err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	before := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	processes := ctrlv1connect.NewProcessServiceClient(http.DefaultClient, e.c.Ctrl.Client.WorkspaceEndpoint,
		connect.WithInterceptors(auth.Bearer(e.c.Ctrl.Client.Token)))
	// A process running when the guest resets ends with it (PS6).
	started, err := processes.StartProcess(ctx, connect.NewRequest(&ctrlv1.StartProcessRequest{
		Command: cmd("sleep-before-reset"), WorkspaceId: id, Spec: &ctrlv1.ProcessSpec{Argv: []string{"sleep", "600"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	reset := time.Now()
	// The exec's stream ends with the machine; its result does not matter.
	if stream, err := processes.ExecProcess(ctx, connect.NewRequest(&ctrlv1.ExecProcessRequest{
		Command: cmd("reboot"), WorkspaceId: id, Spec: &ctrlv1.ProcessSpec{Argv: []string{"reboot", "-f"}},
	})); err == nil {
		for stream.Receive() {
		}
		_ = stream.Close()
	}
	var w *ctrlv1.Workspace
	waitLong(t, "the reset observed", func() bool {
		w = e.workspace(id)
		return w.GetGuestObservation().GetRestartCount() == 1 &&
			w.GetGuestObservation().GetCondition() == ctrlv1.GuestCondition_GUEST_CONDITION_RESPONDING
	})
	obs := w.GetGuestObservation()
	if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || w.GetGeneration() != before.GetGeneration() {
		t.Errorf("after the reset: %v at generation %d, want AVAILABLE at %d (the same execution)", w.GetState(), w.GetGeneration(), before.GetGeneration())
	}
	if !obs.GetRebooted() || obs.GetLastResetAt() == nil || obs.GetLastResetAt().AsTime().Before(reset.Add(-time.Second)) {
		t.Errorf("guest_observation %v, want rebooted and last_reset_at after the reset", obs)
	}
	if out, code := e.c.Exec(t, id, "true"); code != 0 {
		t.Errorf("exec after the reset: exit %d %q", code, out)
	}
	_, err = processes.GetProcess(ctx, connect.NewRequest(&ctrlv1.GetProcessRequest{WorkspaceId: id, ProcessId: started.Msg.GetProcessId()}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a process of before the reset: %v, want not_found (the reset ended it)", err)
	}

	// "A later execution starts from zero", and last_reset_at is absent
	// while restart_count is zero.
	if _, err := e.c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmd("stop-reset"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	if _, err := e.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd("start-reset"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	later := e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	waitLong(t, "the later execution observed", func() bool {
		w = e.workspace(id)
		return w.GetGuestObservation().GetCondition() == ctrlv1.GuestCondition_GUEST_CONDITION_RESPONDING
	})
	if obs := w.GetGuestObservation(); w.GetGeneration() != later.GetGeneration() || later.GetGeneration() <= before.GetGeneration() ||
		obs.GetRestartCount() != 0 || obs.GetLastResetAt() != nil {
		t.Errorf("the later execution (generation %d, was %d): guest_observation %v, want restart_count 0 and no last_reset_at",
			w.GetGeneration(), before.GetGeneration(), obs)
	}
}
