package workspace_test

import (
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store"
)

// Tests of sentences of the Workspace API that no other test asserted:
// each names the row of docs/spec-coverage/workspaces.md it covers.

// C3, FS1 (VALIDATING): a create, start, stop or delete without a
// command_id is invalid_argument naming command.command_id, at the
// VALIDATING stage, and admits nothing.
func TestALifecycleCallWithoutACommandIDAdmitsNothing(t *testing.T) {
	e := sqlite(t)
	id := e.createWithoutVolume(t, "c1")
	before := get(t, e, id)
	for name, call := range map[string]func() error{
		"CreateWorkspace": func() error {
			_, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: &ctrlv1.CommandMetadata{}, Spec: spec(256 * mib)})
			return err
		},
		"StartWorkspace": func() error {
			_, err := e.ws.Start(ctx, &ctrlv1.StartWorkspaceRequest{WorkspaceId: id})
			return err
		},
		"StopWorkspace": func() error {
			_, err := e.ws.Stop(ctx, &ctrlv1.StopWorkspaceRequest{WorkspaceId: id})
			return err
		},
		"DeleteWorkspace": func() error {
			_, err := e.ws.Delete(ctx, &ctrlv1.DeleteWorkspaceRequest{Command: &ctrlv1.CommandMetadata{}, WorkspaceId: id})
			return err
		},
	} {
		err := call()
		if connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "command.command_id" {
			t.Errorf("%s without a command_id: %v (field %q), want invalid_argument naming command.command_id", name, err, apierr.FieldOf(err))
		}
		if stage := apierr.DetailOf(err).GetStage(); stage != ctrlv1.FailureStage_FAILURE_STAGE_VALIDATING {
			t.Errorf("%s without a command_id: stage %v, want VALIDATING", name, stage)
		}
	}
	list, err := e.ws.List(ctx, &ctrlv1.ListWorkspacesRequest{IncludeDeleted: true})
	if err != nil || len(list.GetWorkspaces()) != 1 {
		t.Fatalf("Workspaces after the refusals: %v %v, want the one created", list, err)
	}
	if w := list.GetWorkspaces()[0]; w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING || !w.GetUpdatedAt().AsTime().Equal(before.GetUpdatedAt().AsTime()) {
		t.Errorf("the Workspace after the refusals: %v updated at %v, want CREATING and not updated since %v", w.GetState(), w.GetUpdatedAt(), before.GetUpdatedAt())
	}
}

// C5: a start and a stop answer at once with the Workspace as stored and
// the command they admitted.
func TestAStartAndAStopAnswerWithTheirAdmittedCommand(t *testing.T) {
	e := sqlite(t)
	id := e.createWithoutVolume(t, "c1")
	e.endCommand(t, "c1")
	e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
	start, err := e.ws.Start(ctx, &ctrlv1.StartWorkspaceRequest{Command: cmd("s1"), WorkspaceId: id})
	if err != nil {
		t.Fatal(err)
	}
	checkAdmitted(t, "start", start.GetCommand(), "s1", id, ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_START)
	if got := start.GetWorkspace(); got.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_STARTING || !sameWorkspace(t, e, got) {
		t.Errorf("the start's Workspace: %v, want STARTING and as GetWorkspace reads it", got.GetState())
	}
	e.endCommand(t, "s1")
	e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	e.runOn(t, id, "node-a")
	stop, err := e.ws.Stop(ctx, &ctrlv1.StopWorkspaceRequest{Command: cmd("t1"), WorkspaceId: id})
	if err != nil {
		t.Fatal(err)
	}
	checkAdmitted(t, "stop", stop.GetCommand(), "t1", id, ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_STOP)
	if got := stop.GetWorkspace(); got.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPING || !sameWorkspace(t, e, got) {
		t.Errorf("the stop's Workspace: %v, want STOPPING and as GetWorkspace reads it", got.GetState())
	}
}

func checkAdmitted(t *testing.T, what string, c *ctrlv1.WorkspaceCommand, commandID, workspaceID string, kind ctrlv1.WorkspaceCommandKind) {
	t.Helper()
	if c.GetCommandId() != commandID || c.GetWorkspaceId() != workspaceID || c.GetKind() != kind ||
		c.GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_ADMITTED || c.GetAdmittedAt() == nil || c.GetCompletedAt() != nil {
		t.Errorf("the %s's command: %v, want %s of %s, %v, ADMITTED, admitted_at set, no completed_at", what, c, commandID, workspaceID, kind)
	}
}

