package transfer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// vmWait bounds what waits for a VM to boot under TCG on a loaded machine.
const vmWait = 4 * time.Minute

func (f *fleet) workspace(id string) *ctrlv1.Workspace {
	f.t.Helper()
	res, err := f.c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
	if err != nil {
		f.t.Fatal(err)
	}
	return res.Msg.GetWorkspace()
}

func (f *fleet) waitWorkspace(id string, want ctrlv1.WorkspaceState) {
	f.t.Helper()
	deadline := time.Now().Add(vmWait)
	for w := f.workspace(id); w.GetState() != want; w = f.workspace(id) {
		if w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED || time.Now().After(deadline) {
			f.t.Fatalf("workspace %s is %v (failure %v), want %v", id, w.GetState(), w.GetFailure(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// catFrom reads a file out of an ext4 image without mounting it.
func catFrom(t *testing.T, image, path string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+path, image).Output()
	if err != nil {
		t.Fatalf("debugfs cat %s in %s: %v", path, image, err)
	}
	return string(out)
}

// A stopped Workspace on a real microVM exports with what its guest wrote
// in / (the writable layer's overlay upper directory) and in its Volume;
// the command is the Workspace's EXPORT, and the archive's manifest names
// the Workspace, its template and resources.
func TestExportWorkspaceCarriesTheGuestsData(t *testing.T) {
	if _, err := exec.LookPath("debugfs"); err != nil {
		t.Fatal("debugfs (e2fsprogs) is needed to read the exported images")
	}
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { exportAndRestoreOnRealVMs(t, b) })
	}
}

func exportAndRestoreOnRealVMs(t *testing.T, b storetest.Backend) {
	f := newFleet(t, b)
	t.Cleanup(f.node.PowerOff)
	f.c.BootableCatalog(t)
	res, err := f.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: cmd("create-1"),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 << 20, WritableLayerCapacityBytes: 256 << 20},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW, NewVolume: &ctrlv1.VolumeSpec{CapacityBytes: 64 << 20}, MountPath: "/data"},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	f.waitWorkspace(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if out, code := f.c.Exec(t, id, "sh", "-c", "echo in-the-layer > /kept && echo in-the-volume > /data/kept && sync"); code != 0 {
		t.Fatalf("writing in the guest: %d %s", code, out)
	}
	if _, err := f.c.Workspaces.ExportWorkspace(ctx, connect.NewRequest(&ctrlv1.ExportWorkspaceRequest{Command: cmd("export-running"), WorkspaceId: id})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("exporting a running Workspace: %v, want failed_precondition", err)
	}
	if _, err := f.c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmd("stop-1"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	f.waitWorkspace(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)

	// Without its template image first (what a deployment that has the
	// template needs), then with it.
	bare, err := f.c.Workspaces.ExportWorkspace(ctx, connect.NewRequest(&ctrlv1.ExportWorkspaceRequest{Command: cmd("export-bare"), WorkspaceId: id}))
	if err != nil {
		t.Fatal(err)
	}
	if tr := f.settled(bare.Msg.GetTransfer().GetTransferId()); tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_COMPLETE {
		t.Fatalf("export without the layer: %v", tr)
	}
	exp, err := f.c.Workspaces.ExportWorkspace(ctx, connect.NewRequest(&ctrlv1.ExportWorkspaceRequest{
		Command: cmd("export-1"), WorkspaceId: id, IncludeWritableLayer: true, IncludeTemplateImage: true,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c := exp.Msg.GetCommand(); c.GetKind() != ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_EXPORT || c.GetWorkspaceId() != id {
		t.Errorf("export command %v", c)
	}
	tr := f.settled(exp.Msg.GetTransfer().GetTransferId())
	m := tr.GetManifest()
	if tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_COMPLETE || m.GetSourceWorkspaceId() != id || m.GetTemplate().GetTemplate() == "" ||
		m.GetResources().GetMemoryBytes() != 256<<20 || m.GetVolumeCapacityBytes() != 64<<20 {
		t.Fatalf("exported transfer %v", tr)
	}
	cmdRes, err := f.c.Workspaces.GetWorkspaceCommand(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{WorkspaceId: id, CommandId: "export-1"}))
	if err != nil || cmdRes.Msg.GetCommand().GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED {
		t.Errorf("the export command once the Transfer is COMPLETE: %v %v", cmdRes, err)
	}

	dir := t.TempDir()
	manifest, err := archive.Extract(bytes.NewReader(f.download(tr.GetTransferId())), dir, archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if manifest.Source.Kind != archive.SourceWorkspace || manifest.Source.ID != id || manifest.Template == nil || manifest.Template.Digest == "" || manifest.Platform == nil || len(manifest.Parts) != 3 ||
		manifest.Parts[2].Name != "template-image" || manifest.Parts[2].Digest != manifest.Template.Digest {
		t.Fatalf("archive manifest %+v", manifest)
	}
	if got := strings.TrimSpace(catFrom(t, filepath.Join(dir, "layer"), "/upper/kept")); got != "in-the-layer" {
		t.Errorf("/kept in the exported layer: %q", got)
	}
	if got := strings.TrimSpace(catFrom(t, filepath.Join(dir, "volume"), "/kept")); got != "in-the-volume" {
		t.Errorf("/data/kept in the exported Volume: %q", got)
	}
	// The export over, the Workspace starts again as it was.
	if _, err := f.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd("start-2"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	f.waitWorkspace(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if out, _ := f.c.Exec(t, id, "cat", "/kept", "/data/kept"); out != "in-the-layer\nin-the-volume\n" {
		t.Errorf("after the export the guest reads %q", out)
	}
	testenv.WaitFor(t, "nothing staged left", func() bool {
		left, _ := filepath.Glob(filepath.Join(f.state, "artifacts", "transfers", "*.parts"))
		return len(left) == 0
	})

	restoreElsewhere(t, b, f.download(bare.Msg.GetTransfer().GetTransferId()), f.downloadResumed(tr.GetTransferId()), id)
}

// downloadResumed downloads Transfer id in two calls: the first stops after
// its first chunk, as a connection that dropped does, the second resumes from
// where it stopped.
func (f *fleet) downloadResumed(id string) []byte {
	f.t.Helper()
	first := func() []byte {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := f.c.Transfers.DownloadTransfer(ctx, connect.NewRequest(&ctrlv1.DownloadTransferRequest{TransferId: id}))
		if err != nil {
			f.t.Fatal(err)
		}
		if !stream.Receive() {
			f.t.Fatalf("no first chunk: %v", stream.Err())
		}
		return append([]byte(nil), stream.Msg().GetData()...)
	}()
	stream, err := f.c.Transfers.DownloadTransfer(ctx, connect.NewRequest(&ctrlv1.DownloadTransferRequest{TransferId: id, Offset: uint64(len(first))}))
	if err != nil {
		f.t.Fatal(err)
	}
	buf := bytes.NewBuffer(first)
	for stream.Receive() {
		if stream.Msg().GetOffset() != uint64(buf.Len()) {
			f.t.Fatalf("a chunk at %d after %d bytes", stream.Msg().GetOffset(), buf.Len())
		}
		buf.Write(stream.Msg().GetData())
	}
	if err := stream.Err(); err != nil {
		f.t.Fatal(err)
	}
	return buf.Bytes()
}

// importArchive uploads data to g's ctrl as an IMPORTED Transfer.
func (f *fleet) importArchive(commandID string, data []byte) string {
	f.t.Helper()
	up := f.c.Transfers.ImportTransfer(ctx)
	if err := up.Send(&ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Header{Header: &ctrlv1.ImportTransferHeader{
		Command: cmd(commandID), SizeBytes: uint64(len(data)), Digest: fmt.Sprintf("sha256:%x", sha256.Sum256(data)),
	}}}); err != nil {
		f.t.Fatal(err)
	}
	for off := 0; off < len(data); off += 1 << 20 {
		if err := up.Send(&ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Data{Data: data[off:min(off+1<<20, len(data))]}}); err != nil {
			f.t.Fatal(err)
		}
	}
	res, err := up.CloseAndReceive()
	if err != nil {
		f.t.Fatal(err)
	}
	return res.Msg.GetTransfer().GetTransferId()
}

// restoreElsewhere imports archives into a second ctrl with its own node
// and state, which has the platform but not the template: the archive
// without the template image does not restore (not_found naming the
// revision, and the Transfer stays IMPORTED); the one with it restores,
// the guest reads its data back, the layer continues (retention
// CONTINUED) and the Volume is a new one.
func restoreElsewhere(t *testing.T, b storetest.Backend, bare, data []byte, sourceID string) {
	g := newFleet(t, b)
	t.Cleanup(g.node.PowerOff)
	art := testenv.BuildVMArtifacts(t)
	if _, err := g.c.Ctrl.Catalog().RegisterPlatform(ctx, "default", art.Platform, art.Dir, true); err != nil {
		t.Fatal(err)
	}
	bareID := g.importArchive("import-bare", bare)
	_, err := g.c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{Command: cmd("restore-bare"), TransferId: bareID}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), "busybox@") {
		t.Errorf("restoring without the template here or in the archive: %v, want not_found naming the revision", err)
	}
	if got, err := g.c.Transfers.GetTransfer(ctx, connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: bareID})); err != nil ||
		got.Msg.GetTransfer().GetState() != ctrlv1.TransferState_TRANSFER_STATE_IMPORTED {
		t.Errorf("the Transfer after a refused restore: %v %v", got, err)
	}
	trID := g.importArchive("import-1", data)

	res, err := g.c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{Command: cmd("restore-1"), TransferId: trID}))
	if err != nil {
		t.Fatal(err)
	}
	w := res.Msg.GetWorkspace()
	if c := res.Msg.GetCommand(); c.GetKind() != ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_RESTORE || w.GetWorkspaceId() == sourceID ||
		w.GetSpec().GetResources().GetMemoryBytes() != 256<<20 || w.GetSpec().GetVolume().GetMountPath() != "/data" {
		t.Fatalf("restore admitted %v, command %v", w, c)
	}
	if again, err := g.c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{Command: cmd("restore-1"), TransferId: trID})); err != nil ||
		again.Msg.GetWorkspace().GetWorkspaceId() != w.GetWorkspaceId() {
		t.Fatalf("replay: %v %v", again, err)
	}
	g.waitWorkspace(w.GetWorkspaceId(), ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if out, _ := g.c.Exec(t, w.GetWorkspaceId(), "cat", "/kept", "/data/kept"); out != "in-the-layer\nin-the-volume\n" {
		t.Errorf("the restored guest reads %q", out)
	}
	restored := g.workspace(w.GetWorkspaceId())
	for _, tier := range restored.GetRetentionTiers() {
		if tier.GetKind() == ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_BEST_EFFORT && tier.GetContinuity() != ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_CONTINUED {
			t.Errorf("BEST_EFFORT tier of the restored Workspace: %v, want CONTINUED", tier)
		}
	}
	got, err := g.c.Transfers.GetTransfer(ctx, connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: trID}))
	tr := got.Msg.GetTransfer()
	if err != nil || tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_RESTORED ||
		tr.GetTotalBytes() == 0 || tr.GetDoneBytes() != tr.GetTotalBytes() || tr.GetRestoredAt() == nil {
		t.Fatalf("the Transfer after the restore: %v %v", got, err)
	}
	restoreFailsAfterARestore(t, g, tr)
}

