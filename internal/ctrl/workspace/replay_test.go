package workspace_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

// Every Workspace mutation is a command: without a command_id it is
// invalid_argument naming command.command_id and changes nothing; the same
// command_id with the same input answers again without acting again (a
// stale token in it does not matter then); with other input it is
// already_exists.
func TestEveryUpdateIsACommand(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		id := e.createWithoutVolume(t, "c1")
		e.forceWorkspace(t, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED) // a stop of it is admitted, and does nothing
		deadline := timestamppb.New(time.Now().Add(time.Hour))
		policy := func(mode ctrlv1.NetworkPolicyMode) *ctrlv1.NetworkPolicy { return &ctrlv1.NetworkPolicy{Mode: mode} }
		none := &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
		for _, tc := range []struct {
			name string
			// call sends the update under command m; other changes its input.
			call func(m *ctrlv1.CommandMetadata, other bool) error
		}{
			{"UpdateWorkspaceMemory", func(m *ctrlv1.CommandMetadata, other bool) error {
				memory := uint64(512 * mib)
				if other {
					memory = 768 * mib
				}
				_, err := e.ws.UpdateMemory(ctx, &ctrlv1.UpdateWorkspaceMemoryRequest{Command: m, WorkspaceId: id, ExpectedResourcesRevision: 1, MemoryBytes: memory})
				return err
			}},
			{"ResizeWorkspaceWritableLayer", func(m *ctrlv1.CommandMetadata, other bool) error {
				capacity := uint64(16 << 30)
				if other {
					capacity = 32 << 30
				}
				_, err := e.ws.ResizeWritableLayer(ctx, &ctrlv1.ResizeWorkspaceWritableLayerRequest{Command: m, WorkspaceId: id, ExpectedResourcesRevision: 2, CapacityBytes: capacity})
				return err
			}},
			{"UpdateWorkspaceNetworkPolicy", func(m *ctrlv1.CommandMetadata, other bool) error {
				p := policy(ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET)
				if other {
					p = policy(ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL)
				}
				_, err := e.ws.UpdateNetworkPolicy(ctx, &ctrlv1.UpdateWorkspaceNetworkPolicyRequest{Command: m, WorkspaceId: id, ExpectedRevision: 1, NetworkPolicy: p})
				return err
			}},
			{"UpdateWorkspaceLabels", func(m *ctrlv1.CommandMetadata, other bool) error {
				l := map[string]string{"team": "a"}
				if other {
					l["team"] = "b"
				}
				_, err := e.ws.UpdateLabels(ctx, &ctrlv1.UpdateWorkspaceLabelsRequest{Command: m, WorkspaceId: id, ExpectedLabelsRevision: 1, Labels: l})
				return err
			}},
			{"UpdateWorkspaceAnnotations", func(m *ctrlv1.CommandMetadata, other bool) error {
				a := map[string]string{"note": "x"}
				if other {
					a["note"] = "y"
				}
				_, err := e.ws.UpdateAnnotations(ctx, &ctrlv1.UpdateWorkspaceAnnotationsRequest{Command: m, WorkspaceId: id, ExpectedAnnotationsRevision: 1, Annotations: a})
				return err
			}},
			{"UpdateWorkspaceExpiration", func(m *ctrlv1.CommandMetadata, other bool) error {
				action := ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP
				if other {
					action = ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_DELETE
				}
				_, err := e.ws.UpdateExpiration(ctx, &ctrlv1.UpdateWorkspaceExpirationRequest{Command: m, WorkspaceId: id,
					Change: &ctrlv1.WorkspaceExpirationChange{Change: &ctrlv1.WorkspaceExpirationChange_Set{Set: &ctrlv1.WorkspaceExpirationPolicy{Action: action, Deadline: deadline}}}})
				return err
			}},
			{"UpdateWorkspaceVolumeBinding", func(m *ctrlv1.CommandMetadata, other bool) error {
				b := none
				if other {
					b = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: "vol-other"}
				}
				_, err := e.ws.UpdateVolumeBinding(ctx, &ctrlv1.UpdateWorkspaceVolumeBindingRequest{Command: m, WorkspaceId: id, ExpectedBindingRevision: 1, Volume: b})
				return err
			}},
			{"StopWorkspace", func(m *ctrlv1.CommandMetadata, other bool) error {
				mode := ctrlv1.StopMode_STOP_MODE_NORMAL
				if other {
					mode = ctrlv1.StopMode_STOP_MODE_FORCE
				}
				_, err := e.ws.Stop(ctx, &ctrlv1.StopWorkspaceRequest{Command: m, WorkspaceId: id, Mode: mode})
				return err
			}},
		} {
			before := get(t, e, id)
			if err := tc.call(nil, false); connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "command.command_id" {
				t.Errorf("%s without a command_id: %v (field %q), want invalid_argument naming command.command_id", tc.name, err, apierr.FieldOf(err))
			}
			if after := get(t, e, id); !after.GetUpdatedAt().AsTime().Equal(before.GetUpdatedAt().AsTime()) {
				t.Errorf("%s without a command_id changed the Workspace", tc.name)
			}
			m := cmd("u-" + tc.name)
			if err := tc.call(m, false); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if err := tc.call(m, false); err != nil {
				t.Errorf("%s replayed: %v, want its answer again", tc.name, err)
			}
			if err := tc.call(m, true); connect.CodeOf(err) != connect.CodeAlreadyExists {
				t.Errorf("%s under the same command_id with other input: %v, want already_exists", tc.name, err)
			}
		}
	})
}
