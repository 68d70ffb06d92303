// Package benchnode is what the benchmarks of real VMs share: one node
// agent in the benchmark's process, as `kibotos dev` runs it (the real QEMU
// provider, the user-mode network, one default storage pool), enrolled with
// a ctrl of the same process, READY and its pool given a capacity before
// Start returns.
package benchnode

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/node/netslot/usernet"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
)

// readyWithin bounds the wait for the node's registration to be READY: an
// enrollment and a hello on loopback take well under a second.
const readyWithin = time.Minute

// Config is the node to start.
type Config struct {
	NodeID   string
	StateDir string // the node agent's state (executions, records)
	PoolDir  string // the default pool's directory, made if missing
	Logger   *slog.Logger
	HTTP     *http.Client // for the operator calls
	Accel    qemu.Accel   // empty: the node probes, as `kibotos node` does by default
}

// Node is a running node agent.
type Node struct {
	stop context.CancelFunc
	errc chan error
}

// Start creates an enrollment grant for cfg.NodeID through srv's operator
// API, runs the node agent with it, waits until its registration is READY
// and sets its pool's capacity to 1 PiB (a pool takes no new Volumes or
// writable layers until it has one). On failure the agent is stopped.
func Start(ctx context.Context, srv *ctrl.Server, cfg Config) (*Node, error) {
	op := connect.WithInterceptors(auth.Bearer(srv.Client.OperatorToken))
	grant, err := operatorv1connect.NewEnrollmentServiceClient(cfg.HTTP, srv.Client.OperatorEndpoint, op).CreateEnrollmentGrant(ctx,
		connect.NewRequest(&operatorv1.CreateEnrollmentGrantRequest{
			Command: &ctrlv1.CommandMetadata{CommandId: "bench-grant"}, NodeId: cfg.NodeID, Ttl: durationpb.New(time.Hour),
		}))
	if err != nil {
		return nil, fmt.Errorf("enrollment grant: %w", err)
	}
	if err := os.MkdirAll(cfg.PoolDir, 0o700); err != nil {
		return nil, err
	}
	nodeCtx, stop := context.WithCancel(ctx)
	n := &Node{stop: stop, errc: make(chan error, 1)}
	go func() {
		n.errc <- node.Run(nodeCtx, node.Config{
			Endpoint: srv.NodeEndpoint, NodeID: cfg.NodeID, StateDir: cfg.StateDir, EnrollmentGrant: grant.Msg.GetSecret(),
			Pools:    []node.Pool{{Name: "default", Dir: cfg.PoolDir, Default: true}},
			Provider: qemu.New(cfg.Logger, qemu.WithAccel(cfg.Accel)), Network: usernet.New(),
			Logger: cfg.Logger,
		})
	}()
	nodes := operatorv1connect.NewNodeRegistrationServiceClient(cfg.HTTP, srv.Client.OperatorEndpoint, op)
	if err := n.waitReady(ctx, nodes, cfg.NodeID); err != nil {
		n.stop()
		return nil, err
	}
	if err := setCapacity(ctx, nodes); err != nil {
		_ = n.Close()
		return nil, err
	}
	return n, nil
}

// Close stops the node agent and returns what it ended with.
func (n *Node) Close() error {
	n.stop()
	if err := <-n.errc; err != nil {
		return fmt.Errorf("node agent: %w", err)
	}
	return nil
}

func (n *Node) waitReady(ctx context.Context, nodes operatorv1connect.NodeRegistrationServiceClient, id string) error {
	deadline := time.Now().Add(readyWithin)
	for {
		res, err := nodes.GetNodeRegistration(ctx, connect.NewRequest(&operatorv1.GetNodeRegistrationRequest{NodeId: id}))
		if err == nil && res.Msg.GetRegistration().GetStatus() == operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not READY after %s (last: %v)", id, readyWithin, err)
		}
		select {
		case err := <-n.errc:
			return fmt.Errorf("the node agent stopped before it was ready: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func setCapacity(ctx context.Context, nodes operatorv1connect.NodeRegistrationServiceClient) error {
	pool, err := nodes.GetStoragePool(ctx, connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: "default"}))
	if err != nil {
		return err
	}
	if _, err := nodes.SetStoragePoolCapacity(ctx, connect.NewRequest(&operatorv1.SetStoragePoolCapacityRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "bench-capacity"}, StoragePool: "default", ExpectedVersion: pool.Msg.GetPool().GetVersion(), CapacityBytes: 1 << 50,
	})); err != nil {
		return fmt.Errorf("capacity of pool default: %w", err)
	}
	return nil
}
