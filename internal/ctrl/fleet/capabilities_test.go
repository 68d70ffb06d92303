package fleet_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

// capabilities.required is placement's: a known capability no node offers
// (the test nodes run QEMU, never the simulator) fails the create at
// PLACING as a placement no node fits does, naming the capability; an
// unknown one is never admitted.
func TestARequiredCapabilityNobodyOffersFailsPlacement(t *testing.T) {
	c := testenv.New(t, testenv.WithFleet(fleet.Config{
		ObservationInterval: 200 * time.Millisecond, ClockProbeInterval: 100 * time.Millisecond, ClockTolerance: time.Second,
		PlacementTimeout: 2 * time.Second,
	}))
	c.StartNode(t, "node-a", "", "")
	c.UnbootableCatalog(t)
	create := func(id string, required ...string) (*ctrlv1.Workspace, error) {
		res, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
			Command: cmd(id), Spec: &ctrlv1.WorkspaceCreateSpec{
				Resources:    &ctrlv1.ResourceRequest{CpuMillis: 100, MemoryBytes: 128 << 20},
				Capabilities: &ctrlv1.CapabilityRequirements{Required: required},
			},
		}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetWorkspace(), nil
	}
	_, err := create("create-nope", "provider.nope")
	wantCode(t, "an unknown capability", err, connect.CodeInvalidArgument, "spec.capabilities.required[0]")

	if _, err := create("create-sim", capability.Sim); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the create requiring "+capability.Sim+" to fail", func() bool {
		return commandOf(t, c, "create-sim").GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED
	})
	f := commandOf(t, c, "create-sim").GetFailure()
	if f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_PLACING || f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE ||
		!strings.Contains(f.GetMessage(), "node-a: does not offer required capability "+capability.Sim) {
		t.Errorf("failure %v, want PLACING, UNAVAILABLE, naming node-a and %s", f, capability.Sim)
	}
}

// platform_key binds the current default Launch of that key at creation;
// a key that does not exist is not_found, a malformed one invalid.
func TestCreateBindsTheRequestedPlatformKey(t *testing.T) {
	c := testenv.New(t, fastFleet())
	c.StartNode(t, "node-a", "", "")
	c.UnbootableCatalog(t) // registers PlatformKey "default"
	create := func(id, key string) (*ctrlv1.Workspace, error) {
		res, err := c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
			Command: cmd(id), Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{MemoryBytes: 128 << 20}, PlatformKey: key},
		}))
		if err != nil {
			return nil, err
		}
		return res.Msg.GetWorkspace(), nil
	}
	_, err := create("create-dots", "../x")
	wantCode(t, "platform_key ../x", err, connect.CodeInvalidArgument, "spec.platform_key")
	_, err = create("create-missing", "missing")
	wantCode(t, "a PlatformKey that does not exist", err, connect.CodeNotFound, "spec.platform_key")
	w, err := create("create-default", "default")
	if err != nil {
		t.Fatal(err)
	}
	if w.GetSpec().GetLaunchRef() == "" {
		t.Errorf("a create naming PlatformKey default is bound to no Launch: %v", w.GetSpec())
	}
}

// A refusal counts the nodes lacking a required capability like every
// other reason, in SQL past the named ones, and in placement's order:
// after block files, before pools and room.
func TestARefusalCountsNodesLackingARequiredCapability(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f, st := storeFleet(t, b)
			withKVM := func(n *operatorv1.NodeRegistration) {
				n.Observation.Capabilities = append(n.Observation.Capabilities, capability.AccelKVM)
			}
			var nodes []*operatorv1.NodeRegistration
			for i := range 10 {
				nodes = append(nodes, liveNode(fmt.Sprintf("n-%02d", i), nil))
			}
			nodes = append(nodes, liveNode("n-10", withKVM), liveNode("n-11", noBlocks))
			mustTx(t, st, func(tx *store.Tx) error {
				for _, n := range nodes {
					if err := tx.PutNode(n); err != nil {
						return err
					}
				}
				return nil
			})
			var refusal *fleet.Refusal
			mustTx(t, st, func(tx *store.Tx) error {
				placed, why, err := f.Place(tx, fleet.Placement{WorkspaceID: "ws-1", InstanceID: "ws-1.1", CPUMillis: 1000, MemoryBytes: 1 << 30,
					Pools: []string{"pool-a"}, Capabilities: []string{capability.AccelKVM}})
				if placed != nil {
					t.Fatalf("placed on %s", placed.NodeID)
				}
				refusal = why
				return err
			})
			named := ""
			for i := range 8 {
				named += fmt.Sprintf("n-%02d: does not offer required capability accel.kvm; ", i)
			}
			want := "no node can run it (1000 cpu_millis, 1024 MiB): " + named +
				"and 4 more: 1 handling no block files, 2 lacking a required capability, 1 without the room"
			// n-10 offers it and lacks only room: resource_exhausted.
			if refusal.Reason != ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED || refusal.Message != want {
				t.Errorf("refusal %v %q,\nwant RESOURCE_EXHAUSTED %q", refusal.Reason, refusal.Message, want)
			}
		})
	}
}
