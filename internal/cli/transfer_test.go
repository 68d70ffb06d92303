package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/testenv"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// writeArchive writes a Volume archive (a 32 MiB sparse file with 2 MiB in
// use) to path.
func writeArchive(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "volume"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(32 << 20); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte("0123456789abcdef"), 128<<10), 4<<20); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := archive.Write(context.Background(), &buf, archive.Manifest{Source: archive.Source{Kind: archive.SourceVolume}},
		[]archive.Input{{Name: "volume", Kind: archive.KindBlock, File: f}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// transfer import, list, get, download (continuing a partial file) and
// delete against a real ctrl.
func TestTransferCommands(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	dir := t.TempDir()
	src := filepath.Join(dir, "volume.kbta")
	a := writeArchive(t, src)

	code, out, errOut := kibotosAll(t, c, "transfer", "import", src, "--label", "team=a", "--command-id", "imp-1", "-o", "json")
	imported := &ctrlv1.ImportTransferResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), imported) != nil || imported.GetTransfer().GetState() != ctrlv1.TransferState_TRANSFER_STATE_IMPORTED {
		t.Fatalf("transfer import: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "import") {
		t.Errorf("transfer import showed no progress: %q", errOut)
	}
	id := imported.GetTransfer().GetTransferId()
	// The same command answers the same Transfer.
	if code, out, errOut = kibotosAll(t, c, "transfer", "import", src, "--label", "team=a", "--command-id", "imp-1", "-q"); code != 0 || strings.TrimSpace(out) != id {
		t.Errorf("import replay: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = kibotosAll(t, c, "transfer", "list", "-l", "team=a"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "IMPORTED") {
		t.Errorf("transfer list: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = kibotosAll(t, c, "transfer", "get", id); code != 0 || !strings.Contains(out, "100%") {
		t.Errorf("transfer get: exit %d\n%s%s", code, out, errOut)
	}

	dst := filepath.Join(dir, "copy.kbta")
	if code, _, errOut = kibotosAll(t, c, "transfer", "download", id, "--file", dst); code != 0 {
		t.Fatalf("transfer download: exit %d\n%s", code, errOut)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, a) {
		t.Fatalf("downloaded %d bytes that differ from the %d imported", len(got), len(a))
	}
	// A partial file is continued from where it stopped.
	if err := os.Truncate(dst, int64(len(a)/3)); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut = kibotosAll(t, c, "transfer", "download", id, "--file", dst); code != 0 {
		t.Fatalf("resumed download: exit %d\n%s", code, errOut)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, a) {
		t.Fatal("the resumed download differs from the archive")
	}
	// A file that is not a prefix of the archive is refused at the end.
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("not the archive"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut = kibotosAll(t, c, "transfer", "download", id, "--file", other); code == 0 || !strings.Contains(errOut, "does not match") {
		t.Errorf("download over another file: exit %d, %s", code, errOut)
	}

	if code, out, errOut = kibotosAll(t, c, "transfer", "delete", id); code != 0 || !strings.Contains(out, "DELETED") {
		t.Errorf("transfer delete: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut = kibotosAll(t, c, "transfer", "download", id, "--file", filepath.Join(dir, "gone")); code == 0 || !strings.Contains(errOut, "failed_precondition") {
		t.Errorf("download of a deleted Transfer: exit %d, %s", code, errOut)
	}
	// A corrupt archive is refused, naming why.
	bad := bytes.Clone(a)
	bad[len(bad)/2] ^= 1
	if err := os.WriteFile(src, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut = kibotosAll(t, c, "transfer", "import", src); code == 0 || !strings.Contains(errOut, "invalid_argument") || !strings.Contains(errOut, "digest") {
		t.Errorf("import of a corrupt archive: exit %d, %s", code, errOut)
	}
}
