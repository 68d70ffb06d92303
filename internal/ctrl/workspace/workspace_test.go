package workspace_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

const mib = 1 << 20

var ctx = context.Background()

type env struct {
	store *store.Store
	fleet *fleet.Fleet
	ws    *workspace.Service
	vols  *volume.Service
}

// newEnv is the domain on a real database with one registered (not
// connected) node declaring a default pool, and a READY deployment default
// Template "busybox" (revision "1") a create resolves to.
func newEnv(t *testing.T, b storetest.Backend) *env {
	t.Helper()
	e := newBareEnv(t, b)
	storetest.PutReadyTemplate(t, e.store, "busybox", "1", true)
	return e
}

// newBareEnv is newEnv without any Template.
func newBareEnv(t *testing.T, b storetest.Backend) *env {
	t.Helper()
	st := storetest.Open(t, b.DSN(t))
	runner := command.NewRunner(st, "test", slog.Default())
	f := fleet.New(st, runner, slog.Default(), fleet.DefaultConfig, fleet.Deps{})
	storetest.PutNodeWithPool(t, st, "node-a", "pool-a")
	vols := volume.New(st, f, runner, volume.DefaultProfile)
	return &env{store: st, fleet: f, ws: workspace.New(st, f, vols, runner), vols: vols}
}

func sqlite(t *testing.T) *env {
	return newEnv(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
}

func forEachBackend(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, newEnv(t, b)) })
	}
}

func cmd(id string) *ctrlv1.CommandMetadata { return &ctrlv1.CommandMetadata{CommandId: id} }

func spec(memory uint64) *ctrlv1.WorkspaceCreateSpec {
	return &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{MemoryBytes: memory}}
}

func boolp(b bool) *bool { return &b }

