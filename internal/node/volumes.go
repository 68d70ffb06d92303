package node

import (
	"fmt"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/blockfile"
)

// judgeVolumes fills the Volume report of each running execution that has
// a Volume attached: this node holds it, so its observation is the
// Volume's. The judgment reads only the block file's superblock, from the
// host: the guest that has the filesystem mounted is not disturbed.
func (a *agent) judgeVolumes(reports []*nodev1.ExecutionReport) {
	for _, r := range reports {
		if v := r.GetVolume(); v != nil {
			capacity, why := a.judgeVolume(v.GetRef())
			v.CapacityBytes, v.Damaged, v.Message = capacity, why != "", why
		}
	}
}

// judgeVolume is the capacity of the filesystem in the Volume's block
// file, or why it cannot be opened as the Volume that was created: the
// file is gone, unreadable, or holds no ext2/3/4 filesystem.
func (a *agent) judgeVolume(ref *nodev1.BlockFileRef) (uint64, string) {
	pool, ok := a.pools[ref.GetStoragePool()]
	if !ok {
		return 0, fmt.Sprintf("storage pool %q is not declared by this node", ref.GetStoragePool())
	}
	path, err := blockfile.Ref{PoolDir: pool.Dir, Kind: blockfile.Volume, ObjectID: ref.GetObjectId()}.Path()
	if err != nil {
		return 0, err.Error()
	}
	st, err := blockfile.Stat(path)
	switch {
	case err != nil:
		return 0, "the block file cannot be read: " + err.Error()
	case !st.Exists:
		return 0, "the block file is missing"
	}
	capacity, err := blockfile.FilesystemBytes(path)
	if err != nil {
		return 0, err.Error()
	}
	return capacity, ""
}
