package e2e_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/clientconfig"
)

func (d *dev) transfers() ctrlv1connect.TransferServiceClient {
	return ctrlv1connect.NewTransferServiceClient(httpClientWithToken(d.env[clientconfig.EnvToken]), d.env[clientconfig.EnvWorkspaceEndpoint])
}

func (d *dev) transfer(t *testing.T, id string) *ctrlv1.Transfer {
	t.Helper()
	res, err := d.transfers().GetTransfer(context.Background(), connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: id}))
	if err != nil {
		t.Fatal(err)
	}
	return res.Msg.GetTransfer()
}

// killDev SIGKILLs kibotos dev: ctrl and its node agent die together, the
// VMs they ran go on.
func killDev(t *testing.T, d *dev) {
	t.Helper()
	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
}

// transfersDir is where dev's ctrl keeps its archives.
func (d *dev) transfersDir() string { return filepath.Join(d.home, "dev", "artifacts", "transfers") }

// The Transfers issue's crash checks, on a real VM: kibotos dev SIGKILLed
// in the middle of an export, of an upload, and right after a restore was
// admitted.
// Each command ends once, the Transfer ends true (COMPLETE, then
// RESTORED), no staged part or partial archive is left, the download is
// resumed after an interruption and matches the digest, and the restored
// Workspace reads the data the first one wrote in / and in its Volume.
func TestTransfersSurviveCtrlKilledMidway(t *testing.T) {
	d := startDev(t)
	id := d.createWorkspace(t)
	d.mustKibotos(t, "workspace", "exec", id, "--", "sh", "-c",
		"dd if=/dev/urandom of=/big bs=1M count=48 2>/dev/null && echo in-the-volume > /data/kept && sync")
	sum := strings.Fields(d.mustKibotos(t, "workspace", "exec", id, "--", "sha256sum", "/big"))[0]
	d.mustKibotos(t, "workspace", "stop", id)
	d.waitState(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)

	var started ctrlv1.ExportWorkspaceResponse
	d.kibotosJSON(t, &started, "workspace", "export", id, "--layer", "--no-wait", "--command-id", "export-1")
	trID := started.GetTransfer().GetTransferId()
	// Kill it once bytes move (or at once, if the export is already over).
	waitUntil(t, "the export under way", time.Minute, func() bool {
		tr := d.transfer(t, trID)
		return tr.GetDoneBytes() > 0 || tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_EXPORTING
	})
	t.Logf("killed with the export %s", d.transfer(t, trID).GetState())
	killDev(t, d)

	d = restartDev(t, d)
	waitUntil(t, "the export COMPLETE", 3*time.Minute, func() bool {
		tr := d.transfer(t, trID)
		if tr.GetState() == ctrlv1.TransferState_TRANSFER_STATE_FAILED {
			t.Fatalf("export failed after the restart: %v", tr.GetFailure())
		}
		return tr.GetState() == ctrlv1.TransferState_TRANSFER_STATE_COMPLETE
	})
	cmd, err := d.workspaces().GetWorkspaceCommand(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{WorkspaceId: id, CommandId: "export-1"}))
	if err != nil || cmd.Msg.GetCommand().GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED {
		t.Fatalf("the export command after the restart: %v %v", cmd, err)
	}
	waitUntil(t, "only the archive left", time.Minute, func() bool {
		left, _ := filepath.Glob(filepath.Join(d.transfersDir(), "*"))
		return len(left) == 1 && left[0] == filepath.Join(d.transfersDir(), trID+".archive")
	})
	archive := checkResumedDownload(t, d, d.transfer(t, trID))
	d = checkImportCutByAKill(t, d, archive)

	restored, err := d.workspaces().RestoreWorkspace(context.Background(), connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "restore-1"}, TransferId: trID,
	}))
	if err != nil {
		t.Fatal(err)
	}
	killDev(t, d)
	d = restartDev(t, d)
	newID := restored.Msg.GetWorkspace().GetWorkspaceId()
	d.waitState(t, newID, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	if got := strings.Fields(d.mustKibotos(t, "workspace", "exec", newID, "--", "sha256sum", "/big"))[0]; got != sum {
		t.Errorf("/big in the restored Workspace has sha256 %s, the original %s", got, sum)
	}
	if got := d.mustKibotos(t, "workspace", "exec", newID, "--", "cat", "/data/kept"); got != "in-the-volume\n" {
		t.Errorf("/data/kept in the restored Workspace: %q", got)
	}
	if tr := d.transfer(t, trID); tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_RESTORED {
		t.Errorf("the Transfer after the restore: %v", tr)
	}
	if a, b := d.workspace(t, id).GetSpec().GetVolume().GetVolumeId(), d.workspace(t, newID).GetSpec().GetVolume().GetVolumeId(); a == b || b == "" {
		t.Errorf("the restored Workspace's Volume %q, the source's %q: want a new one", b, a)
	}
}

