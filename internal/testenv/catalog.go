package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/node/blockfile"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/template"
)

// BootableCatalog registers the default platform and busybox template of
// BuildVMArtifacts: what a Workspace needs to run on a real microVM.
func (c *Cluster) BootableCatalog(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	art := BuildVMArtifacts(t)
	if _, err := c.Ctrl.Catalog().RegisterPlatform(ctx, "default", art.Platform, art.Dir, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ctrl.Catalog().RegisterTemplate(ctx, "busybox", art.Template, true); err != nil {
		t.Fatal(err)
	}
}

// UnbootableCatalog registers a default platform and template no VM can
// boot: a create or start then goes through placement (the layer placed
// and reserved, the execution charged to a node) and fails when the node
// boots it, releasing the execution; a layer that start made is removed
// again and no longer placed (KeepLayer gives a Workspace one that stays).
// For tests of what placement and a Workspace without an execution do,
// without booting a VM. It returns the template image's digest.
func (c *Cluster) UnbootableCatalog(t testing.TB) (templateDigest string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	for _, f := range []string{"vmlinux", "initramfs"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("not a "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Ctrl.Catalog().RegisterPlatform(ctx, "default", &platform.Manifest{Vmlinux: "vmlinux", Initramfs: "initramfs", Digest: "sha256:fake"}, dir, true); err != nil {
		t.Fatal(err)
	}
	return c.unbootableTemplate(t)
}

// EnsureTemplate registers UnbootableCatalog's template (and no platform)
// unless a deployment default Template exists: a create is then admitted
// (its selector resolves) and waits for a platform before placement, so
// that a test can place it itself.
func (c *Cluster) EnsureTemplate(t testing.TB) {
	t.Helper()
	_, err := c.Ctrl.Catalog().GetTemplateRevision(context.Background(), &operatorv1.GetTemplateRevisionRequest{Selector: &ctrlv1.TemplateSelector{}})
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound:
		c.unbootableTemplate(t)
	case err != nil:
		t.Fatal(err)
	}
}

// unbootableTemplate registers "busybox", the deployment default, from an
// image no VM boots, and returns its digest.
func (c *Cluster) unbootableTemplate(t testing.TB) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root.img")
	body := []byte("not an ext4 image")
	if err := os.WriteFile(root, body, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if _, err := c.Ctrl.Catalog().RegisterTemplate(context.Background(), "busybox", &template.Image{Path: root, Digest: digest, Size: int64(len(body))}, true); err != nil {
		t.Fatal(err)
	}
	return digest
}

// KeepLayer gives Workspace id, which has no execution, a writable layer
// that outlives the starts UnbootableCatalog fails: it makes the layer's
// block file in poolDir, as a start that booted would have left it, then
// starts the Workspace (on nodeID only, when set) and waits until the
// start failed. That start finds the layer already there, so the node
// keeps it and ctrl keeps it placed. poolDir is the directory of the pool
// the start places the layer in: its Volume's, else the node's default.
// (A start that makes the layer itself removes it when it fails.)
func (c *Cluster) KeepLayer(t testing.TB, id, poolDir, nodeID string) {
	t.Helper()
	ctx := context.Background()
	got, err := c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
	if err != nil {
		t.Fatal(err)
	}
	capacity := got.Msg.GetWorkspace().GetSpec().GetResources().GetWritableLayerCapacityBytes()
	if capacity == 0 {
		capacity = workspace.DefaultLayerCapacity
	}
	blocks, err := blockfile.New()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocks.Ensure(ctx, blockfile.Ref{PoolDir: poolDir, Kind: blockfile.WritableLayer, ObjectID: id}, capacity); err != nil {
		t.Fatal(err)
	}
	commandID := "keep-layer-" + id
	start := &ctrlv1.StartWorkspaceRequest{Command: &ctrlv1.CommandMetadata{CommandId: commandID}, WorkspaceId: id}
	if nodeID == "" {
		_, err = c.Workspaces.StartWorkspace(ctx, connect.NewRequest(start))
	} else {
		_, err = c.Nodes.StartWorkspaceOnNode(ctx, connect.NewRequest(&operatorv1.StartWorkspaceOnNodeRequest{NodeId: nodeID, Request: start}))
	}
	if err != nil {
		t.Fatal(err)
	}
	var cmd *ctrlv1.WorkspaceCommand
	WaitFor(t, "the start keeping "+id+"'s layer to end", func() bool {
		res, err := c.Workspaces.GetWorkspaceCommand(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{CommandId: commandID}))
		if err != nil {
			t.Fatal(err)
		}
		cmd = res.Msg.GetCommand()
		return cmd.GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED ||
			cmd.GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED
	})
	if f := cmd.GetFailure(); f == nil || f.GetStage() == ctrlv1.FailureStage_FAILURE_STAGE_PLACING {
		t.Fatalf("the start keeping %s's layer: %v, want it placed and failed at boot", id, cmd)
	}
}
