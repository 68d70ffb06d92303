package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/blockfile"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// WorkspaceArchive is a transfer archive of a Workspace from another
// deployment ("ws-elsewhere"): the busybox template's revision 1, 512 MiB
// of memory, and a 256 MiB writable layer (the part "layer", as an export
// names it), an ext4 filesystem holding a file of usedMiB MiB of random
// bytes, so that a node imports it as it would an exported one.
// completeness is the manifest's ("" leaves it out); image is the digest of
// the template image the layer was made over ("": one no deployment has;
// a restore continues the layer only over the same image).
func WorkspaceArchive(t testing.TB, usedMiB int64, completeness, image string) []byte {
	t.Helper()
	if image == "" {
		image = "sha256:" + strings.Repeat("ab", 32)
	}
	f := ext4File(t, 256, usedMiB)
	spec, err := protojson.Marshal(&ctrlv1.WorkspaceSpec{
		Template:  &ctrlv1.TemplateRef{Template: "busybox", Revision: "1"},
		Resources: &ctrlv1.ResourceRequest{MemoryBytes: 512 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, err = archive.Write(context.Background(), &buf, archive.Manifest{
		Source:       archive.Source{Kind: archive.SourceWorkspace, ID: "ws-elsewhere", Spec: spec},
		Template:     &archive.Revision{Name: "busybox", Revision: "1", Digest: image},
		Completeness: completeness,
		CreatedAt:    time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
	}, []archive.Input{{Name: "layer", Kind: archive.KindBlock, File: f}})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// VolumeArchive is a transfer archive of a Volume of sizeMiB MiB from
// another deployment: its block file, an ext4 filesystem holding a file of
// usedMiB MiB of random bytes.
func VolumeArchive(t testing.TB, sizeMiB, usedMiB int64) []byte {
	t.Helper()
	f := ext4File(t, sizeMiB, usedMiB)
	var buf bytes.Buffer
	_, err := archive.Write(context.Background(), &buf, archive.Manifest{
		Source:       archive.Source{Kind: archive.SourceVolume, ID: "vol-elsewhere", Spec: []byte(fmt.Sprintf(`{"spec":{"capacityBytes":"%d"}}`, sizeMiB<<20))},
		Completeness: "complete",
		CreatedAt:    time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
	}, []archive.Input{{Name: "volume", Kind: archive.KindBlock, File: f}})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ext4File is an open block file of sizeMiB MiB holding an ext4
// filesystem with one file of usedMiB MiB of random bytes, as a node's
// Volume or writable layer does; closed when t ends.
func ext4File(t testing.TB, sizeMiB, usedMiB int64) *os.File {
	t.Helper()
	content := t.TempDir()
	data := make([]byte, usedMiB<<20)
	_, _ = rand.Read(data)
	if err := os.WriteFile(filepath.Join(content, "data"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	tools, err := blockfile.FindTools()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "block")
	if out, err := exec.Command(tools.Mkfs, "-q", "-F", "-b", "4096", "-d", content, path, fmt.Sprintf("%dM", sizeMiB)).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Import uploads archive a through the Transfer API as command commandID
// and returns the IMPORTED Transfer.
func (c *Cluster) Import(t testing.TB, commandID string, a []byte) *ctrlv1.Transfer {
	t.Helper()
	sum := sha256.Sum256(a)
	up := c.Transfers.ImportTransfer(context.Background())
	msgs := []*ctrlv1.ImportTransferRequest{{Part: &ctrlv1.ImportTransferRequest_Header{Header: &ctrlv1.ImportTransferHeader{
		Command: &ctrlv1.CommandMetadata{CommandId: commandID}, SizeBytes: uint64(len(a)), Digest: "sha256:" + hex.EncodeToString(sum[:]),
	}}}}
	for off := 0; off < len(a); off += 1 << 20 {
		msgs = append(msgs, &ctrlv1.ImportTransferRequest{Part: &ctrlv1.ImportTransferRequest_Data{Data: a[off:min(off+1<<20, len(a))]}})
	}
	for _, m := range msgs {
		if err := up.Send(m); err != nil {
			break // CloseAndReceive says why
		}
	}
	res, err := up.CloseAndReceive()
	if err != nil {
		t.Fatalf("ImportTransfer %s: %v", commandID, err)
	}
	if got := res.Msg.GetTransfer().GetState(); got != ctrlv1.TransferState_TRANSFER_STATE_IMPORTED {
		t.Fatalf("ImportTransfer %s: %v, want IMPORTED", commandID, got)
	}
	return res.Msg.GetTransfer()
}