// sameWorkspace reports whether w is the Workspace GetWorkspace reads now.
func sameWorkspace(t *testing.T, e *env, w *ctrlv1.Workspace) bool {
	t.Helper()
	stored := get(t, e, w.GetWorkspaceId())
	return stored.GetSpec().GetResourcesRevision() == w.GetSpec().GetResourcesRevision() && stored.GetState() == w.GetState() && stored.GetUpdatedAt().AsTime().Equal(w.GetUpdatedAt().AsTime())
}

// A22: completed_at is present once a command SUCCEEDED or FAILED, and
// absent before.
func TestACommandsCompletedAtIsPresentOnceItEnds(t *testing.T) {
	e := sqlite(t)
	res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(256 * mib)})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetWorkspace().GetWorkspaceId()
	if c := workspaceCommand(t, e, id, "c1"); c.GetCompletedAt() != nil {
		t.Errorf("the create before it ends: %v, completed_at %v; want none", c.GetState(), c.GetCompletedAt())
	}
	if _, err := e.ws.Delete(ctx, &ctrlv1.DeleteWorkspaceRequest{Command: cmd("d1"), WorkspaceId: id}); err != nil {
		t.Fatal(err)
	}
	for commandID, state := range map[string]ctrlv1.WorkspaceCommandState{
		"c1": ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED, // cancelled by the delete
		"d1": ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED,
	} {
		c := workspaceCommand(t, e, id, commandID)
		if c.GetState() != state || c.GetCompletedAt() == nil || c.GetCompletedAt().AsTime().Before(c.GetAdmittedAt().AsTime()) {
			t.Errorf("command %s: %v, completed_at %v (admitted %v); want %v with completed_at", commandID, c.GetState(), c.GetCompletedAt(), c.GetAdmittedAt(), state)
		}
	}
}

func workspaceCommand(t *testing.T, e *env, workspaceID, commandID string) *ctrlv1.WorkspaceCommand {
	t.Helper()
	res, err := e.ws.GetCommand(ctx, &ctrlv1.GetWorkspaceCommandRequest{WorkspaceId: workspaceID, CommandId: commandID})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetCommand()
}

// B5, B21, B23: a NONE request with a volume_id is refused; a stored NONE
// binding says NONE; a NEW request with delete_with_workspace off stores
// it off and the Workspace's delete keeps the Volume.
func TestBindingModesAsStored(t *testing.T) {
	e := sqlite(t)
	s := spec(256 * mib)
	s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE, VolumeId: "vol-x"}
	_, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c0"), Spec: s})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "spec.volume.volume_id" {
		t.Errorf("NONE with a volume_id: %v (field %q), want invalid_argument naming spec.volume.volume_id", err, apierr.FieldOf(err))
	}
	none := e.createWithoutVolume(t, "c1")
	if b := get(t, e, none).GetSpec().GetVolume(); b.GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE {
		t.Errorf("a stored NONE binding: %v, want mode NONE", b)
	}
	s = spec(256 * mib)
	s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW, DeleteWithWorkspace: boolp(false)}
	res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c2"), Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	b := res.GetWorkspace().GetSpec().GetVolume()
	if b.GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND || b.DeleteWithWorkspace == nil || b.GetDeleteWithWorkspace() {
		t.Fatalf("NEW with delete_with_workspace off: stored %v, want BOUND with the flag stored off", b)
	}
	// The Volume exists once a launch made it; until then the delete
	// deletes it whatever the flag says (B15). Make it AVAILABLE, as a
	// launch would, so that the flag decides.
	e.force(t, b.GetVolumeId(), "", func(v *ctrlv1.Volume) { v.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE })
	if _, err := e.ws.Delete(ctx, &ctrlv1.DeleteWorkspaceRequest{Command: cmd("d2"), WorkspaceId: res.GetWorkspace().GetWorkspaceId()}); err != nil {
		t.Fatal(err)
	}
	vol, err := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: b.GetVolumeId()})
	if err != nil || vol.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE || vol.GetVolume().GetBoundWorkspaceId() != "" {
		t.Errorf("the Volume after its Workspace's delete: %v %v, want AVAILABLE and bound to none", vol.GetVolume(), err)
	}
}

