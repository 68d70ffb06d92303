package transfer_test

import (
	"bytes"
	"os"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

const exportStage = ctrlv1.FailureStage_FAILURE_STAGE_EXPORTING_WORKSPACE

// failedBound is a Workspace bound to Volume volID whose create failed (no
// VM boots UnbootableCatalog's platform): FAILED with its execution
// released, as an export finds it.
func (f *fleet) failedBound(volID string) *ctrlv1.Workspace {
	f.t.Helper()
	res, err := f.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: cmd("create-1"),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 << 20},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: volID},
		},
	}))
	if err != nil {
		f.t.Fatal(err)
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	var w *ctrlv1.Workspace
	testenv.WaitFor(f.t, "the create to fail", func() bool {
		w = f.workspace(id)
		return w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED
	})
	return w
}

// "while the export runs, it holds the Workspace and its Volume the same
// way (a start, delete, move or resize answers unavailable until it
// ends)", and "the Volume is always captured when there is one": while an
// ExportWorkspace waits for a node, neither its binding nor its memory nor
// its writable layer's capacity changes (unavailable naming the export,
// designed here: the archive carries what its manifest says), nor does it
// start, nor is it deleted, nor is its Volume resized; the Volume stays
// bound, so it is not deleted either. The archive then carries the Volume.
func TestAnExportHoldsTheWorkspaceAndItsVolume(t *testing.T) {
	f := newFleet(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	f.c.UnbootableCatalog(t)
	vol := f.volume("vol-1", 64<<20)
	w := f.failedBound(vol)
	id := w.GetWorkspaceId()
	f.node.Stop(t) // the export waits for a node to read the block file
	exp, err := f.c.Workspaces.ExportWorkspace(ctx, connect.NewRequest(&ctrlv1.ExportWorkspaceRequest{Command: cmd("export-1"), WorkspaceId: id}))
	if err != nil {
		t.Fatal(err)
	}
	held := func(what string, err error) {
		t.Helper()
		if connect.CodeOf(err) != connect.CodeUnavailable || apierr.DetailOf(err).GetCommandId() != "export-1" {
			t.Errorf("%s while the export runs: %v, want unavailable naming export-1", what, err)
		}
	}
	_, err = f.c.Workspaces.UpdateWorkspaceVolumeBinding(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceVolumeBindingRequest{
		Command: cmd("bind-1"), WorkspaceId: id, ExpectedBindingRevision: w.GetSpec().GetBindingRevision(),
		Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE},
	}))
	held("a binding change", err)
	_, err = f.c.Workspaces.ResizeWorkspaceWritableLayer(ctx, connect.NewRequest(&ctrlv1.ResizeWorkspaceWritableLayerRequest{
		Command: cmd("layer-1"), WorkspaceId: id, ExpectedResourcesRevision: w.GetSpec().GetResourcesRevision(), CapacityBytes: 4 << 30,
	}))
	held("a writable layer resize", err)
	_, err = f.c.Workspaces.UpdateWorkspaceMemory(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceMemoryRequest{
		Command: cmd("memory-1"), WorkspaceId: id, ExpectedResourcesRevision: w.GetSpec().GetResourcesRevision(), MemoryBytes: 512 << 20,
	}))
	held("a memory update", err)
	_, err = f.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd("start-1"), WorkspaceId: id}))
	held("a start", err)
	_, err = f.c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: cmd("delete-1"), WorkspaceId: id}))
	held("a delete", err)
	_, err = f.c.Volumes.ResizeVolume(ctx, connect.NewRequest(&ctrlv1.ResizeVolumeRequest{Command: cmd("resize-1"), VolumeId: vol, CapacityBytes: 128 << 20}))
	held("a resize of its Volume", err)
	if _, err := f.c.Volumes.DeleteVolume(ctx, connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: cmd("delete-vol"), VolumeId: vol})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("a delete of its Volume while the export runs: %v, want failed_precondition (still bound)", err)
	}

	f.node = f.c.StartNode(t, "node-a", f.node.StateDir, f.node.PoolDir)
	tr := f.settled(exp.Msg.GetTransfer().GetTransferId())
	if tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_COMPLETE {
		t.Fatalf("the export: %v (%v)", tr.GetState(), tr.GetFailure())
	}
	m, err := archive.Extract(bytes.NewReader(f.download(tr.GetTransferId())), t.TempDir(), archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range m.Parts {
		found = found || p.Name == "volume"
	}
	if !found || tr.GetManifest().GetVolumeCapacityBytes() != 64<<20 {
		t.Errorf("the archive's parts %v, manifest %v: want the 64 MiB Volume", m.Parts, tr.GetManifest())
	}
}

