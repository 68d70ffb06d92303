package e2e_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/clientconfig"
)

// A writable layer that fills up: the writes that do not fit fail with a
// clear error (resource_exhausted at the file stage through the API, ENOSPC
// inside), what was stored before is intact, the Workspace stays
// AVAILABLE, and freeing space makes writes work again.
func TestAFullWritableLayerLosesNothing(t *testing.T) {
	d := startDev(t)
	const layer = 48 << 20
	res, err := d.workspaces().CreateWorkspace(context.Background(), connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "full-layer"},
		Spec:    &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{MemoryBytes: 256 << 20, WritableLayerCapacityBytes: layer}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	w := d.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if got := w.GetRetentionTiers()[1].GetCapacityBytes(); got != layer {
		t.Errorf("BEST_EFFORT capacity %d, want %d", got, layer)
	}
	token := d.env[clientconfig.EnvToken]
	if _, err := d.execWith(token, id, "sh", "-c", "echo kept > /root/kept && sync"); err != nil {
		t.Fatal(err)
	}
	// dd runs until the layer is full and fails saying so.
	out, code := d.kibotos(t, "workspace", "exec", id, "--", "sh", "-c", "dd if=/dev/zero of=/root/fill bs=1M 2>&1; sync")
	if !strings.Contains(out, "No space left on device") {
		t.Errorf("filling the layer: exit %d: %s", code, out)
	}
	stream := d.files().WriteFile(context.Background())
	_ = stream.Send(&ctrlv1.WriteFileRequest{WorkspaceId: id, Frame: &ctrlv1.WriteFileRequest_Header{Header: &ctrlv1.WriteFileHeader{Path: "/root/more"}}})
	_ = stream.Send(&ctrlv1.WriteFileRequest{WorkspaceId: id, Frame: &ctrlv1.WriteFileRequest_Data{Data: make([]byte, 4<<20)}})
	_, err = stream.CloseAndReceive()
	if connect.CodeOf(err) != connect.CodeResourceExhausted || stageOf(err) != ctrlv1.FailureStage_FAILURE_STAGE_WRITING_FILE {
		t.Errorf("WriteFile into a full layer: %v (stage %v), want resource_exhausted at WRITING_FILE", err, stageOf(err))
	}
	if got := d.workspace(t, id).GetState(); got != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
		t.Errorf("state %v after the layer filled up", got)
	}
	if out, err := d.execWith(token, id, "cat", "/root/kept"); err != nil || out != "kept\n" {
		t.Errorf("what was stored before: %q, %v", out, err)
	}
	if _, err := d.execWith(token, id, "sh", "-c", "rm /root/fill && echo again > /root/again && cat /root/again"); err != nil {
		t.Errorf("writing after freeing space: %v", err)
	}
	d.mustKibotos(t, "workspace", "delete", id)
	d.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED)
}