// checkResumedDownload downloads tr with the CLI, cuts the file in half as
// an interrupted download leaves it, continues it, and checks the digest;
// it returns the archive.
func checkResumedDownload(t *testing.T, d *dev, tr *ctrlv1.Transfer) []byte {
	t.Helper()
	file := filepath.Join(t.TempDir(), "archive")
	d.mustKibotos(t, "transfer", "download", tr.GetTransferId(), "--file", file)
	if err := os.Truncate(file, int64(tr.GetManifest().GetSizeBytes()/2)); err != nil {
		t.Fatal(err)
	}
	d.mustKibotos(t, "transfer", "download", tr.GetTransferId(), "--file", file)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("sha256:%x", sha256.Sum256(data)); got != tr.GetManifest().GetDigest() {
		t.Errorf("the resumed download has digest %s; the Transfer says %s (%s)", got, tr.GetManifest().GetDigest(), protojson.Format(tr))
	}
	return data
}

// checkImportCutByAKill uploads half of an archive, SIGKILLs kibotos dev
// while the upload waits for the rest, and starts it again: the Transfer
// ends FAILED at FAILURE_STAGE_IMPORTING_TRANSFER (retryable) and nothing
// of its bytes is kept. It returns the restarted dev.
func checkImportCutByAKill(t *testing.T, d *dev, data []byte) *dev {
	t.Helper()
	up := d.transfers().ImportTransfer(context.Background())
	if err := up.Send(&ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Header{Header: &ctrlv1.ImportTransferHeader{
		Command: &ctrlv1.CommandMetadata{CommandId: "import-cut"}, SizeBytes: uint64(len(data)), Digest: fmt.Sprintf("sha256:%x", sha256.Sum256(data)),
	}}}); err != nil {
		t.Fatal(err)
	}
	if err := up.Send(&ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Data{Data: data[:1<<20]}}); err != nil {
		t.Fatal(err)
	}
	var id string
	waitUntil(t, "the upload IMPORTING", time.Minute, func() bool {
		res, err := d.transfers().ListTransfers(context.Background(), connect.NewRequest(&ctrlv1.ListTransfersRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range res.Msg.GetTransfers() {
			if tr.GetState() == ctrlv1.TransferState_TRANSFER_STATE_IMPORTING {
				id = tr.GetTransferId()
			}
		}
		return id != ""
	})
	killDev(t, d)
	_, _ = up.CloseAndReceive()
	d = restartDev(t, d)
	waitUntil(t, "the cut upload FAILED", time.Minute, func() bool {
		return d.transfer(t, id).GetState() == ctrlv1.TransferState_TRANSFER_STATE_FAILED
	})
	if f := d.transfer(t, id).GetFailure(); f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_IMPORTING_TRANSFER || !f.GetRetryable() {
		t.Errorf("the cut upload's failure: %v", f)
	}
	if _, err := os.Stat(filepath.Join(d.transfersDir(), id+".partial")); !os.IsNotExist(err) {
		t.Errorf("the cut upload's partial file: %v", err)
	}
	return d
}
