package pool_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

var ctx = context.Background()

const (
	mib = 1 << 20
	gib = 1 << 30
)

func cmd(id string) *ctrlv1.CommandMetadata { return &ctrlv1.CommandMetadata{CommandId: id} }

// env is a real ctrl on one database kind, with real node agents.
type env struct {
	t *testing.T
	c *testenv.Cluster
}

func newEnv(t *testing.T, b storetest.Backend, opts ...testenv.Option) *env {
	dsn := b.DSN(t)
	opts = append([]testenv.Option{testenv.FastFleet(), func(c *ctrl.Config) { c.Database = dsn }}, opts...)
	return &env{t: t, c: testenv.New(t, opts...)}
}

// forEachBackend runs fn on SQLite and on PostgreSQL.
func forEachBackend(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, newEnv(t, b)) })
	}
}

// startNode runs a node agent declaring pools, each NAME=DIR; the first is
// its default. No capacity is set.
func (e *env) startNode(id string, pools ...node.Pool) *testenv.Node {
	if len(pools) > 0 {
		pools[0].Default = true
	}
	return e.c.StartNodeWithPools(e.t, id, "", pools...)
}

func (e *env) pool(name string) *operatorv1.StoragePool {
	e.t.Helper()
	res, err := e.c.Nodes.GetStoragePool(ctx, connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: name}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.GetPool()
}

func (e *env) setCapacity(commandID, name string, version, capacity uint64) (*operatorv1.StoragePool, error) {
	res, err := e.c.Nodes.SetStoragePoolCapacity(ctx, connect.NewRequest(&operatorv1.SetStoragePoolCapacityRequest{
		Command: cmd(commandID), StoragePool: name, ExpectedVersion: version, CapacityBytes: capacity,
	}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetPool(), nil
}

func (e *env) declareLost(commandID, name string) (*operatorv1.DeclareStoragePoolLostResponse, error) {
	res, err := e.c.Nodes.DeclareStoragePoolLost(ctx, connect.NewRequest(&operatorv1.DeclareStoragePoolLostRequest{Command: cmd(commandID), StoragePool: name}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func (e *env) createVolume(commandID, pool string, capacity uint64) (*ctrlv1.Volume, error) {
	res, err := e.c.Volumes.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{
		Command: cmd(commandID), Spec: &ctrlv1.VolumeSpec{StoragePool: pool, CapacityBytes: capacity},
	}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetVolume(), nil
}

func (e *env) volume(id string) *ctrlv1.Volume {
	e.t.Helper()
	res, err := e.c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: id}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.GetVolume()
}

func (e *env) waitVolume(id string, want ctrlv1.VolumeState) *ctrlv1.Volume {
	e.t.Helper()
	var v *ctrlv1.Volume
	testenv.WaitFor(e.t, "volume "+id+" "+want.String(), func() bool {
		v = e.volume(id)
		return v.GetState() == want
	})
	return v
}

// availableVolume creates a 32 MiB Volume in pool and waits until it is
// AVAILABLE; it returns its id.
func (e *env) availableVolume(commandID, pool string) string {
	e.t.Helper()
	return e.availableVolumeOf(commandID, pool, 32*mib)
}

// availableVolumeOf is availableVolume with another capacity.
func (e *env) availableVolumeOf(commandID, pool string, capacity uint64) string {
	e.t.Helper()
	v, err := e.createVolume(commandID, pool, capacity)
	if err != nil {
		e.t.Fatal(err)
	}
	e.waitVolume(v.GetVolumeId(), ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE)
	return v.GetVolumeId()
}

// nodeReachingTwoPools starts node-a declaring pool-a (its default, in
// dirA) and pool-b (in dirB), and gives both a capacity: the two ends of
// a move on one node.
func (e *env) nodeReachingTwoPools() (n *testenv.Node, dirA, dirB string) {
	e.t.Helper()
	dirA, dirB = e.t.TempDir(), e.t.TempDir()
	n = e.startNode("node-a", node.Pool{Name: "pool-a", Dir: dirA}, node.Pool{Name: "pool-b", Dir: dirB})
	e.capacities("pool-a", "pool-b")
	return n, dirA, dirB
}

// isolate stops a node agent, waits until ctrl sees its session gone, and
// declares it isolated.
func (e *env) isolate(n *testenv.Node) {
	e.t.Helper()
	n.Stop(e.t)
	reg := e.c.WaitStatus(e.t, n.ID, operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
	if _, err := e.c.Nodes.IsolateNode(ctx, connect.NewRequest(&operatorv1.IsolateNodeRequest{
		Command: cmd("isolate-" + n.ID), NodeId: n.ID, Incarnation: reg.GetIncarnation(),
	})); err != nil {
		e.t.Fatal(err)
	}
}

func nodeIDs(as []*operatorv1.StoragePoolAttachment) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.GetNodeId())
	}
	return out
}
