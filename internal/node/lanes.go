package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/blockfile"
)

// commandLanes apply commands for the whole agent run: a command still
// running when its session ends finishes and is recorded, and ctrl's
// resend after the reconnect is answered from that record.
//
// Commands on the same object (one block file, one execution's instance)
// run one at a time, in the order ctrl sent them, so two operations on it
// never overtake each other; commands on different objects run
// concurrently, so a slow boot does not hold up every other Workspace.
type commandLanes struct {
	a *agent

	mu    sync.Mutex
	queue []job
	wake  chan struct{}
	// lanes holds, per object, the jobs not finished yet; the first one
	// runs. Only run's goroutine starts lanes.
	lanes map[string][]job
}

type job struct {
	cmd   *nodev1.NodeCommand
	reply func(*nodev1.CommandResult)
}

func newCommandLanes(a *agent) *commandLanes {
	return &commandLanes{a: a, wake: make(chan struct{}, 1), lanes: map[string][]job{}}
}

// enqueue never blocks, so the session keeps answering clock probes while
// commands run. A forced StopExecution does not wait in its lane for a
// normal stop of the same execution to give up on the guest: it makes
// that stop force at once (vmSet.force), and then finds nothing running.
func (e *commandLanes) enqueue(cmd *nodev1.NodeCommand, reply func(*nodev1.CommandResult)) {
	if id, ok := forcedStop(cmd); ok {
		e.a.vms.force(id)
	}
	e.mu.Lock()
	e.queue = append(e.queue, job{cmd, reply})
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// run hands the queued commands to their objects' lanes until ctx ends,
// then waits for the commands running.
func (e *commandLanes) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		e.mu.Lock()
		var j job
		ok := len(e.queue) > 0
		if ok {
			j = e.queue[0]
			e.queue[0] = job{}
			e.queue = e.queue[1:]
			key := objectKey(j.cmd)
			busy := len(e.lanes[key]) > 0
			e.lanes[key] = append(e.lanes[key], j)
			if !busy {
				wg.Go(func() { e.lane(ctx, key) })
			}
		}
		e.mu.Unlock()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-e.wake:
			}
		}
	}
}

// lane runs the jobs of one object in order until there are none. Once
// ctx ended, the jobs left are dropped: ctrl sends them again.
func (e *commandLanes) lane(ctx context.Context, key string) {
	for {
		e.mu.Lock()
		j := e.lanes[key][0]
		e.mu.Unlock()
		if ctx.Err() == nil {
			if res := e.a.execute(ctx, j.cmd); res != nil {
				j.reply(res)
			}
		}
		e.mu.Lock()
		rest := e.lanes[key][1:]
		if len(rest) == 0 {
			delete(e.lanes, key)
			e.mu.Unlock()
			return
		}
		e.lanes[key] = rest
		e.mu.Unlock()
	}
}

// forcedStop reports whether cmd is a StopExecution with force, and of
// which instance.
func forcedStop(cmd *nodev1.NodeCommand) (string, bool) {
	if cmd.GetBody().MessageName() != stopExecutionName {
		return "", false
	}
	var op nodev1.StopExecution
	if cmd.GetBody().UnmarshalTo(&op) != nil || !op.GetForce() {
		return "", false
	}
	return op.GetInstanceId(), true
}

// objectKey names the object a command works on: commands with the same
// key run in order. A command the node cannot read has a key of its own
// (its operation): it fails anyway.
func objectKey(cmd *nodev1.NodeCommand) string {
	body := cmd.GetBody()
	switch body.MessageName() {
	case ensureBlockFileName:
		var op nodev1.EnsureBlockFile
		if body.UnmarshalTo(&op) == nil {
			return blockFileKey(op.GetRef())
		}
	case removeBlockFileName:
		var op nodev1.RemoveBlockFile
		if body.UnmarshalTo(&op) == nil {
			return blockFileKey(op.GetRef())
		}
	case copyBlockFileName:
		var op nodev1.CopyBlockFile
		if body.UnmarshalTo(&op) == nil {
			return blockFileKey(copyTarget(&op))
		}
	case exportBlockFileName:
		var op nodev1.ExportBlockFile
		if body.UnmarshalTo(&op) == nil {
			return blockFileKey(op.GetRef())
		}
	case importBlockFileName:
		var op nodev1.ImportBlockFile
		if body.UnmarshalTo(&op) == nil {
			return blockFileKey(op.GetRef())
		}
	case startExecutionName:
		var op nodev1.StartExecution
		if body.UnmarshalTo(&op) == nil {
			return "execution\x00" + op.GetInstanceId()
		}
	case stopExecutionName:
		var op nodev1.StopExecution
		if body.UnmarshalTo(&op) == nil {
			return "execution\x00" + op.GetInstanceId()
		}
	case applyNetworkPolicyName:
		var op nodev1.ApplyNetworkPolicy
		if body.UnmarshalTo(&op) == nil {
			return "execution\x00" + op.GetInstanceId()
		}
	}
	return "operation\x00" + cmd.GetOperationId()
}