// ExportVolume of a Volume with a command in progress (RESIZING, CREATING)
// answers unavailable naming it: "one with a command in progress, or
// moving, answers unavailable"; ExportWorkspace of a DELETED Workspace is
// failed_precondition ("Only a Workspace with no execution exports ...
// failed_precondition otherwise"). Refusals say their stage,
// EXPORTING_WORKSPACE.
func TestExportRefusesBusyAndDeletedSources(t *testing.T) {
	f := newFleet(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	f.c.UnbootableCatalog(t)
	vol := f.volume("vol-1", 64<<20)
	w := f.failedBound(vol)
	if _, err := f.c.Workspaces.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: cmd("delete-1"), WorkspaceId: w.GetWorkspaceId()})); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the Workspace DELETED", func() bool {
		return f.workspace(w.GetWorkspaceId()).GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED
	})
	_, err := f.c.Workspaces.ExportWorkspace(ctx, connect.NewRequest(&ctrlv1.ExportWorkspaceRequest{Command: cmd("export-w"), WorkspaceId: w.GetWorkspaceId()}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || apierr.DetailOf(err).GetStage() != exportStage {
		t.Errorf("ExportWorkspace of a DELETED Workspace: %v (stage %v), want failed_precondition at EXPORTING_WORKSPACE", err, apierr.DetailOf(err).GetStage())
	}

	f.node.Stop(t) // the resize and the creation below wait for a node
	if _, err := f.c.Volumes.ResizeVolume(ctx, connect.NewRequest(&ctrlv1.ResizeVolumeRequest{Command: cmd("resize-1"), VolumeId: vol, CapacityBytes: 128 << 20})); err != nil {
		t.Fatal(err)
	}
	creating, err := f.c.Volumes.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{Command: cmd("vol-2"), Spec: &ctrlv1.VolumeSpec{CapacityBytes: 64 << 20}}))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ volume, command string }{{vol, "resize-1"}, {creating.Msg.GetVolume().GetVolumeId(), "vol-2"}} {
		_, err := f.export("export-"+c.command, c.volume)
		if d := apierr.DetailOf(err); connect.CodeOf(err) != connect.CodeUnavailable || d.GetCommandId() != c.command || d.GetStage() != exportStage {
			t.Errorf("ExportVolume while %s runs: %v (%v), want unavailable naming it at EXPORTING_WORKSPACE", c.command, err, d)
		}
	}
}

// An export whose block file its node cannot read ends FAILED at
// FAILURE_STAGE_EXPORTING_WORKSPACE ("The Transfer is FAILED at
// FAILURE_STAGE_EXPORTING_WORKSPACE when it fails").
func TestAnExportWhoseBlockFileIsGoneFails(t *testing.T) {
	f := newFleet(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	vol := f.volume("vol-1", 64<<20)
	if err := os.Remove(f.node.PoolFile(vol)); err != nil {
		t.Fatal(err)
	}
	tr, err := f.export("export-1", vol)
	if err != nil {
		t.Fatal(err)
	}
	got := f.settled(tr.GetTransferId())
	if got.GetState() != ctrlv1.TransferState_TRANSFER_STATE_FAILED || got.GetFailure().GetStage() != exportStage ||
		got.GetFailure().GetReason() != ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND {
		t.Errorf("an export of a Volume whose block file is gone: %v (%v), want FAILED at EXPORTING_WORKSPACE, not_found", got.GetState(), got.GetFailure())
	}
	if _, err := f.c.Transfers.DownloadTransfer(ctx, connect.NewRequest(&ctrlv1.DownloadTransferRequest{TransferId: tr.GetTransferId()})); err == nil {
		// A stream's error arrives with its first receive.
		stream, _ := f.c.Transfers.DownloadTransfer(ctx, connect.NewRequest(&ctrlv1.DownloadTransferRequest{TransferId: tr.GetTransferId()}))
		for stream.Receive() {
		}
		if connect.CodeOf(stream.Err()) != connect.CodeFailedPrecondition {
			t.Errorf("a download of a FAILED Transfer: %v, want failed_precondition", stream.Err())
		}
	}
	// Only a COMPLETE, IMPORTED or RESTORED Transfer restores: a FAILED
	// one, or one deleted, is failed_precondition.
	f.restoreRefused("restore-failed", tr.GetTransferId(), connect.CodeFailedPrecondition)
	if _, err := f.c.Transfers.DeleteTransfer(ctx, connect.NewRequest(&ctrlv1.DeleteTransferRequest{Command: cmd("delete-1"), TransferId: tr.GetTransferId()})); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the Transfer DELETED", func() bool {
		res, err := f.c.Transfers.GetTransfer(ctx, connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: tr.GetTransferId()}))
		return err == nil && res.Msg.GetTransfer().GetState() == ctrlv1.TransferState_TRANSFER_STATE_DELETED
	})
	f.restoreRefused("restore-deleted", tr.GetTransferId(), connect.CodeFailedPrecondition)
}