func TestCreateValidation(t *testing.T) {
	e := sqlite(t)
	future := timestamppb.New(time.Now().Add(time.Hour))
	past := timestamppb.New(time.Now().Add(-time.Hour))
	with := func(fn func(s *ctrlv1.WorkspaceCreateSpec)) *ctrlv1.WorkspaceCreateSpec {
		s := spec(256 * mib)
		fn(s)
		return s
	}
	for i, tc := range []struct {
		name  string
		spec  *ctrlv1.WorkspaceCreateSpec
		code  connect.Code
		field string
	}{
		{"memory 100 MiB", spec(100 * mib), connect.CodeInvalidArgument, "spec.resources.memory_bytes"},
		{"memory 200.5 MiB", spec(200*mib + mib/2), connect.CodeInvalidArgument, "spec.resources.memory_bytes"},
		{"memory missing", spec(0), connect.CodeInvalidArgument, "spec.resources.memory_bytes"},
		{"memory above 1 PiB", spec(1<<50 + mib), connect.CodeInvalidArgument, "spec.resources.memory_bytes"},
		{"layer half a MiB", with(func(s *ctrlv1.WorkspaceCreateSpec) { s.Resources.WritableLayerCapacityBytes = mib + 1 }), connect.CodeInvalidArgument, "spec.resources.writable_layer_capacity_bytes"},
		{"cpu too large", with(func(s *ctrlv1.WorkspaceCreateSpec) { s.Resources.CpuMillis = 100000 }), connect.CodeInvalidArgument, "spec.resources.cpu_millis"},
		{"NEW with volume_id", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW, VolumeId: "vol-x"}
		}), connect.CodeInvalidArgument, "spec.volume.volume_id"},
		{"BOUND without volume_id", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND}
		}), connect.CodeInvalidArgument, "spec.volume.volume_id"},
		{"BOUND to a missing Volume", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: "vol-none"}
		}), connect.CodeNotFound, "volume.volume_id"},
		{"NONE with mount_path", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE, MountPath: "/data"}
		}), connect.CodeInvalidArgument, "spec.volume.mount_path"},
		{"NONE with delete_with_workspace", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE, DeleteWithWorkspace: boolp(false)}
		}), connect.CodeInvalidArgument, "spec.volume.delete_with_workspace"},
		{"relative mount_path", with(func(s *ctrlv1.WorkspaceCreateSpec) { s.Volume = &ctrlv1.WorkspaceVolumeBinding{MountPath: "data"} }), connect.CodeInvalidArgument, "spec.volume.mount_path"},
		{"unclean mount_path", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			s.Volume = &ctrlv1.WorkspaceVolumeBinding{MountPath: "/data/../x"}
		}), connect.CodeInvalidArgument, "spec.volume.mount_path"},
		{"mount_path under /tmp", with(func(s *ctrlv1.WorkspaceCreateSpec) { s.Volume = &ctrlv1.WorkspaceVolumeBinding{MountPath: "/tmp/x"} }), connect.CodeInvalidArgument, "spec.volume.mount_path"},
		{"mount_path /", with(func(s *ctrlv1.WorkspaceCreateSpec) { s.Volume = &ctrlv1.WorkspaceVolumeBinding{MountPath: "/"} }), connect.CodeInvalidArgument, "spec.volume.mount_path"},
		{"unknown mode", with(func(s *ctrlv1.WorkspaceCreateSpec) { s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: 9} }), connect.CodeInvalidArgument, "spec.volume.mode"},
		{"DENY_ALL with an allow entry", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			s.NetworkPolicy = &ctrlv1.NetworkPolicy{Allow: []string{"1.2.3.4"}}
		}), connect.CodeInvalidArgument, "spec.network_policy.allow"},
		{"host bits in a CIDR", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			s.NetworkPolicy = &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET, Deny: []string{"10.0.0.1/8"}}
		}), connect.CodeInvalidArgument, "spec.network_policy.deny[0]"},
		{"two egresses", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			e := &ctrlv1.NetworkPolicyEgress{EgressId: "eg-1", Destinations: []string{"10.0.0.0/8"}}
			s.NetworkPolicy = &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET, Egresses: []*ctrlv1.NetworkPolicyEgress{e, e}}
		}), connect.CodeInvalidArgument, "spec.network_policy.egresses"},
		{"an Egress that does not exist", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			s.NetworkPolicy = &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
				Egresses: []*ctrlv1.NetworkPolicyEgress{{EgressId: "eg-1", Destinations: []string{"10.0.0.0/8"}}}}
		}), connect.CodeNotFound, "spec.network_policy.egresses[0].egress_id"},
		{"an unknown capability", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			s.Capabilities = &ctrlv1.CapabilityRequirements{Required: []string{"provider.qemu", "provider.nope"}}
		}), connect.CodeInvalidArgument, "spec.capabilities.required[1]"},
		{"a platform_key that is no name", with(func(s *ctrlv1.WorkspaceCreateSpec) { s.PlatformKey = "../x" }), connect.CodeInvalidArgument, "spec.platform_key"},
		{"a platform_key that does not exist", with(func(s *ctrlv1.WorkspaceCreateSpec) { s.PlatformKey = "nope" }), connect.CodeNotFound, "spec.platform_key"},
		{"bad label value", with(func(s *ctrlv1.WorkspaceCreateSpec) { s.Labels = map[string]string{"a": "has space"} }), connect.CodeInvalidArgument, `spec.labels["a"]`},
		{"expiration in the past", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			s.Expiration = &ctrlv1.WorkspaceExpirationPolicy{Action: ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP, Deadline: past}
		}), connect.CodeInvalidArgument, "spec.expiration.deadline"},
		{"expiration without action", with(func(s *ctrlv1.WorkspaceCreateSpec) {
			s.Expiration = &ctrlv1.WorkspaceExpirationPolicy{Deadline: future}
		}), connect.CodeInvalidArgument, "spec.expiration.action"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd(fmt.Sprintf("c-%d", i)), Spec: tc.spec})
			if connect.CodeOf(err) != tc.code || apierr.FieldOf(err) != tc.field {
				t.Errorf("err = %v (field %q), want %v naming %q", err, apierr.FieldOf(err), tc.code, tc.field)
			}
		})
	}
	checkNothingAdmitted(t, e)
}

