package e2e_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/template"
	"github.com/kibotos/kibotos/internal/testenv"
)

// fleet is one `kibotos ctrl` (SQLite) and `kibotos node` processes, each
// with its own state directory, on this machine.
type fleet struct {
	*dev     // the CLI and API clients, on ctrl's client configuration
	cfg      clientconfig.Config
	ctrl     *proc
	stateDir string // ctrl's
	database string // ctrl's --database: "" is SQLite in stateDir
	addrs    ctrlAddrs
	nodes    map[string]*fleetNode
	// sharedDir is the directory nodes a and b both declare as pool
	// "shared": the stand-in for shared storage.
	sharedDir string
}

type fleetNode struct {
	proc     *proc
	stateDir string
	grant    string
	pools    []string // --pool values
	// stderrs are the stderr files of every run of the agent, oldest
	// first: what it logged, across restarts.
	stderrs []string
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	return startFleetOn(t, "")
}

// startFleetOn starts ctrl on database (ctrl's --database; "" is SQLite
// in its state directory) with no nodes yet.
func startFleetOn(t *testing.T, database string) *fleet {
	t.Helper()
	stateDir, addrs := t.TempDir(), newCtrlAddrs(t)
	ctrl := startCtrl(t, "ctrl", stateDir, database, addrs)
	return &fleet{
		dev: ctrlClient(t, stateDir), cfg: ctrlConfig(t, stateDir), ctrl: ctrl, stateDir: stateDir, database: database,
		addrs: addrs, nodes: map[string]*fleetNode{}, sharedDir: t.TempDir(),
	}
}

// restartCtrl SIGKILLs ctrl and starts it again on its state and
// addresses, where the nodes and clients left it.
func (f *fleet) restartCtrl(t *testing.T) {
	t.Helper()
	if err := f.ctrl.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = f.ctrl.cmd.Wait()
	f.ctrl = startCtrl(t, "ctrl-again", f.stateDir, f.database, f.addrs)
}

// startNode enrolls and runs node id with a state directory of its own,
// declaring pools (--pool values).
func (f *fleet) startNode(t *testing.T, id string, pools ...string) {
	t.Helper()
	n := &fleetNode{stateDir: t.TempDir(), grant: enrollGrant(t, f.cfg, id), pools: pools}
	n.proc = startNode(t, id, f.addrs.node, n.grant, n.stateDir, pools...)
	n.stderrs = []string{n.proc.stderr}
	f.nodes[id] = n
}

// restartNode SIGKILLs node id's agent and starts it again on its state:
// the VMs it ran run on, and the new agent re-attaches to them.
func (f *fleet) restartNode(t *testing.T, id string) {
	t.Helper()
	n := f.nodes[id]
	if err := n.proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = n.proc.cmd.Wait()
	n.proc = startProc(t, id+"-again", []string{"KIBOTOS_ENROLLMENT_GRANT=" + n.grant}, "", nodeArgs(id, f.addrs.node, n.stateDir, n.pools)...)
	n.stderrs = append(n.stderrs, n.proc.stderr)
}

// buildPlatformAndTemplate registers what a microVM boots, as an operator
// of a standalone ctrl does with the CLI (and `kibotos dev` at its first
// start, through the same RPCs): a platform built from Debian's kernel
// package with the kibotos-guest TestMain built beside kibotos, and a
// busybox template. Each is the first of its kind, so the default.
func (f *fleet) buildPlatformAndTemplate(t *testing.T) {
	t.Helper()
	f.mustKibotos(t, "platform", "build", "--cache", testenv.CacheDir(t))
	root := filepath.Join(t.TempDir(), "root")
	if err := template.BusyboxDir(testenv.Busybox(), root); err != nil {
		t.Fatal(err)
	}
	f.mustKibotos(t, "template", "build", "busybox", "--from", root)
}

func (f *fleet) operator() operatorv1connect.NodeRegistrationServiceClient {
	return operatorv1connect.NewNodeRegistrationServiceClient(httpClientWithToken(f.cfg.OperatorToken), f.cfg.OperatorEndpoint)
}

func (f *fleet) registration(t *testing.T, id string) *operatorv1.NodeRegistration {
	t.Helper()
	var res operatorv1.GetNodeRegistrationResponse
	f.kibotosJSON(t, &res, "node", "get", id)
	return res.GetRegistration()
}

// members are the node_ids attached to a pool, sorted.
func (f *fleet) members(t *testing.T, pool string) []string {
	t.Helper()
	var res operatorv1.GetStoragePoolResponse
	f.kibotosJSON(t, &res, "pool", "get", pool)
	var ids []string
	for _, a := range res.GetPool().GetAttachments() {
		ids = append(ids, a.GetNodeId())
	}
	slices.Sort(ids)
	return ids
}

