package transfer_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	ctrlfleet "github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// fleet is a real ctrl on one database kind with one real node agent
// declaring one pool: what an export needs to read a block file.
type fleet struct {
	t     *testing.T
	c     *testenv.Cluster
	node  *testenv.Node
	state string // ctrl's state directory
}

func newFleet(t *testing.T, b storetest.Backend) *fleet {
	dsn, state := b.DSN(t), t.TempDir()
	c := testenv.New(t, testenv.FastFleet(), func(cfg *ctrl.Config) { cfg.Database, cfg.StateDir = dsn, state })
	n := c.StartNode(t, "node-a", "", t.TempDir())
	c.EnsureCapacity(t, "default", 1<<30)
	return &fleet{t: t, c: c, node: n, state: state}
}

// volume creates an AVAILABLE Volume of capacity and returns its id.
func (f *fleet) volume(commandID string, capacity uint64) string {
	f.t.Helper()
	res, err := f.c.Volumes.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{
		Command: cmd(commandID), Spec: &ctrlv1.VolumeSpec{CapacityBytes: capacity},
	}))
	if err != nil {
		f.t.Fatal(err)
	}
	id := res.Msg.GetVolume().GetVolumeId()
	testenv.WaitFor(f.t, "volume "+id+" AVAILABLE", func() bool {
		got, err := f.c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: id}))
		return err == nil && got.Msg.GetVolume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
	})
	return id
}

func (f *fleet) export(commandID, volumeID string) (*ctrlv1.Transfer, error) {
	res, err := f.c.Volumes.ExportVolume(ctx, connect.NewRequest(&ctrlv1.ExportVolumeRequest{Command: cmd(commandID), VolumeId: volumeID}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetTransfer(), nil
}

// settled waits until Transfer id is no longer EXPORTING.
func (f *fleet) settled(id string) *ctrlv1.Transfer {
	f.t.Helper()
	var tr *ctrlv1.Transfer
	testenv.WaitFor(f.t, "transfer "+id+" settled", func() bool {
		res, err := f.c.Transfers.GetTransfer(ctx, connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: id}))
		if err != nil {
			f.t.Fatal(err)
		}
		tr = res.Msg.GetTransfer()
		return tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_EXPORTING
	})
	return tr
}

func (f *fleet) download(id string) []byte {
	f.t.Helper()
	stream, err := f.c.Transfers.DownloadTransfer(ctx, connect.NewRequest(&ctrlv1.DownloadTransferRequest{TransferId: id}))
	if err != nil {
		f.t.Fatal(err)
	}
	var buf bytes.Buffer
	for stream.Receive() {
		buf.Write(stream.Msg().GetData())
	}
	if err := stream.Err(); err != nil {
		f.t.Fatal(err)
	}
	return buf.Bytes()
}

// scribble writes a few MiB at far-apart offsets of a block file, as a
// guest would, and returns the file's content.
func scribble(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, off := range []int64{8 << 20, 40 << 20, 100 << 20} {
		if _, err := f.WriteAt(bytes.Repeat([]byte(fmt.Sprintf("kibotos %d ", i)), 1<<17), off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An exported Volume is a COMPLETE Transfer whose archive carries the
// block file's used blocks only and restores to the same bytes; the
// manifest names the Volume; a replay answers the same Transfer, other
// input under the same command id is already_exists.
func TestExportVolumeCarriesItsBlocks(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f := newFleet(t, b)
			id := f.volume("vol-1", 128<<20)
			want := scribble(t, f.node.PoolFile(id))

			tr, err := f.export("export-1", id)
			if err != nil {
				t.Fatal(err)
			}
			if tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_EXPORTING || tr.GetManifest().GetSourceVolumeId() != id ||
				tr.GetManifest().GetVolumeCapacityBytes() != 128<<20 {
				t.Fatalf("admitted transfer %v", tr)
			}
			if again, err := f.export("export-1", id); err != nil || again.GetTransferId() != tr.GetTransferId() {
				t.Fatalf("replay: %v, %v", again, err)
			}
			if _, err := f.export("export-1", "vol-other"); connect.CodeOf(err) != connect.CodeAlreadyExists {
				t.Fatalf("same command id, other volume: %v", err)
			}

			done := f.settled(tr.GetTransferId())
			m := done.GetManifest()
			if done.GetState() != ctrlv1.TransferState_TRANSFER_STATE_COMPLETE || m.GetCompleteness() != ctrlv1.Completeness_COMPLETENESS_COMPLETE ||
				done.GetDoneBytes() != m.GetSizeBytes() || done.GetTotalBytes() != m.GetSizeBytes() || m.GetCreatedAt() == nil {
				t.Fatalf("settled transfer %v", done)
			}
			data := f.download(tr.GetTransferId())
			if uint64(len(data)) != m.GetSizeBytes() || fmt.Sprintf("sha256:%x", sha256.Sum256(data)) != m.GetDigest() {
				t.Fatalf("downloaded %d bytes; manifest says %d bytes, %s", len(data), m.GetSizeBytes(), m.GetDigest())
			}
			// Sparse: the archive is the few MiB written (and what mkfs
			// wrote), not the 128 MiB the Volume declares.
			if len(data) > 32<<20 {
				t.Errorf("archive of %d bytes for a Volume with about 3 MiB written", len(data))
			}
			dir := t.TempDir()
			if _, err := archive.Extract(bytes.NewReader(data), dir, archive.Limits{}); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(filepath.Join(dir, "volume"))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the archive's volume part differs from the block file (%v)", err)
			}
			if leftovers, _ := filepath.Glob(filepath.Join(f.state, "artifacts", "transfers", "*.parts")); len(leftovers) != 0 {
				t.Errorf("staged parts left: %v", leftovers)
			}
		})
	}
}