func TestCreateStoresDefaultsRevisionsAndANewVolume(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(256 * mib)})
		if err != nil {
			t.Fatal(err)
		}
		w := res.GetWorkspace()
		b := w.GetSpec().GetVolume()
		switch {
		case w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING:
			t.Errorf("state %v", w.GetState())
		case b.GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND || b.GetMountPath() != "/data" || !b.GetDeleteWithWorkspace() || b.GetVolumeId() == "":
			t.Errorf("stored binding %v: want BOUND at /data, delete_with_workspace on", b)
		case w.GetSpec().GetNetworkPolicy().GetMode() != ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL || w.GetSpec().GetNetworkPolicy().GetRevision() != 1:
			t.Errorf("policy %v: want DENY_ALL at revision 1", w.GetSpec().GetNetworkPolicy())
		case w.GetSpec().GetResourcesRevision() != 1 || w.GetSpec().GetBindingRevision() != 1 || w.GetLabelsRevision() != 1 || w.GetAnnotationsRevision() != 1:
			t.Errorf("revisions must start at one: %v", w)
		case len(w.GetPersistentPaths()) != 1 || w.GetPersistentPaths()[0] != "/data":
			t.Errorf("persistent_paths %v", w.GetPersistentPaths())
		case len(w.GetRetentionTiers()) != 3:
			t.Errorf("retention tiers %v", w.GetRetentionTiers())
		case res.GetCommand().GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_ADMITTED:
			t.Errorf("command %v", res.GetCommand())
		}
		vol, err := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: b.GetVolumeId()})
		if err != nil || vol.GetVolume().GetBoundWorkspaceId() != w.GetWorkspaceId() {
			t.Errorf("NEW Volume: %v %v", vol, err)
		}
		again, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(256 * mib)})
		if err != nil || !proto.Equal(again, res) {
			t.Errorf("replay: %v %v", again, err)
		}
		if _, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(512 * mib)}); connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Errorf("other input: %v", err)
		}
	})
}

func TestNoneBindingIsNotDeclared(t *testing.T) {
	e := sqlite(t)
	s := spec(128 * mib)
	s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
	res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	w := res.GetWorkspace()
	if len(w.GetPersistentPaths()) != 0 || w.GetSpec().GetVolume().DeleteWithWorkspace != nil {
		t.Errorf("NONE: %v", w)
	}
	promised := w.GetRetentionTiers()[0]
	if promised.GetKind() != ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_PROMISED || len(promised.GetPaths()) != 0 ||
		promised.GetAvailability() != ctrlv1.RetentionAvailability_RETENTION_AVAILABILITY_NOT_DECLARED {
		t.Errorf("PROMISED tier without a Volume: %v", promised)
	}
}

func TestOneUndeletedWorkspacePerVolume(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		// An AVAILABLE Volume, as a node would have made it.
		v, err := e.vols.Create(ctx, &ctrlv1.CreateVolumeRequest{Command: cmd("v1")})
		if err != nil {
			t.Fatal(err)
		}
		id := v.GetVolume().GetVolumeId()
		if err := e.store.Tx(ctx, func(tx *store.Tx) error {
			vol, err := tx.GetVolume(id, true)
			if err != nil {
				return err
			}
			vol.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
			return tx.PutVolume(vol)
		}); err != nil {
			t.Fatal(err)
		}
		bound := func(c string) (*ctrlv1.CreateWorkspaceResponse, error) {
			s := spec(256 * mib)
			s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: id, MountPath: "/srv"}
			return e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd(c), Spec: s})
		}
		first, err := bound("c1")
		if err != nil {
			t.Fatal(err)
		}
		if first.GetWorkspace().GetSpec().GetVolume().GetDeleteWithWorkspace() {
			t.Error("BOUND must default delete_with_workspace off")
		}
		if _, err := bound("c2"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("second Workspace on the Volume: %v", err)
		}
		if _, err := e.vols.Delete(ctx, &ctrlv1.DeleteVolumeRequest{Command: cmd("vd"), VolumeId: id}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("deleting a bound Volume: %v", err)
		}
		// Deleting the Workspace releases (does not delete) a BOUND Volume.
		del, err := e.ws.Delete(ctx, &ctrlv1.DeleteWorkspaceRequest{Command: cmd("d1"), WorkspaceId: first.GetWorkspace().GetWorkspaceId()})
		if err != nil || del.GetWorkspace().GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED {
			t.Fatalf("delete: %v %v", del, err)
		}
		got, _ := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: id})
		if got.GetVolume().GetBoundWorkspaceId() != "" || got.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
			t.Errorf("after deleting its Workspace: %v", got.GetVolume())
		}
		if _, err := bound("c3"); err != nil {
			t.Errorf("binding a released Volume: %v", err)
		}
	})
}