// placedOn is the node running the Workspace, "" when it runs nowhere.
func (f *fleet) placedOn(t *testing.T, id string) string {
	t.Helper()
	res, err := f.operator().ListWorkspacePlacements(context.Background(), connect.NewRequest(&operatorv1.ListWorkspacePlacementsRequest{
		Filter: &operatorv1.ListWorkspacePlacementsRequest_WorkspaceId{WorkspaceId: id},
	}))
	if err != nil {
		t.Fatal(err)
	}
	rows := res.Msg.GetWorkspacePlacements()
	if len(rows) != 1 {
		return ""
	}
	return rows[0].GetNodeId()
}

// The fleet the issue asks for, as processes: one ctrl, nodes a and b
// declaring pool "shared" on one directory (the stand-in for shared
// storage), node c only a pool of its own. A Workspace runs on a, moves to
// b when a drains, survives b's host going off (node agent and VM killed)
// through isolation and ctrl being killed and restarted, and its Volume
// cannot move where no node reaches it together with its pool.
func TestFleetOfNodeProcessesSharesAPool(t *testing.T) {
	f := startFleet(t)
	f.startNode(t, "a", "shared="+f.sharedDir+",default")
	f.startNode(t, "b", "shared="+f.sharedDir+",default")
	f.startNode(t, "c", "local-c="+t.TempDir())
	for _, id := range []string{"a", "b", "c"} {
		waitUntil(t, "node "+id+" READY", time.Minute, func() bool { return nodeReady(f.cfg, id) })
	}
	givePoolCapacity(t, f.cfg, "shared")
	givePoolCapacity(t, f.cfg, "local-c")
	checkFleetReady(t, f)
	f.buildPlatformAndTemplate(t)

	id, volumeID := runPinnedOnA(t, f)
	drainAMovesItToB(t, f, id)
	isolateBRunsItOnA(t, f, id)
	ctrlRestartsUnderTheFleet(t, f, id)
	retireB(t, f)
	f.mustKibotos(t, "workspace", "stop", id)
	f.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	checkVolumeStaysOutOfReach(t, f, volumeID)
}

// checkFleetReady: every node READY, pool "shared" attached to a and b,
// c's pool to c only.
func checkFleetReady(t *testing.T, f *fleet) {
	t.Helper()
	var list operatorv1.ListNodeRegistrationsResponse
	f.kibotosJSON(t, &list, "node", "list")
	status := map[string]operatorv1.NodeRegistrationStatus{}
	for _, r := range list.GetRegistrations() {
		status[r.GetNodeId()] = r.GetStatus()
	}
	for _, id := range []string{"a", "b", "c"} {
		if status[id] != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY {
			t.Errorf("node %s is %v, want READY (node list: %v)", id, status[id], status)
		}
	}
	if got := f.members(t, "shared"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("pool shared is attached to %v, want [a b]", got)
	}
	if got := f.members(t, "local-c"); !slices.Equal(got, []string{"c"}) {
		t.Errorf("pool local-c is attached to %v, want [c]", got)
	}
}