// restoreRefused asserts that RestoreWorkspace of Transfer id is refused
// with code at FAILURE_STAGE_RESTORING_WORKSPACE and changes nothing: the
// Transfer keeps its state and no Workspace is admitted.
func (f *fleet) restoreRefused(commandID, id string, code connect.Code) {
	f.t.Helper()
	before, err := f.c.Transfers.GetTransfer(ctx, connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: id}))
	if err != nil {
		f.t.Fatal(err)
	}
	_, err = f.c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{Command: cmd(commandID), TransferId: id}))
	state := before.Msg.GetTransfer().GetState()
	if d := apierr.DetailOf(err); connect.CodeOf(err) != code || d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE || d.GetField() != "transfer_id" {
		f.t.Errorf("restoring a %v Transfer: %v (%v), want %v naming transfer_id at RESTORING_WORKSPACE", state, err, d, code)
	}
	after, err := f.c.Transfers.GetTransfer(ctx, connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: id}))
	if err != nil || after.Msg.GetTransfer().GetState() != state {
		f.t.Errorf("a %v Transfer after a refused restore: %v %v", state, after, err)
	}
	list, err := f.c.Workspaces.ListWorkspaces(ctx, connect.NewRequest(&ctrlv1.ListWorkspacesRequest{}))
	if err != nil || len(list.Msg.GetWorkspaces()) != 0 {
		f.t.Errorf("Workspaces after a refused restore: %v %v", list, err)
	}
}

// Refusals change nothing: a missing Volume is not_found, a missing id
// invalid_argument; an export holds the Volume (a resize or another export
// answers unavailable until it ended).
func TestExportVolumeRefusals(t *testing.T) {
	f := newFleet(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	if _, err := f.export("x-1", ""); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("no volume_id: %v", err)
	}
	if _, err := f.export("x-2", "vol-nope"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("missing volume: %v", err)
	}
	if _, err := f.export("", "vol-nope"); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("no command id: %v", err)
	}
	restore := func(commandID, transferID string, spec *ctrlv1.WorkspaceCreateSpec) error {
		_, err := f.c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{Command: cmd(commandID), TransferId: transferID, Spec: spec}))
		return err
	}
	if err := restore("r-1", "", nil); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "transfer_id") {
		t.Errorf("restore without transfer_id: %v", err)
	}
	if err := restore("r-2", "tr-nope", nil); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("restore of a missing Transfer: %v", err)
	}
	volume := &ctrlv1.WorkspaceCreateSpec{Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}}
	if err := restore("r-3", "tr-nope", volume); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "spec.volume") {
		t.Errorf("restore with a volume binding: %v", err)
	}
	id := f.volume("vol-1", 64<<20)
	f.node.Stop(t) // the export cannot end while no node reaches the pool
	tr, err := f.export("export-1", id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.export("export-2", id); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("a second export while the first runs: %v", err)
	}
	_, err = f.c.Volumes.ResizeVolume(ctx, connect.NewRequest(&ctrlv1.ResizeVolumeRequest{Command: cmd("resize-1"), VolumeId: id, CapacityBytes: 128 << 20}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("a resize while the export runs: %v", err)
	}
	if _, err := f.c.Transfers.DeleteTransfer(ctx, connect.NewRequest(&ctrlv1.DeleteTransferRequest{Command: cmd("del-1"), TransferId: tr.GetTransferId()})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("deleting an EXPORTING transfer: %v", err)
	}
	f.restoreRefused("restore-exporting", tr.GetTransferId(), connect.CodeUnavailable)
}