func TestDeleteOfANeverPlacedWorkspaceDeletesItsNewVolume(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(256 * mib)})
		if err != nil {
			t.Fatal(err)
		}
		w := res.GetWorkspace()
		del, err := e.ws.Delete(ctx, &ctrlv1.DeleteWorkspaceRequest{Command: cmd("d1"), WorkspaceId: w.GetWorkspaceId()})
		if err != nil || del.GetWorkspace().GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED {
			t.Fatalf("delete: %v %v", del, err)
		}
		vol, _ := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: w.GetSpec().GetVolume().GetVolumeId()})
		if vol.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_DELETED || vol.GetVolume().GetBoundWorkspaceId() != "" {
			t.Errorf("the NEW Volume no launch created: %v, bound to %q; want DELETED, bound to none", vol.GetVolume().GetState(), vol.GetVolume().GetBoundWorkspaceId())
		}
		cmdRes, err := e.ws.GetCommand(ctx, &ctrlv1.GetWorkspaceCommandRequest{WorkspaceId: w.GetWorkspaceId(), CommandId: "c1"})
		if err != nil || cmdRes.GetCommand().GetFailure().GetReason() != ctrlv1.FailureReason_FAILURE_REASON_CANCELLED {
			t.Errorf("the create after delete: %v %v", cmdRes, err)
		}
		if _, err := e.ws.GetCommand(ctx, &ctrlv1.GetWorkspaceCommandRequest{WorkspaceId: "ws-other", CommandId: "c1"}); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("command of another Workspace: %v", err)
		}
		if _, err := e.ws.Start(ctx, &ctrlv1.StartWorkspaceRequest{Command: cmd("s1"), WorkspaceId: w.GetWorkspaceId()}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("start of a deleted Workspace: %v", err)
		}
	})
}

