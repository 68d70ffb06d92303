package cli_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/testenv"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// volume export follows the Transfer to COMPLETE and downloads an archive
// whose "volume" part is the Volume's block file; a Volume that does not
// exist and a missing id are errors.
func TestVolumeExportCommand(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	n := c.StartNodeWithPools(t, "node-a", "", node.Pool{Name: "default", Dir: t.TempDir(), Default: true})
	c.EnsureCapacity(t, "default", 1<<40)

	code, out, errOut := kibotosAll(t, c, "volume", "create", "--capacity", "64Mi", "-q")
	if code != 0 {
		t.Fatalf("volume create: exit %d\n%s%s", code, out, errOut)
	}
	vol := strings.TrimSpace(out)
	block := n.PoolFile(vol)
	writeBlock(t, block, 40<<20, bytes.Repeat([]byte("kibotos export\n"), 64<<10))

	dir := t.TempDir()
	file := filepath.Join(dir, "volume.kbta")
	code, out, errOut = kibotosAll(t, c, "volume", "export", vol, "-o", "json", "--download", file)
	res := &ctrlv1.GetTransferResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), res) != nil {
		t.Fatalf("volume export -o json --download: exit %d\n%s%s", code, out, errOut)
	}
	tr := res.GetTransfer()
	if tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_COMPLETE || tr.GetManifest().GetSourceVolumeId() != vol {
		t.Fatalf("volume export answered %v", tr)
	}
	if !strings.Contains(errOut, "exported volume "+vol) || !strings.Contains(errOut, "downloaded "+file) {
		t.Errorf("volume export showed no progress: %q", errOut)
	}
	a, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(a); "sha256:"+hex.EncodeToString(sum[:]) != tr.GetManifest().GetDigest() {
		t.Errorf("the download's sha256 differs from the manifest's digest %s", tr.GetManifest().GetDigest())
	}
	parts := t.TempDir()
	if _, err := archive.Extract(bytes.NewReader(a), parts, archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(parts, "volume"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(block)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the archive's volume part (%d bytes) differs from the block file (%d bytes)", len(got), len(want))
	}

	// The table names what each Transfer is of.
	if code, out, errOut = kibotosAll(t, c, "transfer", "list"); code != 0 || !strings.Contains(out, "SOURCE") || !strings.Contains(out, tr.GetTransferId()+"  COMPLETE  "+vol) {
		t.Errorf("transfer list after a volume export: exit %d\n%s%s", code, out, errOut)
	}

	if code, _, errOut = kibotosAll(t, c, "volume", "export", "vol-nope"); code == 0 || !strings.Contains(errOut, "not_found") {
		t.Errorf("volume export vol-nope: exit %d, %s", code, errOut)
	}
	if code, _, errOut = kibotosAll(t, c, "workspace", "export"); code == 0 || !strings.Contains(errOut, "accepts 1 arg(s), received 0") {
		t.Errorf("workspace export without an id: exit %d, %s", code, errOut)
	}
}

// writeBlock writes data into the block file at offset (past the
// filesystem's metadata), as a guest writing to the Volume would.
func writeBlock(t *testing.T, path string, offset int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, offset); err != nil {
		t.Fatal(err)
	}
}
