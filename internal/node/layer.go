package node

import (
	"context"
	"log/slog"

	"github.com/kibotos/kibotos/internal/node/blockfile"
)

// growLayer grows an existing writable layer, block file and ext4
// filesystem, to the capacity a start asks for when it has less: a layer
// ResizeWorkspaceWritableLayer grew is grown at the next start, before the
// guest mounts it. One that already has that capacity, or more, is left
// as it is. It answers the layer's status after.
func growLayer(ctx context.Context, blocks *blockfile.Manager, ref blockfile.Ref, st blockfile.Status, capacity uint64, log *slog.Logger) (blockfile.Status, error) {
	if capacity <= st.CapacityBytes {
		return st, nil
	}
	grown, err := blocks.Ensure(ctx, ref, capacity)
	if err != nil {
		return st, err
	}
	log.InfoContext(ctx, "writable layer grown", "from_bytes", st.CapacityBytes, "capacity_bytes", grown.CapacityBytes)
	return grown, nil
}
