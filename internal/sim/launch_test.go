package sim_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/catalog"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/sim"
	"github.com/kibotos/kibotos/internal/testenv"
)

// launch_ref: a create binds the PlatformKey's current default Launch
// (launch_binding_version 1); once the key has a new default, an explicit
// StartWorkspace rebinds the Workspace to it and advances
// launch_binding_version; a start with no new default changes neither.
func TestAnExplicitStartRebindsTheLaunch(t *testing.T) {
	c, _ := oneNode(t, nil)
	id := createWithoutVolume(t, c, "create")
	first := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE).GetSpec()
	if first.GetLaunchRef() == "" || first.GetLaunchBindingVersion() != 1 {
		t.Fatalf("after the create: launch_ref %q, launch_binding_version %d; want one, 1", first.GetLaunchRef(), first.GetLaunchBindingVersion())
	}
	if same := restart(t, c, id, "1").GetSpec(); same.GetLaunchRef() != first.GetLaunchRef() || same.GetLaunchBindingVersion() != 1 {
		t.Errorf("a start with no new default: launch_ref %q, version %d; want %q, 1", same.GetLaunchRef(), same.GetLaunchBindingVersion(), first.GetLaunchRef())
	}
	newDefaultPlatform(t, c.Ctrl.Catalog())
	second := restart(t, c, id, "2").GetSpec()
	if second.GetLaunchRef() == first.GetLaunchRef() || second.GetLaunchRef() == "" || second.GetLaunchBindingVersion() != 2 {
		t.Errorf("a start after a new default: launch_ref %q (was %q), version %d; want the new one, 2", second.GetLaunchRef(), first.GetLaunchRef(), second.GetLaunchBindingVersion())
	}
}

// newDefaultPlatform registers another platform (other placeholder files)
// as the simulation's PlatformKey's default.
func newDefaultPlatform(t *testing.T, cat *catalog.Catalog) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{platform.VmlinuxFile: "kibotos sim: another placeholder kernel\n", platform.InitramfsFile: "kibotos sim: another placeholder initramfs\n"}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	m := &platform.Manifest{KernelVersion: "sim-2", Vmlinux: platform.VmlinuxFile, Initramfs: platform.InitramfsFile,
		VmlinuxSHA256: hash(files[platform.VmlinuxFile]), InitramfsSHA256: hash(files[platform.InitramfsFile])}
	m.Digest = platform.Digest(m.VmlinuxSHA256, m.InitramfsSHA256)
	if _, err := cat.RegisterPlatform(ctx, sim.PlatformKey, m, dir, true); err != nil {
		t.Fatal(err)
	}
}