// R7, U5: a layer resize moves only upward, by whole MiB: equal, zero,
// smaller and a part of a MiB are invalid_argument naming capacity_bytes,
// and write nothing.
func TestALayerResizeRefusesWhatIsNotAGrowthByWholeMiB(t *testing.T) {
	e := sqlite(t)
	id := e.createWithoutVolume(t, "c1")
	w := get(t, e, id)
	current := w.GetSpec().GetResources().GetWritableLayerCapacityBytes()
	for i, capacity := range []uint64{0, current, current - mib, current + mib + 1} {
		_, err := e.ws.ResizeWritableLayer(ctx, &ctrlv1.ResizeWorkspaceWritableLayerRequest{Command: cmd(fmt.Sprintf("r%d", i)), WorkspaceId: id,
			ExpectedResourcesRevision: w.GetSpec().GetResourcesRevision(), CapacityBytes: capacity})
		if connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "capacity_bytes" {
			t.Errorf("a resize to %d bytes from %d: %v (field %q), want invalid_argument naming capacity_bytes", capacity, current, err, apierr.FieldOf(err))
		}
	}
	if after := get(t, e, id); after.GetSpec().GetResourcesRevision() != w.GetSpec().GetResourcesRevision() || !after.GetUpdatedAt().AsTime().Equal(w.GetUpdatedAt().AsTime()) {
		t.Errorf("refused resizes wrote: resources_revision %d, updated_at %v; want %d, %v", after.GetSpec().GetResourcesRevision(), after.GetUpdatedAt(), w.GetSpec().GetResourcesRevision(), w.GetUpdatedAt())
	}
}

