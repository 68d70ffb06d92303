package sim

import (
	"fmt"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
)

// pool is a simulated storage pool: the block files it holds and their
// capacities, in memory. The shared pool is one object for every node, so
// a Volume made through one node is there for the others, as on shared
// storage.
type pool struct {
	mu    sync.Mutex
	files map[fileKey]uint64
}

type fileKey struct {
	kind     nodev1.BlockFileKind
	objectID string
}

func newPool() *pool { return &pool{files: map[fileKey]uint64{}} }

func (p *pool) get(ref *nodev1.BlockFileRef) (uint64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.files[fileKey{ref.GetKind(), ref.GetObjectId()}]
	return c, ok
}

// ensure makes the file exist with at least capacity; it never shrinks.
// created says it did not exist.
func (p *pool) ensure(ref *nodev1.BlockFileRef, capacity uint64) (have uint64, created bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := fileKey{ref.GetKind(), ref.GetObjectId()}
	old, ok := p.files[k]
	p.files[k] = max(old, capacity)
	return p.files[k], !ok
}

func (p *pool) remove(ref *nodev1.BlockFileRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.files, fileKey{ref.GetKind(), ref.GetObjectId()})
}

// execute answers one command at most once: a resend of an operation it
// answered (after a reconnect) gets the recorded answer, as from a real
// node's operations record. Only successes are recorded, as there.
func (n *simNode) execute(cmd *nodev1.NodeCommand) *nodev1.CommandResult {
	opID := cmd.GetOperationId()
	n.mu.Lock()
	done := n.applied[opID]
	n.mu.Unlock()
	if done != nil {
		return done
	}
	res := n.apply(cmd.GetBody())
	res.OperationId = opID
	if res.GetCode() == 0 {
		n.mu.Lock()
		n.applied[opID] = res
		n.mu.Unlock()
	}
	return res
}

// reportDelivery sends, for a StartExecution, the artifact progress
// Config.Delivery gives it, if any.
func (n *simNode) reportDelivery(s *stream, cmd *nodev1.NodeCommand) {
	start := &nodev1.StartExecution{}
	if n.f.cfg.Delivery == nil || cmd.GetBody().UnmarshalTo(start) != nil {
		return
	}
	if delivered, total := n.f.cfg.Delivery(n.id, start); total > 0 {
		_ = s.send(&nodev1.SessionRequest{Message: &nodev1.SessionRequest_ExecutionProgress{ExecutionProgress: &nodev1.ExecutionProgress{
			InstanceId: start.GetInstanceId(), DeliveredBytes: delivered, TotalBytes: total}}})
	}
}

func (n *simNode) apply(body *anypb.Any) *nodev1.CommandResult {
	msg, err := body.UnmarshalNew()
	if err != nil {
		return failure(connect.CodeInvalidArgument, "sim: unreadable command: "+err.Error())
	}
	if h := n.f.cfg.OnCommand; h != nil {
		h(n.id, msg)
	}
	if refuse := n.f.cfg.Refuse; refuse != nil {
		if err := refuse(n.id, msg); err != nil {
			return failure(connect.CodeUnavailable, err.Error())
		}
	}
	switch op := msg.(type) {
	case *nodev1.EnsureBlockFile:
		p, res := n.pool(op.GetRef())
		if res != nil {
			return res
		}
		have, _ := p.ensure(op.GetRef(), op.GetCapacityBytes())
		return success(&nodev1.BlockFileStatus{Exists: true, CapacityBytes: have})
	case *nodev1.ImportBlockFile:
		// A restore's part: the block file is made; nothing is fetched
		// (the simulation keeps no bytes).
		p, res := n.pool(op.GetRef())
		if res != nil {
			return res
		}
		have, _ := p.ensure(op.GetRef(), 0)
		return success(&nodev1.BlockFileStatus{Exists: true, CapacityBytes: have})
	case *nodev1.RemoveBlockFile:
		p, res := n.pool(op.GetRef())
		if res != nil {
			return res
		}
		p.remove(op.GetRef())
		return success(&nodev1.BlockFileStatus{})
	case *nodev1.StartExecution:
		return n.start(op)
	case *nodev1.StopExecution:
		return n.stop(op)
	}
	return failure(connect.CodeUnimplemented, fmt.Sprintf("the sim provider does not simulate %q", body.GetTypeUrl()))
}

// pool is the simulated pool ref names, when this node declares it.
func (n *simNode) pool(ref *nodev1.BlockFileRef) (*pool, *nodev1.CommandResult) {
	name := ref.GetStoragePool()
	if name != n.id && name != n.f.cfg.SharedPool {
		return nil, failure(connect.CodeNotFound, fmt.Sprintf("storage pool %q is not declared by this node", name))
	}
	return n.f.pools[name], nil
}

// start "boots" an execution: it makes the writable layer when missing,
// checks the Volume's block file as a real node does, and counts the
// execution as running.
func (n *simNode) start(op *nodev1.StartExecution) *nodev1.CommandResult {
	id := op.GetInstanceId()
	if id == "" {
		return failure(connect.CodeInvalidArgument, "StartExecution: no instance_id")
	}
	n.mu.Lock()
	_, running := n.running[id]
	n.mu.Unlock()
	layers, res := n.pool(op.GetLayer())
	if res != nil {
		return res
	}
	if running {
		have, _ := layers.get(op.GetLayer())
		return success(&nodev1.ExecutionStatus{InstanceId: id, Running: true, Accel: "sim", BootId: op.GetBootId(), LayerCapacityBytes: have, Report: n.runningReport(id)})
	}
	if v := op.GetVolume(); v != nil {
		volumes, res := n.pool(v)
		if res != nil {
			return res
		}
		if _, ok := volumes.get(v); !ok {
			return failure(connect.CodeFailedPrecondition, fmt.Sprintf("the Volume's block file %s does not exist in pool %s", v.GetObjectId(), v.GetStoragePool()))
		}
	}
	have, created := layers.ensure(op.GetLayer(), op.GetLayerCapacityBytes())
	n.mu.Lock()
	n.running[id] = op
	n.mu.Unlock()
	n.change()
	return success(&nodev1.ExecutionStatus{
		InstanceId: id, Running: true, LayerCreated: created, Accel: "sim", BootId: op.GetBootId(), LayerCapacityBytes: have,
		Report: n.runningReport(id),
	})
}

// stop ends an execution at once; the simulated guest always confirms it
// synced, so the stop is durable.
func (n *simNode) stop(op *nodev1.StopExecution) *nodev1.CommandResult {
	n.mu.Lock()
	_, running := n.running[op.GetInstanceId()]
	if running {
		delete(n.running, op.GetInstanceId())
		n.ended = append(n.ended, op.GetInstanceId())
	}
	n.mu.Unlock()
	if !running {
		return success(&nodev1.StopResult{Message: "not running"})
	}
	n.change()
	return success(&nodev1.StopResult{Durable: true, Message: "simulated stop"})
}

func success(m proto.Message) *nodev1.CommandResult {
	a, err := anypb.New(m)
	if err != nil {
		return failure(connect.CodeInternal, err.Error())
	}
	return &nodev1.CommandResult{Result: a}
}

func failure(code connect.Code, msg string) *nodev1.CommandResult {
	return &nodev1.CommandResult{Code: uint32(code), Message: msg}
}