func TestRevisionsAreCASTokensAndStaleOnesWriteNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(256 * mib)})
		if err != nil {
			t.Fatal(err)
		}
		id := res.GetWorkspace().GetWorkspaceId()
		m, err := e.ws.UpdateMemory(ctx, &ctrlv1.UpdateWorkspaceMemoryRequest{Command: cmd("m1"), WorkspaceId: id, ExpectedResourcesRevision: 1, MemoryBytes: 512 * mib})
		if err != nil || m.GetWorkspace().GetSpec().GetResourcesRevision() != 2 {
			t.Fatalf("memory: %v %v", m, err)
		}
		if _, err := e.ws.UpdateMemory(ctx, &ctrlv1.UpdateWorkspaceMemoryRequest{Command: cmd("m2"), WorkspaceId: id, ExpectedResourcesRevision: 1, MemoryBytes: 1024 * mib}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("stale resources_revision: %v", err)
		}
		if _, err := e.ws.UpdateMemory(ctx, &ctrlv1.UpdateWorkspaceMemoryRequest{Command: cmd("m3"), WorkspaceId: id, ExpectedResourcesRevision: 2, MemoryBytes: 100 * mib}); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("100 MiB: %v", err)
		}
		l, err := e.ws.UpdateLabels(ctx, &ctrlv1.UpdateWorkspaceLabelsRequest{Command: cmd("l1"), WorkspaceId: id, ExpectedLabelsRevision: 1, Labels: map[string]string{"team": "a"}})
		if err != nil || l.GetWorkspace().GetLabelsRevision() != 2 || l.GetWorkspace().GetSpec().GetResourcesRevision() != 2 {
			t.Fatalf("labels: %v %v", l, err)
		}
		if _, err := e.ws.UpdateLabels(ctx, &ctrlv1.UpdateWorkspaceLabelsRequest{Command: cmd("l2"), WorkspaceId: id, ExpectedLabelsRevision: 1, Labels: map[string]string{"team": "b"}}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("stale labels_revision: %v", err)
		}
		p, err := e.ws.UpdateNetworkPolicy(ctx, &ctrlv1.UpdateWorkspaceNetworkPolicyRequest{Command: cmd("p1"), WorkspaceId: id, ExpectedRevision: 1,
			NetworkPolicy: &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET, Revision: 77}})
		if err != nil || p.GetWorkspace().GetSpec().GetNetworkPolicy().GetRevision() != 2 {
			t.Fatalf("policy: %v %v", p, err)
		}
		same, err := e.ws.UpdateNetworkPolicy(ctx, &ctrlv1.UpdateWorkspaceNetworkPolicyRequest{Command: cmd("p2"), WorkspaceId: id, ExpectedRevision: 2,
			NetworkPolicy: &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET}})
		if err != nil || same.GetWorkspace().GetSpec().GetNetworkPolicy().GetRevision() != 2 {
			t.Errorf("same content moved the policy revision: %v %v", same, err)
		}
		r, err := e.ws.ResizeWritableLayer(ctx, &ctrlv1.ResizeWorkspaceWritableLayerRequest{Command: cmd("r1"), WorkspaceId: id, ExpectedResourcesRevision: 2, CapacityBytes: 8 << 30})
		if err != nil || r.GetWorkspace().GetSpec().GetResourcesRevision() != 3 {
			t.Fatalf("layer: %v %v", r, err)
		}
		if _, err := e.ws.ResizeWritableLayer(ctx, &ctrlv1.ResizeWorkspaceWritableLayerRequest{Command: cmd("r2"), WorkspaceId: id, ExpectedResourcesRevision: 3, CapacityBytes: 4 << 30}); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("shrinking the layer: %v", err)
		}
		// A stale token names the call's stage, and the Workspace as it is.
		_, err = e.ws.ResizeWritableLayer(ctx, &ctrlv1.ResizeWorkspaceWritableLayerRequest{Command: cmd("r3"), WorkspaceId: id, ExpectedResourcesRevision: 2, CapacityBytes: 16 << 30})
		if d := apierr.DetailOf(err); connect.CodeOf(err) != connect.CodeFailedPrecondition || d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_RESIZING_WRITABLE_LAYER ||
			d.GetObservedWorkspace().GetSpec().GetResourcesRevision() != 3 {
			t.Errorf("a layer resize with a stale token: %v (detail %v), want failed_precondition at RESIZING_WRITABLE_LAYER with the Workspace", err, d)
		}
		b, err := e.ws.UpdateVolumeBinding(ctx, &ctrlv1.UpdateWorkspaceVolumeBindingRequest{Command: cmd("b1"), WorkspaceId: id, ExpectedBindingRevision: 1,
			Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}})
		if err != nil || b.GetWorkspace().GetSpec().GetBindingRevision() != 2 || len(b.GetWorkspace().GetPersistentPaths()) != 0 {
			t.Fatalf("binding: %v %v", b, err)
		}
		if _, err := e.ws.UpdateVolumeBinding(ctx, &ctrlv1.UpdateWorkspaceVolumeBindingRequest{Command: cmd("b2"), WorkspaceId: id, ExpectedBindingRevision: 2,
			Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW}}); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("NEW through UpdateWorkspaceVolumeBinding: %v", err)
		}
		got, _ := e.ws.Get(ctx, &ctrlv1.GetWorkspaceRequest{WorkspaceId: id})
		if got.GetWorkspace().GetSpec().GetResources().GetMemoryBytes() != 512*mib || got.GetWorkspace().GetLabels()["team"] != "a" {
			t.Errorf("a stale write changed the Workspace: %v", got.GetWorkspace())
		}
	})
}

