package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	for range 4 { // 4 MiB, in the largest messages WriteFile takes
		_ = stream.Send(&ctrlv1.WriteFileRequest{WorkspaceId: id, Frame: &ctrlv1.WriteFileRequest_Data{Data: make([]byte, 1<<20)}})
	}
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

// The host runs out of memory under a running Workspace: the VMM is put
// in a memory cgroup whose limit its guest then exceeds, and the kernel's
// OOM killer ends it (cgroup v1, which these machines have; see
// ../shared/notes/vm-on-ci.md). The Workspace stops with
// STOP_CAUSE_HOST_MEMORY_EXHAUSTED and starts again with its data.
func TestHostMemoryExhaustedStopsTheWorkspace(t *testing.T) {
	d := startDev(t)
	id := d.createWorkspace(t)
	d.mustKibotos(t, "workspace", "exec", id, "--", "sh", "-c", "echo kept > /data/kept && sync")
	pid := vmmPID(t, id)
	limitMemory(t, pid, 48<<20)
	// The guest fills 160 MiB of its RAM: the VMM has to back it.
	_, _ = d.kibotos(t, "workspace", "exec", id, "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=160M", "count=1")
	w := d.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	if s := w.GetLastStop(); s.GetCause() != ctrlv1.StopCause_STOP_CAUSE_HOST_MEMORY_EXHAUSTED || s.GetDurability() != ctrlv1.StopDurability_STOP_DURABILITY_UNCONFIRMED {
		t.Errorf("last stop %v, want HOST_MEMORY_EXHAUSTED, UNCONFIRMED", s)
	}
	d.mustKibotos(t, "workspace", "start", id)
	d.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if out := d.mustKibotos(t, "workspace", "exec", id, "--", "cat", "/data/kept"); !strings.Contains(out, "kept") {
		t.Errorf("the Volume after the VMM was killed: %q", out)
	}
	d.mustKibotos(t, "workspace", "delete", id)
	d.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED)
}

// vmmPID is the QEMU process running the Workspace's execution.
func vmmPID(t *testing.T, workspaceID string) int {
	t.Helper()
	out, err := exec.Command("pgrep", "-f", "qemu-system-x86_64.*"+workspaceID).Output()
	if err != nil {
		t.Fatalf("no VMM for %s: %v", workspaceID, err)
	}
	pids := strings.Fields(string(out))
	if len(pids) != 1 {
		t.Fatalf("VMMs for %s: %v", workspaceID, pids)
	}
	pid, err := strconv.Atoi(pids[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// limitMemory moves pid into a new cgroup v1 memory cgroup limited to
// limit bytes.
func limitMemory(t *testing.T, pid int, limit uint64) {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup/memory", fmt.Sprintf("kibotos-e2e-%d", pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("a memory cgroup (cgroup v1) is needed: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	write := func(name, value string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o644); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// Memory the VMM holds already stays charged where it was (moving
	// charges is gone from recent kernels): the limit bounds what it
	// allocates from now on.
	write("memory.limit_in_bytes", strconv.FormatUint(limit, 10))
	write("cgroup.procs", strconv.Itoa(pid))
}
