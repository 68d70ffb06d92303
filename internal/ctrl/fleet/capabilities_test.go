package fleet_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
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