// While a Volume moves between pools it is not exported: the export answers
// unavailable naming the move's command, and admits nothing.
func TestExportWaitsForAMove(t *testing.T) {
	dsn := storetest.SQLiteDSN(t)
	c := testenv.New(t, testenv.FastFleet(), testenv.WithMoveWait(100*time.Millisecond), func(cfg *ctrl.Config) { cfg.Database = dsn })
	n := c.StartNodeWithPools(t, "node-a", "", node.Pool{Name: "pool-a", Dir: t.TempDir(), Default: true}, node.Pool{Name: "pool-b", Dir: t.TempDir()})
	c.EnsureCapacity(t, "pool-a", 1<<30)
	c.EnsureCapacity(t, "pool-b", 1<<30)
	f := &fleet{t: t, c: c, node: n}
	id := f.volume("vol-1", 64<<20)
	n.Stop(t) // the move cannot settle while no node copies it
	_, err := c.Nodes.MoveVolume(ctx, connect.NewRequest(&operatorv1.MoveVolumeRequest{Command: cmd("move-1"), VolumeId: id, StoragePool: "pool-b"}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("a move with no node to copy it: %v, want unavailable while it has not settled", err)
	}
	_, err = f.export("export-1", id)
	var ce *connect.Error
	if connect.CodeOf(err) != connect.CodeUnavailable || !errors.As(err, &ce) || len(ce.Details()) == 0 {
		t.Fatalf("exporting a moving Volume: %v, want unavailable with details", err)
	}
	d, _ := ce.Details()[0].Value()
	if d.(*ctrlv1.ErrorDetail).GetCommandId() != "move-1" {
		t.Errorf("the refusal names command %v, want move-1", d)
	}
	list, err := c.Transfers.ListTransfers(ctx, connect.NewRequest(&ctrlv1.ListTransfersRequest{}))
	if err != nil || len(list.Msg.GetTransfers()) != 0 {
		t.Errorf("transfers after a refused export: %v %v", list, err)
	}
}

// A restore whose start fails (a platform no VM boots) fails at
// FAILURE_STAGE_RESTORING_WORKSPACE, gives the Transfer back its state, and
// releases the imported Volume, which keeps the archive's data, unbound and
// AVAILABLE, whatever delete_with_workspace says.
func TestAFailedRestoreReleasesTheImportedVolume(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f := newFleet(t, b)
			f.c.UnbootableCatalog(t)
			id := f.volume("vol-1", 128<<20)
			want := scribble(t, f.node.PoolFile(id))
			tr, err := f.export("export-1", id)
			if err != nil {
				t.Fatal(err)
			}
			f.settled(tr.GetTransferId())
			spec := &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 << 20}}
			res, err := f.c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{
				Command: cmd("restore-1"), TransferId: tr.GetTransferId(), Spec: spec,
			}))
			if err != nil {
				t.Fatal(err)
			}
			ws := res.Msg.GetWorkspace()
			restoredVolume := ws.GetSpec().GetVolume().GetVolumeId()
			if restoredVolume == "" || restoredVolume == id {
				t.Fatalf("restored Workspace bound to %q", restoredVolume)
			}
			if _, err := f.c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{Command: cmd("restore-2"), TransferId: tr.GetTransferId(), Spec: spec})); connect.CodeOf(err) != connect.CodeUnavailable {
				t.Errorf("a second restore while the first runs: %v, want unavailable", err)
			}
			var w *ctrlv1.Workspace
			testenv.WaitFor(t, "the restore failed", func() bool {
				w = f.workspace(ws.GetWorkspaceId())
				return w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED
			})
			if w.GetFailure().GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE || w.GetSpec().GetVolume().GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE {
				t.Errorf("failed restore: failure %v, binding %v", w.GetFailure(), w.GetSpec().GetVolume())
			}
			if got := f.settled(tr.GetTransferId()); got.GetState() != ctrlv1.TransferState_TRANSFER_STATE_COMPLETE || got.GetRestoredAt() != nil ||
				got.GetDoneBytes() != got.GetManifest().GetSizeBytes() || got.GetTotalBytes() != got.GetManifest().GetSizeBytes() {
				t.Errorf("the Transfer after a failed restore: %v", got)
			}
			v, err := f.c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: restoredVolume}))
			if err != nil || v.Msg.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE || v.Msg.GetVolume().GetBoundWorkspaceId() != "" {
				t.Fatalf("the imported Volume after a failed restore: %v %v", v, err)
			}
			if got, err := os.ReadFile(f.node.PoolFile(restoredVolume)); err != nil || !bytes.Equal(got, want) {
				t.Errorf("the imported Volume's block file differs from the exported one (%v)", err)
			}
		})
	}
}

