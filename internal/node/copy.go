package node

import (
	"context"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
)

// copyReportInterval is how often a copy reports its progress.
const copyReportInterval = time.Second

// copyTarget is the block file a CopyBlockFile makes: the source's kind
// and object in the target pool.
func copyTarget(op *nodev1.CopyBlockFile) *nodev1.BlockFileRef {
	t := proto.CloneOf(op.GetSource())
	if t == nil {
		t = &nodev1.BlockFileRef{}
	}
	t.StoragePool = op.GetTargetStoragePool()
	return t
}

// copyBlockFile copies a block file between two pools this node declares,
// reporting its progress about once a second (and when it ends).
func (a *agent) copyBlockFile(ctx context.Context, opID string, op *nodev1.CopyBlockFile) *nodev1.CommandResult {
	src, res := a.blockFileRef(op.GetSource())
	if res != nil {
		return res
	}
	dst, res := a.blockFileRef(copyTarget(op))
	if res != nil {
		return res
	}
	var mu sync.Mutex
	var last time.Time
	progress := func(copied, total uint64) {
		mu.Lock()
		defer mu.Unlock()
		if copied < total && time.Since(last) < copyReportInterval {
			return
		}
		last = time.Now()
		a.sendCopyProgress(&nodev1.CopyProgress{OperationId: opID, CopiedBytes: copied, TotalBytes: total})
	}
	c, err := a.blocks.Copy(ctx, src, dst, progress)
	if err != nil {
		res := blockFileResult(c.Status, err)
		res.Result = nil // a failed copy has no target worth describing
		return res
	}
	out, err := anypb.New(&nodev1.BlockFileCopied{
		Target: &nodev1.BlockFileStatus{
			Exists:         c.Exists,
			CapacityBytes:  c.CapacityBytes,
			AllocatedBytes: c.AllocatedBytes,
		},
		CopiedBytes: c.CopiedBytes,
		Digest:      c.Digest,
	})
	if err != nil {
		return failure("", connect.CodeInternal, err.Error())
	}
	return &nodev1.CommandResult{Result: out}
}
