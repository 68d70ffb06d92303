package fleet_test

import (
	"cmp"
	"errors"
	"log/slog"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// storeFleet is the fleet on a real database of backend b, without
// sessions: nodes are records the test writes.
func storeFleet(t *testing.T, b storetest.Backend) (*fleet.Fleet, *store.Store) {
	t.Helper()
	st := storetest.Open(t, b.DSN(t))
	runner := command.NewRunner(st, "test", slog.Default())
	return fleet.New(st, runner, slog.Default(), fleet.DefaultConfig, fleet.Deps{}), st
}

// probePlacement is the node a placement of nothing in pool would take now
// ("" when none would); the probe's Allocation is released at once.
func probePlacement(t *testing.T, f *fleet.Fleet, st *store.Store, pool string) string {
	t.Helper()
	var id string
	mustTx(t, st, func(tx *store.Tx) error {
		placed, _, err := f.Place(tx, fleet.Placement{WorkspaceID: "probe", InstanceID: "probe.1", Pools: []string{pool}})
		if placed == nil || err != nil {
			return err
		}
		id = placed.NodeID
		return tx.ReleaseAllocation("probe", "")
	})
	return id
}

func mustTx(t *testing.T, st *store.Store, fn func(tx *store.Tx) error) {
	t.Helper()
	if err := st.Tx(ctx, fn); err != nil {
		t.Fatal(err)
	}
}

func cmd(id string) *ctrlv1.CommandMetadata { return &ctrlv1.CommandMetadata{CommandId: id} }

func statusOf(t *testing.T, f *fleet.Fleet, id string) operatorv1.NodeRegistrationStatus {
	t.Helper()
	res, err := f.GetNodeRegistration(ctx, &operatorv1.GetNodeRegistrationRequest{NodeId: id})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetRegistration().GetStatus()
}

// A drain takes a node out of placement at once; it reads DRAINING while
// an execution is still charged to it and DRAINED once none is; cancelling
// it makes the node a candidate again.
func TestDrainedAndDrainingNodesReceiveNoPlacement(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f, st := storeFleet(t, b)
			storetest.PutLiveNode(t, st, "node-a", "pool-a")
			placed := func() string { return probePlacement(t, f, st, "pool-a") }
			if got := placed(); got != "node-a" {
				t.Fatalf("placement before the drain: %q", got)
			}
			// An execution runs there when the drain begins.
			mustTx(t, st, func(tx *store.Tx) error {
				if _, refusal, err := f.Place(tx, fleet.Placement{WorkspaceID: "ws-a", InstanceID: "ws-a.1", Pools: []string{"pool-a"}}); refusal != nil || err != nil {
					return cmp.Or(err, errors.New(refusal.Message))
				}
				return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: "ws-a", InstanceId: "ws-a.1", NodeId: "node-a", LayerPool: "pool-a"})
			})
			res, err := f.DrainNode(ctx, &operatorv1.DrainNodeRequest{Command: cmd("drain-1"), NodeId: "node-a"})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.GetRegistration().GetStatus(); got != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_DRAINING {
				t.Errorf("status with an execution running: %v, want DRAINING", got)
			}
			if got := res.GetRegistration().GetStoragePools()[0].GetHeldObjectCount(); got != 1 {
				t.Errorf("held_object_count of pool-a with the execution's layer there: %d, want 1", got)
			}
			if got := placed(); got != "" {
				t.Errorf("a DRAINING node was placed on: %q", got)
			}
			var pool string
			mustTx(t, st, func(tx *store.Tx) (err error) { pool, err = f.NodeForPool(tx, "pool-a"); return })
			if pool != "node-a" {
				t.Errorf("pool work with only a draining node reaching the pool went to %q, want node-a", pool)
			}
			storetest.PutLiveNode(t, st, "node-b", "pool-a")
			mustTx(t, st, func(tx *store.Tx) (err error) { pool, err = f.NodeForPool(tx, "pool-a"); return })
			if pool != "node-b" {
				t.Errorf("pool work went to %q, want node-b, which is not draining", pool)
			}

			mustTx(t, st, func(tx *store.Tx) error {
				if err := tx.ReleaseAllocation("ws-a", "ws-a.1"); err != nil {
					return err
				}
				return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: "ws-a", LayerPool: "pool-a"})
			})
			if got := statusOf(t, f, "node-a"); got != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_DRAINED {
				t.Errorf("status once nothing runs: %v, want DRAINED", got)
			}
			if got := placed(); got != "node-b" {
				t.Errorf("placement with node-a DRAINED: %q, want node-b", got)
			}
			if _, err := f.CancelNodeDrain(ctx, &operatorv1.CancelNodeDrainRequest{Command: cmd("undrain-1"), NodeId: "node-a"}); err != nil {
				t.Fatal(err)
			}
			if got := statusOf(t, f, "node-a"); got != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY {
				t.Errorf("status after CancelNodeDrain: %v, want READY", got)
			}
			if got := placed(); got != "node-a" {
				t.Errorf("placement after CancelNodeDrain: %q, want node-a", got)
			}
		})
	}
}