// runPinnedOnA creates a Workspace with a new Volume on node a, writes into
// the Volume and the writable layer, and stops it. It returns the
// Workspace's and the Volume's ids.
func runPinnedOnA(t *testing.T, f *fleet) (string, string) {
	t.Helper()
	res, err := f.operator().CreateWorkspaceOnNode(context.Background(), connect.NewRequest(&operatorv1.CreateWorkspaceOnNodeRequest{
		NodeId: "a",
		Request: &ctrlv1.CreateWorkspaceRequest{
			Command: &ctrlv1.CommandMetadata{CommandId: "create-on-a"},
			Spec: &ctrlv1.WorkspaceCreateSpec{
				Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 << 20, WritableLayerCapacityBytes: 256 << 20},
				Volume: &ctrlv1.WorkspaceVolumeBinding{
					Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW, MountPath: "/data",
					NewVolume: &ctrlv1.VolumeSpec{CapacityBytes: 64 << 20},
				},
			},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetResponse().GetWorkspace().GetWorkspaceId()
	w := f.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if got := f.placedOn(t, id); got != "a" {
		t.Errorf("the Workspace created on node a runs on %q", got)
	}
	f.mustKibotos(t, "workspace", "exec", id, "--", "sh", "-c", "echo from-a > /data/a && echo layer > /root/layer && sync")
	f.mustKibotos(t, "workspace", "stop", id)
	f.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	return id, w.GetSpec().GetVolume().GetVolumeId()
}

// drainAMovesItToB: a drains (nothing runs there: DRAINED at once), and a
// start places the Workspace on b, the only other node reaching "shared",
// where what a wrote reads back.
func drainAMovesItToB(t *testing.T, f *fleet, id string) {
	t.Helper()
	var drained operatorv1.DrainNodeResponse
	f.kibotosJSON(t, &drained, "node", "drain", "a")
	if got := drained.GetRegistration().GetStatus(); got != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_DRAINED {
		t.Errorf("node a after drain: %v, want DRAINED", got)
	}
	f.mustKibotos(t, "workspace", "start", id)
	checkLayerContinued(t, f.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE))
	if got := f.placedOn(t, id); got != "b" {
		t.Errorf("with a drained the Workspace runs on %q, want b", got)
	}
	if out := f.mustKibotos(t, "workspace", "exec", id, "--", "cat", "/data/a", "/root/layer"); out != "from-a\nlayer\n" {
		t.Errorf("on b, the Volume and layer a wrote read %q", out)
	}
	f.mustKibotos(t, "workspace", "exec", id, "--", "sh", "-c", "echo from-b > /data/b && sync")
}

// isolateBRunsItOnA: b's host goes off under the running Workspace (its
// node agent SIGKILLed and its VM killed); isolating b is refused while
// its session is live and succeeds once b reads UNAVAILABLE, failing the
// Workspace (unavailable, retryable) and releasing its Volume and layer;
// a, undrained, runs it again with everything a and b wrote.
func isolateBRunsItOnA(t *testing.T, f *fleet, id string) {
	t.Helper()
	out, exit := f.kibotos(t, "node", "isolate", "b")
	exitsWith(t, "isolating b while its session is live", out, exit, connect.CodeFailedPrecondition)
	if w := f.workspace(t, id); w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
		t.Errorf("a refused isolation moved the Workspace to %v", w.GetState())
	}

	b := f.nodes["b"]
	if err := b.proc.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = b.proc.cmd.Wait()
	if n := testenv.PowerOffVMs(b.stateDir); n != 1 {
		t.Fatalf("killed %d VMs of node b, want the Workspace's one", n)
	}
	waitUntil(t, "node b UNAVAILABLE", time.Minute, func() bool {
		return f.registration(t, "b").GetStatus() == operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE
	})
	var isolated operatorv1.IsolateNodeResponse
	f.kibotosJSON(t, &isolated, "node", "isolate", "b")
	if !isolated.GetRegistration().GetIsolated() || isolated.GetFailedWorkspaces() != 1 ||
		isolated.GetReleasedVolumes() != 1 || isolated.GetReleasedRetainedLayers() != 1 {
		t.Errorf("isolating b: isolated %v, failed %d Workspaces, released %d Volumes and %d layers; want true, 1, 1, 1",
			isolated.GetRegistration().GetIsolated(), isolated.GetFailedWorkspaces(), isolated.GetReleasedVolumes(), isolated.GetReleasedRetainedLayers())
	}
	w := f.workspace(t, id)
	if fail := w.GetFailure(); w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED ||
		fail.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE || !fail.GetRetryable() {
		t.Errorf("the Workspace b ran after the isolation: %v, failure %v; want FAILED, unavailable, retryable", w.GetState(), fail)
	}

	f.mustKibotos(t, "node", "undrain", "a")
	f.mustKibotos(t, "workspace", "start", id)
	checkLayerContinued(t, f.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE))
	if got := f.placedOn(t, id); got != "a" {
		t.Errorf("after b's isolation the Workspace runs on %q, want a", got)
	}
	if out := f.mustKibotos(t, "workspace", "exec", id, "--", "cat", "/data/a", "/data/b", "/root/layer"); out != "from-a\nfrom-b\nlayer\n" {
		t.Errorf("on a again, the Volume and layer read %q", out)
	}
}

