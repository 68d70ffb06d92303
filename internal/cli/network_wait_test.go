package cli_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/cli"
	"github.com/kibotos/kibotos/internal/clientconfig"
	"github.com/kibotos/kibotos/internal/testenv"
)

// applyingWorkspaces is a WorkspaceService that admits a policy update on
// a running Workspace and answers its first WaitWorkspace with the command
// still running, and the next with it ended as end says. It serves no
// GetWorkspaceCommand: a follow that polled it would fail.
type applyingWorkspaces struct {
	ctrlv1connect.UnimplementedWorkspaceServiceHandler
	end   ctrlv1.WorkspaceCommandState
	mu    sync.Mutex
	waits []*ctrlv1.WaitWorkspaceRequest
}

func (s *applyingWorkspaces) workspace(applied uint64) *ctrlv1.Workspace {
	return &ctrlv1.Workspace{WorkspaceId: "ws-1", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE,
		Spec:                &ctrlv1.WorkspaceSpec{NetworkPolicy: &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET, Revision: 2}},
		NetworkPolicyStatus: &ctrlv1.NetworkPolicyStatus{AppliedRevision: applied}}
}

func (s *applyingWorkspaces) UpdateWorkspaceNetworkPolicy(_ context.Context, req *connect.Request[ctrlv1.UpdateWorkspaceNetworkPolicyRequest]) (*connect.Response[ctrlv1.UpdateWorkspaceNetworkPolicyResponse], error) {
	return connect.NewResponse(&ctrlv1.UpdateWorkspaceNetworkPolicyResponse{Workspace: s.workspace(1)}), nil
}

func (s *applyingWorkspaces) WaitWorkspace(_ context.Context, req *connect.Request[ctrlv1.WaitWorkspaceRequest]) (*connect.Response[ctrlv1.WaitWorkspaceResponse], error) {
	s.mu.Lock()
	s.waits = append(s.waits, req.Msg)
	first := len(s.waits) == 1
	s.mu.Unlock()
	c := &ctrlv1.WorkspaceCommand{CommandId: req.Msg.GetCommandId(), WorkspaceId: "ws-1", Kind: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_UPDATE_NETWORK_POLICY,
		State: ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_RUNNING, Progress: "apply-network-policy"}
	if first {
		return connect.NewResponse(&ctrlv1.WaitWorkspaceResponse{Workspace: s.workspace(1), Command: c}), nil
	}
	c.State = s.end
	applied := uint64(2)
	if s.end == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED {
		c.Failure = &ctrlv1.WorkspaceFailure{Stage: ctrlv1.FailureStage_FAILURE_STAGE_APPLYING_NETWORK, Reason: ctrlv1.FailureReason_FAILURE_REASON_UNSUPPORTED, Message: "cannot enforce"}
		applied = 0
	}
	return connect.NewResponse(&ctrlv1.WaitWorkspaceResponse{Reached: true, Workspace: s.workspace(applied), Command: c}), nil
}

// `workspace network set` follows the update with WaitWorkspace on its
// command (workspaces.md A26), to APPLIED 2 when it succeeds and to an
// error naming the failure when it fails.
func TestNetworkSetFollowsTheUpdateWithWaitWorkspace(t *testing.T) {
	for _, end := range []ctrlv1.WorkspaceCommandState{ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED, ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED} {
		t.Run(end.String(), func(t *testing.T) {
			s := &applyingWorkspaces{end: end}
			mux := http.NewServeMux()
			mux.Handle(ctrlv1connect.NewWorkspaceServiceHandler(s))
			srv := testenv.H2CServer(t, mux)
			t.Setenv(clientconfig.EnvConfig, filepath.Join(t.TempDir(), "none.env"))
			t.Setenv(clientconfig.EnvWorkspaceEndpoint, srv.URL)
			t.Setenv(clientconfig.EnvToken, "token")
			var stdout, stderr strings.Builder
			code := cli.Main(context.Background(), []string{"workspace", "network", "set", "ws-1", "--network", "public-internet",
				"--expected-revision", "1", "--command-id", "net-1"}, &stdout, &stderr)
			if len(s.waits) != 2 || s.waits[0].GetCommandId() != "net-1" || s.waits[0].GetWorkspaceId() != "ws-1" || s.waits[0].GetTimeout() == nil {
				t.Errorf("WaitWorkspace calls: %v, want two on command net-1 of ws-1, each with a timeout", s.waits)
			}
			if end == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED {
				if code != 0 || !strings.Contains(stderr.String(), "applied") || !strings.Contains(stdout.String(), "ws-1") {
					t.Errorf("exit %d\nstdout: %s\nstderr: %s\nwant 0, the Workspace printed and applied said", code, stdout.String(), stderr.String())
				}
				return
			}
			if code == 0 || !strings.Contains(stderr.String(), "not applied") || !strings.Contains(stderr.String(), "cannot enforce") {
				t.Errorf("exit %d\nstderr: %s\nwant an error naming the failure", code, stderr.String())
			}
		})
	}
}
