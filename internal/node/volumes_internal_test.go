package node

import (
	"context"
	"os"
	"testing"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/blockfile"
)

// The holder's judgment of a Volume, on real block files made with
// e2fsprogs: HEALTHY with its filesystem's size; DAMAGED, saying why, when
// the file is missing, holds no filesystem, or lives in a pool the node
// does not declare.
func TestJudgeVolumes(t *testing.T) {
	blocks, err := blockfile.New()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a := &agent{pools: map[string]Pool{"p": {Name: "p", Dir: dir}}}
	ref := func(pool, id string) *nodev1.BlockFileRef {
		return &nodev1.BlockFileRef{StoragePool: pool, Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME, ObjectId: id}
	}
	for _, id := range []string{"vol-good", "vol-bad"} {
		if _, err := blocks.Ensure(context.Background(), blockfile.Ref{PoolDir: dir, Kind: blockfile.Volume, ObjectID: id}, 64<<20); err != nil {
			t.Fatal(err)
		}
	}
	bad, err := blockfile.Ref{PoolDir: dir, Kind: blockfile.Volume, ObjectID: "vol-bad"}.Path()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(bad, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0, 0}, 1024+0x38); err != nil { // the ext4 magic
		t.Fatal(err)
	}
	f.Close()

	reports := []*nodev1.ExecutionReport{
		{InstanceId: "no-volume"},
		{InstanceId: "good", Volume: &nodev1.VolumeReport{Ref: ref("p", "vol-good")}},
		{InstanceId: "bad", Volume: &nodev1.VolumeReport{Ref: ref("p", "vol-bad")}},
		{InstanceId: "missing", Volume: &nodev1.VolumeReport{Ref: ref("p", "vol-gone")}},
		{InstanceId: "elsewhere", Volume: &nodev1.VolumeReport{Ref: ref("q", "vol-good")}},
	}
	a.judgeVolumes(reports)
	if v := reports[0].GetVolume(); v != nil {
		t.Errorf("an execution without a Volume got a report: %v", v)
	}
	if v := reports[1].GetVolume(); v.GetDamaged() || v.GetCapacityBytes() != 64<<20 || v.GetMessage() != "" {
		t.Errorf("a sound Volume: %v, want HEALTHY with 64 MiB", v)
	}
	for _, r := range reports[2:] {
		if v := r.GetVolume(); !v.GetDamaged() || v.GetMessage() == "" || v.GetCapacityBytes() != 0 {
			t.Errorf("%s: %v, want DAMAGED with why and no capacity", r.GetInstanceId(), v)
		}
	}
}