// ctrlRestartsUnderTheFleet: ctrl is SIGKILLed and started again while
// the Workspace runs on a: a and c take their sessions up again, the
// isolated b stays out, and the Workspace runs on, on a.
func ctrlRestartsUnderTheFleet(t *testing.T, f *fleet, id string) {
	t.Helper()
	restarted := time.Now()
	f.restartCtrl(t)
	for _, n := range []string{"a", "c"} {
		// A session opened to the new ctrl (SYNCING, then READY once
		// reconciled), not the registration the old one left.
		waitUntil(t, "node "+n+" READY on a new session", time.Minute, func() bool {
			res, err := f.operator().GetNodeRegistration(context.Background(), connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: n}))
			if err != nil {
				return false
			}
			r := res.Msg.GetRegistration()
			return r.GetSession().GetConnectedAt().AsTime().After(restarted) && r.GetStatus() == operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY
		})
	}
	if got := f.registration(t, "b"); !got.GetIsolated() || got.GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE {
		t.Errorf("the isolated b after ctrl restarted: %v, isolated %v", got.GetStatus(), got.GetIsolated())
	}
	if w := f.workspace(t, id); w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || f.placedOn(t, id) != "a" {
		t.Errorf("the Workspace after ctrl restarted: %v on %q, want AVAILABLE on a", w.GetState(), f.placedOn(t, id))
	}
	if out := f.mustKibotos(t, "workspace", "exec", id, "--", "cat", "/data/a"); out != "from-a\n" {
		t.Errorf("exec after ctrl restarted: %q", out)
	}
}

// retireB: the isolated b retires for good: its registration is a RETIRED
// tombstone, "shared" no longer lists it, and it cannot enroll again, by a
// grant bound to it or by an unbound one.
func retireB(t *testing.T, f *fleet) {
	t.Helper()
	var retired operatorv1.RetireNodeResponse
	f.kibotosJSON(t, &retired, "node", "retire", "b")
	if got := f.registration(t, "b"); got.GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_RETIRED ||
		got.GetAdmission() != operatorv1.NodeAdmission_NODE_ADMISSION_RETIRED {
		t.Errorf("node b after retire: %v, admission %v; want RETIRED", got.GetStatus(), got.GetAdmission())
	}
	if got := f.members(t, "shared"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("pool shared is attached to %v after b retired, want [a]", got)
	}
	out, exit := f.kibotos(t, "enrollment", "create", "--node-id", "b")
	exitsWith(t, "a grant for the retired b", out, exit, connect.CodeFailedPrecondition)

	// A fresh host taking b's node_id with a grant bound to no node.
	var grant operatorv1.CreateEnrollmentGrantResponse
	f.kibotosJSON(t, &grant, "enrollment", "create", "--reusable")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, kibotosBin, "node", "--ctrl", "http://"+f.addrs.node, "--node-id", "b", "--state-dir", t.TempDir(),
		"--pool", "shared="+f.sharedDir+",default", "--enrollment-grant", grant.GetSecret())
	out2, err := node.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 || ctx.Err() != nil || !strings.Contains(string(out2), "permission_denied") {
		t.Errorf("kibotos node enrolling the retired b: %v: %s; want it to exit with permission_denied", err, tail(string(out2), 5))
	}
}

// checkVolumeStaysOutOfReach: no node reaches both "shared" and local-c
// (b is gone, c reaches only local-c), so moving the stopped Workspace's
// Volume there is refused and the Volume stays in "shared".
func checkVolumeStaysOutOfReach(t *testing.T, f *fleet, volumeID string) {
	t.Helper()
	out, exit := f.kibotos(t, "pool", "move-volume", volumeID, "--to", "local-c")
	exitsWith(t, "moving the Volume to local-c", out, exit, connect.CodeFailedPrecondition)
	var where operatorv1.GetStoragePoolObjectResponse
	f.kibotosJSON(t, &where, "pool", "objects", "--volume", volumeID)
	if o := where.GetObject(); o.GetStoragePool() != "shared" || o.GetMovingTo() != "" {
		t.Errorf("the Volume after a refused move: pool %q, moving to %q; want shared, not moving", o.GetStoragePool(), o.GetMovingTo())
	}
}

// checkLayerContinued: the Workspace's writable layer, in "shared" too,
// went on from the node that ran it before instead of starting anew.
func checkLayerContinued(t *testing.T, w *ctrlv1.Workspace) {
	t.Helper()
	i := slices.IndexFunc(w.GetRetentionTiers(), func(r *ctrlv1.RetentionTier) bool {
		return r.GetKind() == ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_BEST_EFFORT
	})
	if i < 0 || w.GetRetentionTiers()[i].GetContinuity() != ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_CONTINUED {
		t.Errorf("retention tiers on another node: %v, want the BEST_EFFORT one (the writable layer) CONTINUED", w.GetRetentionTiers())
	}
}

// exitsWith asserts the CLI exits 1 with an error of code.
func exitsWith(t *testing.T, what, out string, exit int, code connect.Code) {
	t.Helper()
	if exit != 1 || !strings.Contains(out, code.String()) {
		t.Errorf("%s: exit %d: %s; want %s", what, exit, out, code)
	}
}
