// Package replicas_test runs two ctrl replicas on one PostgreSQL database
// against a simulated fleet, and checks that concurrent placements through
// both never overbook a node or a storage pool (issue 15: "correctness
// stays in the database, the index only chooses"), and that a replica
// judges the sessions another holds by their records.
package replicas_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	ctrlfleet "github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/sim"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

const (
	nodes       = 3
	cpuMillis   = 1000
	memoryBytes = 1 << 30
	sharedPool  = "shared"
)

// replica is one ctrl and its clients.
type replica struct {
	srv        *ctrl.Server
	workspaces ctrlv1connect.WorkspaceServiceClient
	operator   operatorv1connect.NodeRegistrationServiceClient
}

// startReplica starts one ctrl on dsn with the fleet's timings fc (zero:
// the defaults).
func startReplica(t *testing.T, dsn string, fc ctrlfleet.Config) replica {
	t.Helper()
	srv, err := ctrl.Start(context.Background(), ctrl.Config{
		WorkspaceListen: "127.0.0.1:0", OperatorListen: "127.0.0.1:0", NodeListen: "127.0.0.1:0",
		StateDir: t.TempDir(), Database: dsn, Logger: slog.New(slog.DiscardHandler), Fleet: fc,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return replica{
		srv:        srv,
		workspaces: ctrlv1connect.NewWorkspaceServiceClient(http.DefaultClient, srv.Client.WorkspaceEndpoint, connect.WithInterceptors(auth.Bearer(srv.Client.Token))),
		operator:   operatorv1connect.NewNodeRegistrationServiceClient(http.DefaultClient, srv.Client.OperatorEndpoint, connect.WithInterceptors(auth.Bearer(srv.Client.OperatorToken))),
	}
}

// cluster is two replicas on one new database, and a simulated fleet of
// small nodes (holding their sessions with replica a) sharing one pool of
// poolBytes. It returns how many Workspaces of cpuMillis and memoryBytes
// the nodes have room for, from their schedulable resources.
func cluster(t *testing.T, poolBytes uint64) (a, b replica, fleet *sim.Fleet, room int) {
	t.Helper()
	a, b, simulated, _, room := clusterWithStop(t, poolBytes, ctrlfleet.Config{})
	return a, b, simulated, room
}

// clusterWithStop is cluster with the fleet's timings fc, and stop, which
// stops the simulated fleet (every node's session ends) and waits for it.
func clusterWithStop(t *testing.T, poolBytes uint64, fc ctrlfleet.Config) (a, b replica, simulated *sim.Fleet, stop func(), room int) {
	t.Helper()
	ctx := context.Background()
	dsn := storetest.PostgresDSN(t)
	a, b = startReplica(t, dsn, fc), startReplica(t, dsn, fc)
	if err := sim.RegisterCatalog(ctx, a.srv.Catalog(), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	grant, err := sim.CreateGrant(ctx, operatorv1connect.NewEnrollmentServiceClient(http.DefaultClient, a.srv.Client.OperatorEndpoint,
		connect.WithInterceptors(auth.Bearer(a.srv.Client.OperatorToken))), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	simCtx, cancel := context.WithCancel(ctx)
	simulated, err = sim.Start(simCtx, sim.Config{
		Endpoint: a.srv.NodeEndpoint, Grant: grant, Nodes: nodes, SharedPool: sharedPool, SharedPoolDefault: true,
		Resources: &nodev1.HostResources{CpuMillis: 4000, MemoryBytes: 8 << 30, DiskBytes: 1 << 40},
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stop = func() { cancel(); simulated.Wait() }
	t.Cleanup(stop)
	regs := waitFor(t, "every node READY", func() ([]*operatorv1.NodeRegistration, bool) {
		res, err := a.operator.ListNodeRegistrations(ctx, connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{
			Statuses: []operatorv1.NodeRegistrationStatus{operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY},
		}))
		return res.Msg.GetRegistrations(), err == nil && len(res.Msg.GetRegistrations()) == nodes
	})
	for _, n := range regs {
		s := n.GetSchedulable()
		room += int(min(uint64(s.GetCpuMillis())/cpuMillis, s.GetMemoryBytes()/memoryBytes))
	}
	if err := sim.EnsurePoolCapacity(ctx, a.operator, sharedPool, poolBytes); err != nil {
		t.Fatal(err)
	}
	return a, b, simulated, stop, room
}

// createThroughBoth admits n creates, alternately through a and b, 16 at a
// time, and returns the Workspace ids.
func createThroughBoth(t *testing.T, a, b replica, n int) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			via := a
			if i%2 == 1 {
				via = b
			}
			res, err := via.workspaces.CreateWorkspace(context.Background(), connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
				Command: &ctrlv1.CommandMetadata{CommandId: commandID(i)},
				Spec: &ctrlv1.WorkspaceCreateSpec{
					Resources: &ctrlv1.ResourceRequest{CpuMillis: cpuMillis, MemoryBytes: memoryBytes},
					Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE},
				},
			}))
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = res.Msg.GetWorkspace().GetWorkspaceId()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return ids
}

func commandID(i int) string { return fmt.Sprintf("overbook-%d", i) }

// outcomes waits until every create ended (AVAILABLE or FAILED) or waits
// for a node to take it, and counts each.
func outcomes(t *testing.T, r replica, ids []string) (available, failed, waiting int) {
	t.Helper()
	waitFor(t, "every create placed, refused or waiting for room", func() (struct{}, bool) {
		available, failed, waiting = 0, 0, 0
		for i, id := range ids {
			res, err := r.workspaces.GetWorkspace(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
			if err != nil {
				return struct{}{}, false
			}
			c, err := r.workspaces.GetWorkspaceCommand(context.Background(), connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{
				WorkspaceId: id, CommandId: commandID(i),
			}))
			if err != nil {
				return struct{}{}, false
			}
			switch {
			case res.Msg.GetWorkspace().GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE:
				available++
			case res.Msg.GetWorkspace().GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED:
				failed++
			case c.Msg.GetCommand().GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_WAITING:
				waiting++
			}
		}
		return struct{}{}, available+failed+waiting == len(ids)
	})
	return available, failed, waiting
}

// noNodeOverbooked checks each node's Allocations against its schedulable
// resources, and the executions the simulated nodes really run against
// what was placed.
func noNodeOverbooked(t *testing.T, r replica, fleet *sim.Fleet, available int) {
	t.Helper()
	res, err := r.operator.ListNodeRegistrations(context.Background(), connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, n := range res.Msg.GetRegistrations() {
		s, got := n.GetSchedulable(), n.GetAllocated()
		if got.GetCpuMillis() > s.GetCpuMillis() || got.GetMemoryBytes() > s.GetMemoryBytes() {
			t.Errorf("node %s overbooked: %d cpu_millis and %d bytes allocated of %d and %d schedulable",
				n.GetNodeId(), got.GetCpuMillis(), got.GetMemoryBytes(), s.GetCpuMillis(), s.GetMemoryBytes())
		}
		running += len(fleet.Running(n.GetNodeId()))
	}
	if running != available {
		t.Errorf("the nodes run %d executions; %d Workspaces are AVAILABLE", running, available)
	}
}

// Nodes are the limit: more creates than room, through both replicas at
// once. Exactly the room is placed, the rest wait for a node, and no node
// holds more than it can schedule.
func TestTwoReplicasNeverOverbookANode(t *testing.T) {
	a, b, fleet, room := cluster(t, 1<<40)
	ids := createThroughBoth(t, a, b, room+room/2)
	available, failed, waiting := outcomes(t, b, ids)
	if available != room || failed != 0 || waiting != len(ids)-room {
		t.Errorf("%d AVAILABLE, %d FAILED, %d waiting of %d creates; want %d, 0, %d", available, failed, waiting, len(ids), room, len(ids)-room)
	}
	noNodeOverbooked(t, a, fleet, available)
}

// The shared pool is the limit: room in it for fewer writable layers than
// the nodes have room for Workspaces. Exactly that many are placed, the
// others fail RESOURCE_EXHAUSTED, and the pool's reservations stay within
// its capacity.
func TestTwoReplicasNeverOverbookAPool(t *testing.T) {
	const layers = 5
	a, b, fleet, room := cluster(t, layers*workspace.DefaultLayerCapacity)
	if room <= layers {
		t.Fatalf("the nodes have room for %d Workspaces: the pool must be the limit", room)
	}
	ids := createThroughBoth(t, a, b, room)
	available, failed, waiting := outcomes(t, a, ids)
	if available != layers || failed != room-layers || waiting != 0 {
		t.Errorf("%d AVAILABLE, %d FAILED, %d waiting of %d creates; want %d, %d, 0", available, failed, waiting, len(ids), layers, room-layers)
	}
	pool, err := b.operator.GetStoragePool(context.Background(), connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: sharedPool}))
	if err != nil {
		t.Fatal(err)
	}
	if p := pool.Msg.GetPool(); p.GetReservedBytes() > p.GetCapacityBytes() {
		t.Errorf("pool %s reserves %d of its %d bytes", sharedPool, p.GetReservedBytes(), p.GetCapacityBytes())
	}
	noNodeOverbooked(t, a, fleet, available)
}

// waitFor polls check every 100 ms for up to two minutes.
func waitFor[T any](t *testing.T, what string, check func() (T, bool)) T {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, ok := check()
		if ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