// Draining and cancelling are commands: a replay answers the recorded
// result, a drain of a draining node changes nothing, and bad input or a
// stale version changes nothing.
func TestDrainCommandsReplayAndRefuse(t *testing.T) {
	f, st := storeFleet(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	storetest.PutLiveNode(t, st, "node-a", "pool-a")
	first, err := f.DrainNode(ctx, &operatorv1.DrainNodeRequest{Command: cmd("drain-1"), NodeId: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	version := first.GetRegistration().GetRegistrationVersion()
	if got := first.GetRegistration().GetStatus(); got != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_DRAINED {
		t.Errorf("status of a drained node that runs nothing: %v", got)
	}
	if version != 1 {
		t.Errorf("registration_version after the drain: %d, want 1", version)
	}
	again, err := f.DrainNode(ctx, &operatorv1.DrainNodeRequest{Command: cmd("drain-1"), NodeId: "node-a"})
	if err != nil || !proto.Equal(again, first) {
		t.Errorf("replay: %v %v, want %v", again, err, first)
	}
	other, err := f.DrainNode(ctx, &operatorv1.DrainNodeRequest{Command: cmd("drain-2"), NodeId: "node-a"})
	if err != nil || other.GetRegistration().GetRegistrationVersion() != version {
		t.Errorf("draining a DRAINED node: %v %v, want it unchanged", other, err)
	}
	stale := uint64(0)
	for _, tc := range []struct {
		name  string
		req   *operatorv1.CancelNodeDrainRequest
		code  connect.Code
		field string
	}{
		{"no command", &operatorv1.CancelNodeDrainRequest{NodeId: "node-a"}, connect.CodeInvalidArgument, "command.command_id"},
		{"no node", &operatorv1.CancelNodeDrainRequest{Command: cmd("c-1")}, connect.CodeInvalidArgument, "node_id"},
		{"unknown node", &operatorv1.CancelNodeDrainRequest{Command: cmd("c-2"), NodeId: "node-z"}, connect.CodeNotFound, ""},
		{"stale version", &operatorv1.CancelNodeDrainRequest{Command: cmd("c-3"), NodeId: "node-a", ExpectedRegistrationVersion: &stale}, connect.CodeFailedPrecondition, ""},
		{"same id, other input", &operatorv1.CancelNodeDrainRequest{Command: cmd("drain-1"), NodeId: "node-a"}, connect.CodeAlreadyExists, ""},
	} {
		_, err := f.CancelNodeDrain(ctx, tc.req)
		if connect.CodeOf(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
		if tc.field != "" && apierr.FieldOf(err) != tc.field {
			t.Errorf("%s: field %q, want %q", tc.name, apierr.FieldOf(err), tc.field)
		}
	}
	if got := statusOf(t, f, "node-a"); got != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_DRAINED {
		t.Errorf("after refused cancels the node reads %v, want DRAINED still", got)
	}
	current := version
	res, err := f.CancelNodeDrain(ctx, &operatorv1.CancelNodeDrainRequest{Command: cmd("c-4"), NodeId: "node-a", ExpectedRegistrationVersion: &current})
	if err != nil || res.GetRegistration().GetStatus() != operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY || res.GetRegistration().GetRegistrationVersion() != version+1 {
		t.Errorf("cancel at the current version: %v %v", res, err)
	}
	res, err = f.CancelNodeDrain(ctx, &operatorv1.CancelNodeDrainRequest{Command: cmd("c-5"), NodeId: "node-a"})
	if err != nil || res.GetRegistration().GetRegistrationVersion() != version+1 {
		t.Errorf("cancelling on a node that is not draining: %v %v, want it unchanged", res, err)
	}
}