func blockFileKey(ref *nodev1.BlockFileRef) string {
	return fmt.Sprintf("block file\x00%s\x00%d\x00%s", ref.GetStoragePool(), ref.GetKind(), ref.GetObjectId())
}

// execute answers one command: from the operations record when its
// operation was applied before, else by applying it and recording the
// result before it is sent. Only successful results are recorded: a failed
// operation left nothing half-done and is tried again when ctrl sends it
// again. It returns nil when the agent stopped during the operation.
func (a *agent) execute(ctx context.Context, cmd *nodev1.NodeCommand) *nodev1.CommandResult {
	ctx, span := a.startOperation(ctx, cmd)
	res := a.executeOnce(ctx, cmd)
	endOperation(span, res)
	return res
}

func (a *agent) executeOnce(ctx context.Context, cmd *nodev1.NodeCommand) *nodev1.CommandResult {
	opID := cmd.GetOperationId()
	if opID == "" {
		return failure("", connect.CodeInvalidArgument, "command without operation_id")
	}
	data, found, err := a.store.LookupOperation(opID)
	if err != nil {
		a.log.ErrorContext(ctx, "cannot read the operations record", "err", err)
		return failure(opID, connect.CodeInternal, "node cannot read its operations record: "+err.Error())
	}
	if found {
		var res nodev1.CommandResult
		if err := proto.Unmarshal(data, &res); err != nil {
			a.log.ErrorContext(ctx, "corrupt operations record", "err", err)
			return failure(opID, connect.CodeInternal, "node's record of the operation is corrupt: "+err.Error())
		}
		a.log.InfoContext(ctx, "operation already applied; answering from the record")
		return &res
	}

	start := time.Now()
	res := a.apply(ctx, cmd)
	if ctx.Err() != nil {
		a.log.InfoContext(ctx, "agent stopping; operation abandoned")
		return nil
	}
	a.metrics.applied(string(cmd.GetBody().MessageName().Name()), res.Code, time.Since(start))
	res.OperationId = opID
	if res.Code != 0 {
		a.log.WarnContext(ctx, "operation failed", "operation", cmd.GetBody().GetTypeUrl(), "code", connect.Code(res.Code), "message", res.Message)
		return res
	}
	data, err = proto.Marshal(res)
	if err == nil {
		err = a.store.RecordOperation(opID, data)
	}
	if err != nil {
		// Applied but not recorded: ctrl's resend applies it again, which
		// the block file operations tolerate.
		a.log.ErrorContext(ctx, "operation applied but not recorded", "err", err)
		return failure(opID, connect.CodeInternal, "operation applied but the node could not record it: "+err.Error())
	}
	a.log.InfoContext(ctx, "operation applied", "operation", cmd.GetBody().GetTypeUrl())
	return res
}

func failure(opID string, code connect.Code, msg string) *nodev1.CommandResult {
	return &nodev1.CommandResult{OperationId: opID, Code: uint32(code), Message: msg}
}

func nameOf(m proto.Message) protoreflect.FullName { return m.ProtoReflect().Descriptor().FullName() }

var (
	ensureBlockFileName    = nameOf((*nodev1.EnsureBlockFile)(nil))
	removeBlockFileName    = nameOf((*nodev1.RemoveBlockFile)(nil))
	copyBlockFileName      = nameOf((*nodev1.CopyBlockFile)(nil))
	exportBlockFileName    = nameOf((*nodev1.ExportBlockFile)(nil))
	importBlockFileName    = nameOf((*nodev1.ImportBlockFile)(nil))
	startExecutionName     = nameOf((*nodev1.StartExecution)(nil))
	stopExecutionName      = nameOf((*nodev1.StopExecution)(nil))
	applyNetworkPolicyName = nameOf((*nodev1.ApplyNetworkPolicy)(nil))
)