// "done_bytes and total_bytes are the progress of the current export,
// import or restore": done_bytes is seen moving while the node sends about
// 48 MiB of blocks, and again while a restore's node fetches them (read
// after read of GetTransfer, no pause between them). Neither goes back
// (designed here: an export's parts count twice, as they arrive and as the
// archive is written), and done_bytes never passes total_bytes.
func TestTransferProgressMovesAndNeverGoesBack(t *testing.T) {
	f := newFleet(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	id := f.volume("vol-1", 512<<20)
	file, err := os.OpenFile(f.node.PoolFile(id), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("kibotos progress "), 1<<16) // about 1 MiB
	for off := int64(16 << 20); off < 400<<20; off += 8 << 20 {
		if _, err := file.WriteAt(chunk, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
	tr, err := f.export("export-1", id)
	if err != nil {
		t.Fatal(err)
	}
	got := f.progressWhile(tr.GetTransferId(), ctrlv1.TransferState_TRANSFER_STATE_EXPORTING)
	if got.GetState() != ctrlv1.TransferState_TRANSFER_STATE_COMPLETE || got.GetDoneBytes() != got.GetTotalBytes() {
		t.Fatalf("the export ended %v at %d of %d bytes", got.GetState(), got.GetDoneBytes(), got.GetTotalBytes())
	}

	// "... or restore": the node fetching the archive's parts. The restore
	// then fails (no VM boots UnbootableCatalog's platform), which ends it.
	f.c.UnbootableCatalog(t)
	if _, err := f.c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{
		Command: cmd("restore-1"), TransferId: tr.GetTransferId(),
		Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 << 20}},
	})); err != nil {
		t.Fatal(err)
	}
	if got := f.progressWhile(tr.GetTransferId(), ctrlv1.TransferState_TRANSFER_STATE_RESTORING); got.GetState() != ctrlv1.TransferState_TRANSFER_STATE_COMPLETE {
		t.Errorf("the Transfer after its restore failed: %v, want COMPLETE again", got.GetState())
	}
}

// progressWhile reads Transfer id again and again, without a pause, while
// it is in state, and checks what it saw: done_bytes moving (more than one
// value between none and all), neither it nor total_bytes going back,
// done_bytes never past total_bytes. It returns the first reading in
// another state.
func (f *fleet) progressWhile(id string, state ctrlv1.TransferState) *ctrlv1.Transfer {
	t := f.t
	t.Helper()
	var seen []*ctrlv1.Transfer
	var got *ctrlv1.Transfer
	for {
		res, err := f.c.Transfers.GetTransfer(ctx, connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: id}))
		if err != nil {
			t.Fatal(err)
		}
		if got = res.Msg.GetTransfer(); got.GetState() != state {
			break
		}
		seen = append(seen, got)
	}
	moving := map[uint64]bool{}
	for i, s := range seen {
		if s.GetDoneBytes() > 0 && s.GetDoneBytes() < s.GetTotalBytes() {
			moving[s.GetDoneBytes()] = true
		}
		if s.GetDoneBytes() > s.GetTotalBytes() {
			t.Errorf("%v, reading %d: done %d past total %d", state, i, s.GetDoneBytes(), s.GetTotalBytes())
		}
		if i > 0 && (s.GetDoneBytes() < seen[i-1].GetDoneBytes() || s.GetTotalBytes() < seen[i-1].GetTotalBytes()) {
			t.Errorf("%v, reading %d went back: %d of %d after %d of %d", state, i, s.GetDoneBytes(), s.GetTotalBytes(), seen[i-1].GetDoneBytes(), seen[i-1].GetTotalBytes())
		}
	}
	if len(moving) < 2 {
		t.Errorf("done_bytes took %d values between 0 and total_bytes in %d readings while %v, want it seen moving", len(moving), len(seen), state)
	}
	t.Logf("%d readings while %v, %d values of done_bytes between none and all", len(seen), state, len(moving))
	return got
}