// A create keeps the launch_ref it was admitted with when the default
// changes before it is placed (workspaces.md S2: "every other path into a
// running state keeps the stored value"): it waits while the only node is
// drained, a new default is registered, a retry of the create answers the
// Workspace as admitted, and once the drain is cancelled the Workspace runs
// on the Launch it was admitted with.
func TestACreatePlacedAfterANewDefaultKeepsItsLaunch(t *testing.T) {
	c, _ := oneNode(t, nil)
	ready, err := readyNodes(c)
	if err != nil {
		t.Fatal(err)
	}
	nodeID := ready[0].GetNodeId()
	if _, err := c.Nodes.DrainNode(ctx, connect.NewRequest(&operatorv1.DrainNodeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "drain"}, NodeId: nodeID})); err != nil {
		t.Fatal(err)
	}
	id := createWithoutVolume(t, c, "create")
	testenv.WaitFor(t, "the create waiting for a node", func() bool {
		res, err := c.Workspaces.GetWorkspaceCommand(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{WorkspaceId: id, CommandId: "create"}))
		return err == nil && res.Msg.GetCommand().GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_WAITING
	})
	admitted := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING).GetSpec()
	if admitted.GetLaunchRef() == "" {
		t.Fatal("the create was admitted without a launch_ref")
	}
	newDefaultPlatform(t, c.Ctrl.Catalog())
	// A retry of the create after the new default is its replay: the
	// same Workspace, with the launch_ref it was admitted with.
	retry, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "create"}, Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{MemoryBytes: 256 * mib},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := retry.Msg.GetWorkspace(); got.GetWorkspaceId() != id || got.GetSpec().GetLaunchRef() != admitted.GetLaunchRef() {
		t.Errorf("the create's retry after the new default: Workspace %s with launch_ref %q, want %s with %q",
			got.GetWorkspaceId(), got.GetSpec().GetLaunchRef(), id, admitted.GetLaunchRef())
	}
	if got := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING).GetSpec(); got.GetLaunchRef() != admitted.GetLaunchRef() {
		t.Errorf("after the create's retry: launch_ref %q, want %q", got.GetLaunchRef(), admitted.GetLaunchRef())
	}
	if _, err := c.Nodes.CancelNodeDrain(ctx, connect.NewRequest(&operatorv1.CancelNodeDrainRequest{Command: &ctrlv1.CommandMetadata{CommandId: "undrain"}, NodeId: nodeID})); err != nil {
		t.Fatal(err)
	}
	placed := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE).GetSpec()
	if placed.GetLaunchRef() != admitted.GetLaunchRef() || placed.GetLaunchBindingVersion() != 1 {
		t.Errorf("the create placed after a new default: launch_ref %q, version %d; want %q, 1", placed.GetLaunchRef(), placed.GetLaunchBindingVersion(), admitted.GetLaunchRef())
	}
}

// A restore keeps the launch_ref it was admitted with when the default
// changes before it is placed (workspaces.md S2), as a create does: a
// Volume's archive restored while the only node is drained waits, a new
// default is registered, and once the drain is cancelled the Workspace is
// placed, its Volume imported, and it runs on the Launch it was admitted
// with (launch_binding_version 1).
func TestARestorePlacedAfterANewDefaultKeepsItsLaunch(t *testing.T) {
	c, _ := oneNode(t, nil)
	ready, err := readyNodes(c)
	if err != nil {
		t.Fatal(err)
	}
	nodeID := ready[0].GetNodeId()
	tr := c.Import(t, "import", testenv.VolumeArchive(t, 64, 1))
	if _, err := c.Nodes.DrainNode(ctx, connect.NewRequest(&operatorv1.DrainNodeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "drain"}, NodeId: nodeID})); err != nil {
		t.Fatal(err)
	}
	res, err := c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "restore"}, TransferId: tr.GetTransferId(),
		Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{MemoryBytes: 256 * mib}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	testenv.WaitFor(t, "the restore waiting for a node", func() bool {
		res, err := c.Workspaces.GetWorkspaceCommand(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{WorkspaceId: id, CommandId: "restore"}))
		return err == nil && res.Msg.GetCommand().GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_WAITING
	})
	admitted := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING).GetSpec()
	if admitted.GetLaunchRef() == "" {
		t.Fatal("the restore was admitted without a launch_ref")
	}
	newDefaultPlatform(t, c.Ctrl.Catalog())
	if _, err := c.Nodes.CancelNodeDrain(ctx, connect.NewRequest(&operatorv1.CancelNodeDrainRequest{Command: &ctrlv1.CommandMetadata{CommandId: "undrain"}, NodeId: nodeID})); err != nil {
		t.Fatal(err)
	}
	placed := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE).GetSpec()
	if placed.GetLaunchRef() != admitted.GetLaunchRef() || placed.GetLaunchBindingVersion() != 1 {
		t.Errorf("the restore placed after a new default: launch_ref %q, version %d; want %q, 1", placed.GetLaunchRef(), placed.GetLaunchBindingVersion(), admitted.GetLaunchRef())
	}
	got, err := c.Transfers.GetTransfer(ctx, connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: tr.GetTransferId()}))
	if err != nil || got.Msg.GetTransfer().GetState() != ctrlv1.TransferState_TRANSFER_STATE_RESTORED {
		t.Errorf("the Transfer once the restore ran: %v %v, want RESTORED", got, err)
	}
}