// U8, F13: UpdateWorkspaceAnnotations replaces all annotations (a key left
// out is gone), refuses a value with U+0000 naming it, and refuses a
// DELETED Workspace.
func TestAnnotationsAreReplacedWhole(t *testing.T) {
	e := sqlite(t)
	s := spec(256 * mib)
	s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
	s.Annotations = map[string]string{"keep": "1", "drop": "2"}
	res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetWorkspace().GetWorkspaceId()
	up, err := e.ws.UpdateAnnotations(ctx, &ctrlv1.UpdateWorkspaceAnnotationsRequest{Command: cmd("a1"), WorkspaceId: id, ExpectedAnnotationsRevision: 1,
		Annotations: map[string]string{"keep": "one", "new": "ünïcode ✓"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, e, id).GetAnnotations(); len(got) != 2 || got["keep"] != "one" || got["new"] != "ünïcode ✓" {
		t.Errorf("annotations after the update: %v, want exactly keep=one and new", got)
	}
	revision := up.GetWorkspace().GetAnnotationsRevision()
	_, err = e.ws.UpdateAnnotations(ctx, &ctrlv1.UpdateWorkspaceAnnotationsRequest{Command: cmd("a2"), WorkspaceId: id, ExpectedAnnotationsRevision: revision,
		Annotations: map[string]string{"bad": "a\x00b"}})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != `annotations["bad"]` {
		t.Errorf("a value with U+0000: %v (field %q), want invalid_argument naming annotations[\"bad\"]", err, apierr.FieldOf(err))
	}
	if _, err := e.ws.Delete(ctx, &ctrlv1.DeleteWorkspaceRequest{Command: cmd("d1"), WorkspaceId: id}); err != nil {
		t.Fatal(err)
	}
	deleted := get(t, e, id)
	_, err = e.ws.UpdateAnnotations(ctx, &ctrlv1.UpdateWorkspaceAnnotationsRequest{Command: cmd("a3"), WorkspaceId: id, ExpectedAnnotationsRevision: deleted.GetAnnotationsRevision(),
		Annotations: map[string]string{}})
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("annotations of a DELETED Workspace: %v, want failed_precondition", err)
	}
	if after := get(t, e, id); len(after.GetAnnotations()) != 2 || after.GetAnnotationsRevision() != deleted.GetAnnotationsRevision() {
		t.Errorf("refused updates changed the annotations: %v at %d", after.GetAnnotations(), after.GetAnnotationsRevision())
	}
}

// FR2: a Workspace API not_found carries FAILURE_REASON_NOT_FOUND.
func TestAMissingWorkspaceIsNotFoundWithItsReason(t *testing.T) {
	e := sqlite(t)
	_, err := e.ws.Get(ctx, &ctrlv1.GetWorkspaceRequest{WorkspaceId: "ws-missing"})
	if connect.CodeOf(err) != connect.CodeNotFound || apierr.DetailOf(err).GetReason() != ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND {
		t.Errorf("GetWorkspace of a missing Workspace: %v (reason %v), want not_found with NOT_FOUND", err, apierr.DetailOf(err).GetReason())
	}
	_, err = e.ws.Start(ctx, &ctrlv1.StartWorkspaceRequest{Command: cmd("s1"), WorkspaceId: "ws-missing"})
	if connect.CodeOf(err) != connect.CodeNotFound || apierr.DetailOf(err).GetReason() != ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND {
		t.Errorf("StartWorkspace of a missing Workspace: %v (reason %v), want not_found with NOT_FOUND", err, apierr.DetailOf(err).GetReason())
	}
}

// L8, L9: a StopWorkspace in either mode records cause REQUESTED, and
// while the Workspace is STOPPING its durability is UNSPECIFIED and it has
// no completed_at.
func TestAStopInEitherModeIsRequestedAndIncompleteWhileStopping(t *testing.T) {
	e := sqlite(t)
	for i, mode := range []ctrlv1.StopMode{ctrlv1.StopMode_STOP_MODE_NORMAL, ctrlv1.StopMode_STOP_MODE_FORCE} {
		id := e.createWithoutVolume(t, fmt.Sprintf("c%d", i))
		e.endCommand(t, fmt.Sprintf("c%d", i))
		e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
		e.runOn(t, id, "node-a")
		stopID := fmt.Sprintf("t%d", i)
		if _, err := e.ws.Stop(ctx, &ctrlv1.StopWorkspaceRequest{Command: cmd(stopID), WorkspaceId: id, Mode: mode}); err != nil {
			t.Fatal(err)
		}
		w := get(t, e, id)
		s := w.GetLastStop()
		if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPING || s.GetCause() != ctrlv1.StopCause_STOP_CAUSE_REQUESTED ||
			s.GetForce() != (mode == ctrlv1.StopMode_STOP_MODE_FORCE) || s.GetCommandId() != stopID || s.GetRequestedAt() == nil {
			t.Errorf("%v stop: %v, last_stop %v; want STOPPING, REQUESTED by %s, force %t, requested_at set", mode, w.GetState(), s, stopID, mode == ctrlv1.StopMode_STOP_MODE_FORCE)
		}
		if s.GetDurability() != ctrlv1.StopDurability_STOP_DURABILITY_UNSPECIFIED || s.GetCompletedAt() != nil {
			t.Errorf("%v stop while STOPPING: durability %v, completed_at %v; want UNSPECIFIED and none", mode, s.GetDurability(), s.GetCompletedAt())
		}
	}
}

// A9: ListWorkspaces' page_size zero selects 100, and a page_size above
// 1000 lists 1000 (clamped: designed here, as every List call does).
func TestListWorkspacesPageSizes(t *testing.T) {
	e := sqlite(t)
	first := get(t, e, e.createWithoutVolume(t, "c1"))
	if err := e.store.Tx(ctx, func(tx *store.Tx) error {
		for i := range 1000 {
			w := proto.CloneOf(first)
			w.WorkspaceId = fmt.Sprintf("%s-%04d", first.GetWorkspaceId(), i)
			if err := tx.PutWorkspace(w); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ size, want uint32 }{{0, 100}, {1000, 1000}, {1001, 1000}, {5000, 1000}} {
		res, err := e.ws.List(ctx, &ctrlv1.ListWorkspacesRequest{PageSize: tc.size})
		if err != nil || uint32(len(res.GetWorkspaces())) != tc.want || res.GetNextPageToken() == "" {
			t.Errorf("page_size %d: %d Workspaces, next page %q, %v; want %d and a next page of 1001", tc.size, len(res.GetWorkspaces()), res.GetNextPageToken(), err, tc.want)
		}
	}
}

// C8: every update refused for a stale CAS token is failed_precondition
// carrying the Workspace as stored in ErrorDetail.observed_workspace, and
// writes nothing.
func TestEveryStaleTokenCarriesTheStoredWorkspace(t *testing.T) {
	e := sqlite(t)
	id := e.createWithoutVolume(t, "c1")
	stored := get(t, e, id)
	const stale = 99
	for name, call := range map[string]func() error{
		"UpdateWorkspaceMemory": func() error {
			_, err := e.ws.UpdateMemory(ctx, &ctrlv1.UpdateWorkspaceMemoryRequest{Command: cmd("m"), WorkspaceId: id, ExpectedResourcesRevision: stale, MemoryBytes: 512 * mib})
			return err
		},
		"UpdateWorkspaceVolumeBinding": func() error {
			_, err := e.ws.UpdateVolumeBinding(ctx, &ctrlv1.UpdateWorkspaceVolumeBindingRequest{Command: cmd("b"), WorkspaceId: id, ExpectedBindingRevision: stale,
				Volume: &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}})
			return err
		},
		"UpdateWorkspaceNetworkPolicy": func() error {
			_, err := e.ws.UpdateNetworkPolicy(ctx, &ctrlv1.UpdateWorkspaceNetworkPolicyRequest{Command: cmd("p"), WorkspaceId: id, ExpectedRevision: stale,
				NetworkPolicy: &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET}})
			return err
		},
		"UpdateWorkspaceLabels": func() error {
			_, err := e.ws.UpdateLabels(ctx, &ctrlv1.UpdateWorkspaceLabelsRequest{Command: cmd("l"), WorkspaceId: id, ExpectedLabelsRevision: stale, Labels: map[string]string{"a": "b"}})
			return err
		},
		"UpdateWorkspaceAnnotations": func() error {
			_, err := e.ws.UpdateAnnotations(ctx, &ctrlv1.UpdateWorkspaceAnnotationsRequest{Command: cmd("a"), WorkspaceId: id, ExpectedAnnotationsRevision: stale, Annotations: map[string]string{"a": "b"}})
			return err
		},
		"UpdateWorkspaceExpiration": func() error {
			_, err := e.ws.UpdateExpiration(ctx, &ctrlv1.UpdateWorkspaceExpirationRequest{Command: cmd("x"), WorkspaceId: id, ExpectedExpirationRevision: stale,
				Change: &ctrlv1.WorkspaceExpirationChange{Change: &ctrlv1.WorkspaceExpirationChange_Clear{Clear: true}}})
			return err
		},
	} {
		err := call()
		observed := apierr.DetailOf(err).GetObservedWorkspace()
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || observed.GetWorkspaceId() != id || !proto.Equal(observed.GetSpec(), stored.GetSpec()) ||
			observed.GetLabelsRevision() != stored.GetLabelsRevision() || observed.GetAnnotationsRevision() != stored.GetAnnotationsRevision() {
			t.Errorf("%s with a stale token: %v, observed_workspace %v; want failed_precondition carrying the Workspace as stored", name, err, observed)
		}
	}
	if after := get(t, e, id); !after.GetUpdatedAt().AsTime().Equal(stored.GetUpdatedAt().AsTime()) {
		t.Errorf("stale updates wrote the Workspace: updated_at %v, was %v", after.GetUpdatedAt(), stored.GetUpdatedAt())
	}
}

// E13: the PROMISED tier of a Workspace with a Volume reads RESET /
// FIRST_START while its first execution runs, CONTINUED from the second,
// and neither before any start.
func TestThePromisedTierResetsOnlyAtTheFirstStart(t *testing.T) {
	e := sqlite(t)
	s := spec(256 * mib)
	s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: e.availableVolume(t, "v1")}
	res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetWorkspace().GetWorkspaceId()
	promised := func(when string, continuity ctrlv1.RetentionContinuity, reason ctrlv1.RetentionResetReason) {
		t.Helper()
		tier := get(t, e, id).GetRetentionTiers()[0]
		if tier.GetKind() != ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_PROMISED || tier.GetContinuity() != continuity || tier.GetResetReason() != reason {
			t.Errorf("%s: %v %v %v, want PROMISED %v %v", when, tier.GetKind(), tier.GetContinuity(), tier.GetResetReason(), continuity, reason)
		}
	}
	promised("before any start", ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_UNSPECIFIED, ctrlv1.RetentionResetReason_RETENTION_RESET_REASON_UNSPECIFIED)
	for starts, want := range map[uint64]ctrlv1.RetentionContinuity{1: ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_RESET, 2: ctrlv1.RetentionContinuity_RETENTION_CONTINUITY_CONTINUED} {
		if err := e.store.Tx(ctx, func(tx *store.Tx) error {
			return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: id, InstanceId: fmt.Sprintf("%s.%d", id, starts), NodeId: "node-a", Starts: starts})
		}); err != nil {
			t.Fatal(err)
		}
		reason := ctrlv1.RetentionResetReason_RETENTION_RESET_REASON_UNSPECIFIED
		if starts == 1 {
			reason = ctrlv1.RetentionResetReason_RETENTION_RESET_REASON_FIRST_START
		}
		promised(fmt.Sprintf("execution %d", starts), want, reason)
	}
}
