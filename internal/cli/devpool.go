package cli

import (
	"context"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/clientconfig"
)

// devPoolFloor is the least capacity kibotos dev gives its pool.
const devPoolFloor = 1 << 40

// ensureDevPoolCapacity gives dev's pool a capacity at its first start, so
// that `kibotos dev` works with no configuration: a pool takes no new
// objects until it has one. The capacity is the size of the filesystem
// under the pool as the node reports it, but at least 1 TiB: block files
// are sparse and a dev machine's Workspaces rarely write their declared
// 4 GiB layers, so the filesystem's size alone would refuse a laptop's
// tenth Workspace. A capacity already set (by an earlier start or by the
// operator, `kibotos pool set-capacity`) is kept.
func ensureDevPoolCapacity(ctx context.Context, c clientconfig.Config, name string) error {
	client := operatorv1connect.NewNodeRegistrationServiceClient(http.DefaultClient, c.OperatorEndpoint, connect.WithInterceptors(bearer(c.OperatorToken)))
	got, err := client.GetStoragePool(ctx, connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: name}))
	if err != nil {
		return fmt.Errorf("storage pool %s: %w", name, err)
	}
	p := got.Msg.GetPool()
	if p.CapacityBytes != nil {
		return nil
	}
	capacity := uint64(devPoolFloor)
	for _, a := range p.GetAttachments() {
		capacity = max(capacity, a.GetFilesystemSizeBytes())
	}
	if _, err := client.SetStoragePoolCapacity(ctx, connect.NewRequest(&operatorv1.SetStoragePoolCapacityRequest{
		Command: newCommandMetadata(""), StoragePool: name, ExpectedVersion: p.GetVersion(), CapacityBytes: capacity,
	})); err != nil {
		return fmt.Errorf("capacity of storage pool %s: %w", name, err)
	}
	return nil
}
