package node

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/kibotos/kibotos/internal/node/blockfile"
)

// growLayer grows a smaller layer, block file and filesystem, to the
// capacity a start asks for, and leaves one that has as much or more.
func TestGrowLayer(t *testing.T) {
	blocks, err := blockfile.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ref := blockfile.Ref{PoolDir: t.TempDir(), Kind: blockfile.WritableLayer, ObjectID: "ws-1"}
	st, err := blocks.Ensure(ctx, ref, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	path, err := ref.Path()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ask, want uint64 }{{32 << 20, 64 << 20}, {64 << 20, 64 << 20}, {128 << 20, 128 << 20}} {
		if st, err = growLayer(ctx, blocks, ref, st, tc.ask, log); err != nil {
			t.Fatal(err)
		}
		fs, err := blockfile.FilesystemBytes(path)
		if err != nil || st.CapacityBytes != tc.want || fs != tc.want {
			t.Errorf("asked %d: the layer has %d bytes, its filesystem %d (%v); want %d", tc.ask, st.CapacityBytes, fs, err, tc.want)
		}
	}
}