// ExportVolume "captures a Volume no execution holds": a DELETED or an
// ATTACHED Volume is failed_precondition with the Volume as observed, and
// a LOST one (its
// pool declared lost) failed_precondition with FAILURE_REASON_VOLUME_LOST,
// both at EXPORTING_WORKSPACE; neither admits a Transfer.
func TestExportVolumeRefusesDeletedAndLostVolumes(t *testing.T) {
	f := newFleet(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	deleted, lost := f.volume("vol-1", 64<<20), f.volume("vol-2", 64<<20)
	if _, err := f.c.Volumes.DeleteVolume(ctx, connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: cmd("delete-1"), VolumeId: deleted})); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the Volume DELETED", func() bool {
		v, err := f.c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: deleted}))
		return err == nil && v.Msg.GetVolume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_DELETED
	})
	_, err := f.export("export-deleted", deleted)
	if d := apierr.DetailOf(err); connect.CodeOf(err) != connect.CodeFailedPrecondition || d.GetStage() != exportStage ||
		d.GetObservedVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_DELETED {
		t.Errorf("ExportVolume of a DELETED Volume: %v (%v), want failed_precondition at EXPORTING_WORKSPACE observing it", err, d)
	}

	// An ATTACHED Volume is held by an execution: as a start leaves it,
	// written here without one.
	attached := f.volume("vol-3", 64<<20)
	if err := f.c.Ctrl.Store().Tx(ctx, func(tx *store.Tx) error {
		v, err := tx.GetVolume(attached, true)
		if err != nil {
			return err
		}
		v.State = ctrlv1.VolumeState_VOLUME_STATE_ATTACHED
		return tx.PutVolume(v)
	}); err != nil {
		t.Fatal(err)
	}
	_, err = f.export("export-attached", attached)
	if d := apierr.DetailOf(err); connect.CodeOf(err) != connect.CodeFailedPrecondition || d.GetStage() != exportStage ||
		d.GetObservedVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_ATTACHED {
		t.Errorf("ExportVolume of an ATTACHED Volume: %v (%v), want failed_precondition at EXPORTING_WORKSPACE observing it", err, d)
	}

	f.node.Stop(t)
	reg := f.c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	if _, err := f.c.Nodes.IsolateNode(ctx, connect.NewRequest(&operatorv1.IsolateNodeRequest{Command: cmd("isolate-1"), NodeId: "node-a", Incarnation: reg.GetIncarnation()})); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Nodes.DeclareStoragePoolLost(ctx, connect.NewRequest(&operatorv1.DeclareStoragePoolLostRequest{Command: cmd("lost-1"), StoragePool: "default"})); err != nil {
		t.Fatal(err)
	}
	_, err = f.export("export-lost", lost)
	if d := apierr.DetailOf(err); connect.CodeOf(err) != connect.CodeFailedPrecondition || d.GetStage() != exportStage ||
		d.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST {
		t.Errorf("ExportVolume of a LOST Volume: %v (%v), want failed_precondition, VOLUME_LOST, at EXPORTING_WORKSPACE", err, d)
	}
	list, err := f.c.Transfers.ListTransfers(ctx, connect.NewRequest(&ctrlv1.ListTransfersRequest{}))
	if err != nil || len(list.Msg.GetTransfers()) != 0 {
		t.Errorf("Transfers after refused exports: %v %v", list, err)
	}
}