// restoreFailsAfterARestore restores RESTORED Transfer tr again on a
// platform no VM boots: the restore fails, and the Transfer is RESTORED
// again with the restored_at of the restore that succeeded, not COMPLETE
// or IMPORTED as if it had never restored.
func restoreFailsAfterARestore(t *testing.T, g *fleet, tr *ctrlv1.Transfer) {
	dir := t.TempDir()
	for _, f := range []string{"vmlinux", "initramfs"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("not a "+f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.c.Ctrl.Catalog().RegisterPlatform(ctx, "default", &platform.Manifest{Vmlinux: "vmlinux", Initramfs: "initramfs", Digest: "sha256:unbootable"}, dir, true); err != nil {
		t.Fatal(err)
	}
	res, err := g.c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{Command: cmd("restore-2"), TransferId: tr.GetTransferId()}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	g.waitWorkspace(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED)
	if w := g.workspace(id); w.GetFailure().GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE {
		t.Errorf("the second restore failed at %v", w.GetFailure())
	}
	got, err := g.c.Transfers.GetTransfer(ctx, connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: tr.GetTransferId()}))
	if err != nil {
		t.Fatal(err)
	}
	if after := got.Msg.GetTransfer(); after.GetState() != ctrlv1.TransferState_TRANSFER_STATE_RESTORED ||
		!after.GetRestoredAt().AsTime().Equal(tr.GetRestoredAt().AsTime()) {
		t.Errorf("the Transfer after a failed restore that followed one that succeeded: %v", after)
	}
}