// A restore that fails before its Volume arrived on a node (no node to
// place it on within the placement timeout) fails at FAILURE_STAGE_PLACING,
// as a create does, gives the Transfer back its state, and deletes the
// imported Volume, which never held anything: "A failed RestoreWorkspace
// that holds no execution releases the imported Volume".
func TestAFailedRestoreDeletesAVolumeThatNeverArrived(t *testing.T) {
	fc := ctrlfleet.Config{ObservationInterval: 500 * time.Millisecond, ClockProbeInterval: 250 * time.Millisecond,
		ClockTolerance: 10 * time.Second, PlacementTimeout: 2 * time.Second}
	c := testenv.New(t, testenv.WithFleet(fc))
	n := c.StartNode(t, "node-a", "", t.TempDir())
	c.EnsureCapacity(t, "default", 1<<30)
	f := &fleet{t: t, c: c, node: n}
	c.UnbootableCatalog(t)
	tr, err := f.export("export-1", f.volume("vol-1", 64<<20))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.settled(tr.GetTransferId()); got.GetState() != ctrlv1.TransferState_TRANSFER_STATE_COMPLETE {
		t.Fatalf("the export: %v", got)
	}
	n.Stop(t)
	c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	res, err := c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{Command: cmd("restore-1"), TransferId: tr.GetTransferId(),
		Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 << 20}}}))
	if err != nil {
		t.Fatal(err)
	}
	ws := res.Msg.GetWorkspace()
	imported := ws.GetSpec().GetVolume().GetVolumeId()
	var w *ctrlv1.Workspace
	testenv.WaitFor(t, "the restore failed", func() bool {
		w = f.workspace(ws.GetWorkspaceId())
		return w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED
	})
	if w.GetFailure().GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING || w.GetSpec().GetVolume().GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE {
		t.Errorf("the failed restore: failure %v, binding %v; want stage PLACING, no binding", w.GetFailure(), w.GetSpec().GetVolume())
	}
	if got := f.settled(tr.GetTransferId()); got.GetState() != ctrlv1.TransferState_TRANSFER_STATE_COMPLETE {
		t.Errorf("the Transfer after the failed restore: %v, want COMPLETE", got)
	}
	v, err := c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: imported}))
	if err != nil || v.Msg.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_DELETED {
		t.Errorf("the imported Volume that never arrived, after the failed restore: %v %v, want DELETED", v, err)
	}
}

// A restore of an archive holding a part it would leave behind (a block
// part "rootfs" beside the Volume, as an archive from a newer ctrl might
// carry) is refused at admission: failed_precondition naming transfer_id
// at RESTORING_WORKSPACE, no Workspace made, the Transfer still IMPORTED.
// Restored, the part's data would have been lost without a word. The
// import takes the archive: it is well formed.
func TestARestoreRefusesAnArchiveWithAPartItWouldLeaveBehind(t *testing.T) {
	f := newFleet(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	f.c.UnbootableCatalog(t) // a node, a pool and a template: the restore is admitted but for the part
	c := f.c
	var inputs []archive.Input
	for _, name := range []string{"volume", "rootfs"} {
		f, err := os.Create(filepath.Join(t.TempDir(), name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(64 << 20); err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("kibotos "+name), 1<<20); err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, archive.Input{Name: name, Kind: archive.KindBlock, File: f})
	}
	var a bytes.Buffer
	if _, err := archive.Write(ctx, &a, archive.Manifest{
		Source: archive.Source{Kind: archive.SourceVolume, Spec: []byte(`{"spec":{"capacityBytes":"67108864"}}`)},
	}, inputs); err != nil {
		t.Fatal(err)
	}
	tr := c.Import(t, "import-1", a.Bytes())
	_, err := c.Workspaces.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{Command: cmd("restore-1"), TransferId: tr.GetTransferId(),
		Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 << 20}}}))
	d := apierr.DetailOf(err)
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || d.GetField() != "transfer_id" || d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_RESTORING_WORKSPACE ||
		!strings.Contains(err.Error(), `"rootfs"`) {
		t.Errorf("a restore of an archive with a part %q: %v (%v), want failed_precondition naming transfer_id and the part at RESTORING_WORKSPACE", "rootfs", err, d)
	}
	list, err := c.Workspaces.ListWorkspaces(ctx, connect.NewRequest(&ctrlv1.ListWorkspacesRequest{}))
	if err != nil || len(list.Msg.GetWorkspaces()) != 0 {
		t.Errorf("Workspaces after the refused restore: %v %v, want none", list, err)
	}
	got, err := c.Transfers.GetTransfer(ctx, connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: tr.GetTransferId()}))
	if err != nil || got.Msg.GetTransfer().GetState() != ctrlv1.TransferState_TRANSFER_STATE_IMPORTED {
		t.Errorf("the Transfer after the refused restore: %v %v, want IMPORTED", got, err)
	}
}