func TestExpirationDeletesAtItsDeadline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		id, _ := expiringSoon(t, e, ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_DELETE)
		deadline := time.Now().Add(10 * time.Second)
		for {
			n, err := e.ws.ExpireDue(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n == 1 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		got, _ := e.ws.Get(ctx, &ctrlv1.GetWorkspaceRequest{WorkspaceId: id})
		if got.GetWorkspace().GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED || got.GetWorkspace().GetExpiration().GetPolicy() != nil {
			t.Errorf("after its deadline: %v", got.GetWorkspace())
		}
	})
}

// A STOP policy whose deadline passes while the Workspace is CREATING
// waits for the create: it is not cleared (it stops the Workspace once it
// is AVAILABLE), and nothing is admitted meanwhile.
func TestAStopExpirationWaitsForTheCreate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		id, deadline := expiringSoon(t, e, ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP)
		for time.Now().Before(deadline.Add(20 * time.Millisecond)) {
			time.Sleep(10 * time.Millisecond) // the deadline is the input here, not a readiness
		}
		if n, err := e.ws.ExpireDue(ctx); err != nil || n != 0 {
			t.Errorf("ExpireDue with a CREATING Workspace due: %d %v, want 0 expired, no error", n, err)
		}
		w := get(t, e, id)
		if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING || w.GetExpiration().GetRevision() != 2 {
			t.Errorf("the CREATING Workspace after its STOP deadline: %v %v, want CREATING with the policy kept", w.GetState(), w.GetExpiration())
		}
		if _, err := e.ws.GetCommand(ctx, &ctrlv1.GetWorkspaceCommandRequest{CommandId: fmt.Sprintf("expire:%s:2", id)}); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("an expiration was admitted for a CREATING Workspace: %v", err)
		}
	})
}

// expiringSoon creates a Workspace (it stays CREATING: no node takes it)
// whose policy of action is not due, then brings its deadline to about
// now through the API's own CAS path; it returns the Workspace and the
// deadline.
func expiringSoon(t *testing.T, e *env, action ctrlv1.WorkspaceExpirationAction) (string, time.Time) {
	t.Helper()
	s := spec(256 * mib)
	s.Expiration = &ctrlv1.WorkspaceExpirationPolicy{Action: action, Deadline: timestamppb.New(time.Now().Add(time.Hour))}
	res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetWorkspace().GetWorkspaceId()
	if n, err := e.ws.ExpireDue(ctx); err != nil || n != 0 {
		t.Fatalf("nothing is due yet: %d %v", n, err)
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	if _, err := e.ws.UpdateExpiration(ctx, &ctrlv1.UpdateWorkspaceExpirationRequest{Command: cmd("x1"), WorkspaceId: id, ExpectedExpirationRevision: 1,
		Change: &ctrlv1.WorkspaceExpirationChange{Change: &ctrlv1.WorkspaceExpirationChange_Set{Set: &ctrlv1.WorkspaceExpirationPolicy{
			Action: action, Deadline: timestamppb.New(deadline)}}}}); err != nil {
		t.Fatal(err)
	}
	return id, deadline
}

// Guest RAM beyond 1 TiB is admitted: the reference judges the upper bound
// against capacity when an execution is placed (only more than 1 PiB, which
// no host has, is refused at admission; TestCreateValidation).
func TestGuestRAMBeyondOneTiBIsAdmitted(t *testing.T) {
	e := sqlite(t)
	res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(2 << 40)})
	if err != nil || res.GetWorkspace().GetSpec().GetResources().GetMemoryBytes() != 2<<40 {
		t.Fatalf("a create of 2 TiB: %v %v, want it admitted as asked", res.GetWorkspace(), err)
	}
}
