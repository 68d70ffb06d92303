package cli_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/testenv"
)

// workspace restore admits a Workspace from a Volume's export with the
// flags given in place of the archive's values (create's resources where
// the archive carries none), bound to a Volume, and holds the Transfer
// RESTORING; a Transfer that does not exist and a missing id are errors.
func TestWorkspaceRestoreCommand(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	c.StartNodeWithPools(t, "node-a", "", node.Pool{Name: "default", Dir: t.TempDir(), Default: true})
	c.EnsureCapacity(t, "default", 1<<40)
	c.EnsureTemplate(t) // admitted, then waiting for a platform: no VM

	if code, _, errOut := kibotosAll(t, c, "workspace", "restore", "tr-nope"); code == 0 || !strings.Contains(errOut, "not_found") {
		t.Errorf("workspace restore tr-nope: exit %d, %s", code, errOut)
	}
	if code, _, errOut := kibotosAll(t, c, "workspace", "restore"); code == 0 || !strings.Contains(errOut, "accepts 1 arg(s), received 0") {
		t.Errorf("workspace restore without an id: exit %d, %s", code, errOut)
	}
	if code, _, errOut := kibotosAll(t, c, "workspace", "restore", "tr-nope", "--volume", "vol-1"); code == 0 || !strings.Contains(errOut, "unknown flag: --volume") {
		t.Errorf("workspace restore --volume: exit %d, %s", code, errOut)
	}

	code, out, errOut := kibotosAll(t, c, "volume", "create", "--capacity", "64Mi", "-q")
	if code != 0 {
		t.Fatalf("volume create: exit %d\n%s%s", code, out, errOut)
	}
	vol := strings.TrimSpace(out)
	code, out, errOut = kibotosAll(t, c, "volume", "export", vol, "-q")
	if code != 0 {
		t.Fatalf("volume export: exit %d\n%s%s", code, out, errOut)
	}
	tr := strings.TrimSpace(out)

	code, out, errOut = kibotosAll(t, c, "workspace", "restore", tr, "--no-wait", "-o", "json", "--memory", "256Mi", "--label", "from=restore")
	res := &ctrlv1.RestoreWorkspaceResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), res) != nil {
		t.Fatalf("workspace restore --no-wait -o json: exit %d\n%s%s", code, out, errOut)
	}
	w, spec := res.GetWorkspace(), res.GetWorkspace().GetSpec()
	if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING || res.GetCommand().GetKind() != ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_RESTORE {
		t.Errorf("restore answered %s under a %s command, want CREATING under RESTORE", w.GetState(), res.GetCommand().GetKind())
	}
	if r := spec.GetResources(); r.GetMemoryBytes() != 256<<20 || r.GetCpuMillis() != 1000 {
		t.Errorf("restored resources %v, want 256 MiB (--memory) and 1000 millis (create's: the archive has none)", r)
	}
	if b := spec.GetVolume(); b.GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND || b.GetVolumeId() == "" || b.GetVolumeId() == vol {
		t.Errorf("restored Volume binding %v, want a new Volume bound", b)
	}
	if w.GetLabels()["from"] != "restore" {
		t.Errorf("restored labels %v, want from=restore", w.GetLabels())
	}
	got, err := c.Transfers.GetTransfer(context.Background(), connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: tr}))
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Msg.GetTransfer().GetState(); s != ctrlv1.TransferState_TRANSFER_STATE_RESTORING {
		t.Errorf("the restored Transfer is %s, want RESTORING", s)
	}
}