func (a *agent) apply(ctx context.Context, cmd *nodev1.NodeCommand) *nodev1.CommandResult {
	body := cmd.GetBody()
	if body == nil {
		return failure("", connect.CodeInvalidArgument, "command without body")
	}
	switch body.MessageName() {
	case ensureBlockFileName:
		var op nodev1.EnsureBlockFile
		if err := body.UnmarshalTo(&op); err != nil {
			return failure("", connect.CodeInvalidArgument, "EnsureBlockFile: "+err.Error())
		}
		ref, res := a.blockFileRef(op.GetRef())
		if res != nil {
			return res
		}
		st, err := a.blocks.Ensure(ctx, ref, op.GetCapacityBytes())
		return blockFileResult(st, err)
	case removeBlockFileName:
		var op nodev1.RemoveBlockFile
		if err := body.UnmarshalTo(&op); err != nil {
			return failure("", connect.CodeInvalidArgument, "RemoveBlockFile: "+err.Error())
		}
		ref, res := a.blockFileRef(op.GetRef())
		if res != nil {
			return res
		}
		st, err := a.blocks.Remove(ref)
		return blockFileResult(st, err)
	case copyBlockFileName:
		var op nodev1.CopyBlockFile
		if err := body.UnmarshalTo(&op); err != nil {
			return failure("", connect.CodeInvalidArgument, "CopyBlockFile: "+err.Error())
		}
		return a.copyBlockFile(ctx, cmd.GetOperationId(), &op)
	case exportBlockFileName:
		var op nodev1.ExportBlockFile
		if err := body.UnmarshalTo(&op); err != nil {
			return failure("", connect.CodeInvalidArgument, "ExportBlockFile: "+err.Error())
		}
		return a.exportBlockFile(ctx, cmd.GetOperationId(), &op)
	case importBlockFileName:
		var op nodev1.ImportBlockFile
		if err := body.UnmarshalTo(&op); err != nil {
			return failure("", connect.CodeInvalidArgument, "ImportBlockFile: "+err.Error())
		}
		return a.importBlockFile(ctx, cmd.GetOperationId(), &op)
	case startExecutionName:
		var op nodev1.StartExecution
		if err := body.UnmarshalTo(&op); err != nil {
			return failure("", connect.CodeInvalidArgument, "StartExecution: "+err.Error())
		}
		return a.vms.startExecution(ctx, &op)
	case stopExecutionName:
		var op nodev1.StopExecution
		if err := body.UnmarshalTo(&op); err != nil {
			return failure("", connect.CodeInvalidArgument, "StopExecution: "+err.Error())
		}
		return a.vms.stopExecution(ctx, &op)
	case applyNetworkPolicyName:
		var op nodev1.ApplyNetworkPolicy
		if err := body.UnmarshalTo(&op); err != nil {
			return failure("", connect.CodeInvalidArgument, "ApplyNetworkPolicy: "+err.Error())
		}
		return a.vms.applyNetworkPolicy(ctx, &op)
	}
	return failure("", connect.CodeUnimplemented, fmt.Sprintf("this node does not implement %q", body.GetTypeUrl()))
}

func (a *agent) blockFileRef(ref *nodev1.BlockFileRef) (blockfile.Ref, *nodev1.CommandResult) {
	r, err := a.resolveRef(ref)
	if err != nil {
		return r, failure("", connect.CodeOf(err), errorMessage(err))
	}
	return r, nil
}

// resolveRef is the block file ref names in this node's pools.
func (a *agent) resolveRef(ref *nodev1.BlockFileRef) (blockfile.Ref, error) {
	if a.blocks == nil {
		return blockfile.Ref{}, codedf(connect.CodeUnimplemented, "this node cannot make block files (e2fsprogs missing)")
	}
	if ref == nil {
		return blockfile.Ref{}, codedf(connect.CodeInvalidArgument, "no block file ref")
	}
	pool, ok := a.pools[ref.GetStoragePool()]
	if !ok {
		return blockfile.Ref{}, codedf(connect.CodeNotFound, "storage pool %q is not declared by this node", ref.GetStoragePool())
	}
	r := blockfile.Ref{PoolDir: pool.Dir, ObjectID: ref.GetObjectId()}
	switch ref.GetKind() {
	case nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME:
		r.Kind = blockfile.Volume
	case nodev1.BlockFileKind_BLOCK_FILE_KIND_WRITABLE_LAYER:
		r.Kind = blockfile.WritableLayer
	default:
		return blockfile.Ref{}, codedf(connect.CodeInvalidArgument, "block file kind %v", ref.GetKind())
	}
	if err := blockfile.ValidObjectID(r.ObjectID); err != nil {
		return blockfile.Ref{}, coded(connect.CodeInvalidArgument, err)
	}
	return r, nil
}

func blockFileResult(st blockfile.Status, err error) *nodev1.CommandResult {
	res := &nodev1.CommandResult{}
	if err == nil || st.Exists {
		status, aerr := anypb.New(&nodev1.BlockFileStatus{
			Exists:         st.Exists,
			CapacityBytes:  st.CapacityBytes,
			AllocatedBytes: st.AllocatedBytes,
		})
		if aerr != nil {
			return failure("", connect.CodeInternal, aerr.Error())
		}
		res.Result = status
	}
	if err != nil {
		res.Code = uint32(errorCode(err))
		res.Message = err.Error()
	}
	return res
}

func errorCode(err error) connect.Code {
	switch {
	case errors.Is(err, blockfile.ErrInvalid):
		return connect.CodeInvalidArgument
	case errors.Is(err, blockfile.ErrMissing):
		return connect.CodeNotFound
	case errors.Is(err, blockfile.ErrShrink):
		return connect.CodeFailedPrecondition
	case errors.Is(err, blockfile.ErrPoolUnavailable):
		// Transient from ctrl's point of view: the pool may come back.
		return connect.CodeUnavailable
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), noSpace(err):
		return connect.CodeResourceExhausted
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return connect.CodeCanceled
	}
	return connect.CodeInternal
}

// noSpace reports an e2fsprogs run that failed for lack of disk space.
func noSpace(err error) bool {
	var te *blockfile.ToolError
	return errors.As(err, &te) && (strings.Contains(te.Output, "No space left on device") || strings.Contains(te.Output, "Disk quota exceeded"))
}
