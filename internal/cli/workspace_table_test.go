package cli_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/cli"
)

// oneWorkspace is a WorkspaceService that answers GetWorkspace with w.
type oneWorkspace struct {
	ctrlv1connect.UnimplementedWorkspaceServiceHandler
	w *ctrlv1.Workspace
}

func (o oneWorkspace) GetWorkspace(context.Context, *connect.Request[ctrlv1.GetWorkspaceRequest]) (*connect.Response[ctrlv1.GetWorkspaceResponse], error) {
	return connect.NewResponse(&ctrlv1.GetWorkspaceResponse{Workspace: o.w}), nil
}

// The DISK cell is the layer capacity asked for; a Workspace that left it
// to the storage profile shows the capacity its layer got (the
// BEST_EFFORT tier's), and "-" before a layer exists.
func TestTheDiskCellShowsTheLayerCapacityAProfileChose(t *testing.T) {
	tier := func(n uint64) []*ctrlv1.RetentionTier {
		return []*ctrlv1.RetentionTier{
			{Kind: ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_PROMISED, CapacityBytes: proto.Uint64(1 << 30)},
			{Kind: ctrlv1.RetentionTierKind_RETENTION_TIER_KIND_BEST_EFFORT, CapacityBytes: proto.Uint64(n)},
		}
	}
	for _, tc := range []struct {
		asked uint64
		tiers []*ctrlv1.RetentionTier
		want  string
	}{
		{asked: 2 << 30, tiers: tier(2 << 30), want: "2GiB"},
		{asked: 0, tiers: tier(4 << 30), want: "4GiB"},
		{asked: 0, want: "-"},
	} {
		w := &ctrlv1.Workspace{WorkspaceId: "ws-1", Spec: &ctrlv1.WorkspaceSpec{
			Resources: &ctrlv1.ResourceRequest{MemoryBytes: 512 << 20, WritableLayerCapacityBytes: tc.asked},
		}, RetentionTiers: tc.tiers}
		onFakeEndpoint(t, func(m *http.ServeMux) { m.Handle(ctrlv1connect.NewWorkspaceServiceHandler(oneWorkspace{w: w})) })
		code, stdout, stderr := runCLI("workspace", "get", "ws-1", "--no-headers")
		if code != 0 {
			t.Fatalf("workspace get: exit %d: %s", code, stderr)
		}
		if cells := strings.Fields(stdout); len(cells) < 6 || cells[5] != tc.want {
			t.Errorf("asked %d, tiers %v: row %q, want DISK %s", tc.asked, tc.tiers, stdout, tc.want)
		}
	}
}

// waitingWorkspace admits a create and answers WaitWorkspace only when its
// caller gives up, telling waited each time it is asked.
type waitingWorkspace struct {
	ctrlv1connect.UnimplementedWorkspaceServiceHandler
	waited chan<- struct{}
}

func (w waitingWorkspace) CreateWorkspace(_ context.Context, req *connect.Request[ctrlv1.CreateWorkspaceRequest]) (*connect.Response[ctrlv1.CreateWorkspaceResponse], error) {
	return connect.NewResponse(&ctrlv1.CreateWorkspaceResponse{
		Workspace: &ctrlv1.Workspace{WorkspaceId: "ws-1", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING},
		Command: &ctrlv1.WorkspaceCommand{
			CommandId: req.Msg.GetCommand().GetCommandId(), Kind: ctrlv1.WorkspaceCommandKind_WORKSPACE_COMMAND_KIND_CREATE,
			State: ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_RUNNING,
		},
	}), nil
}

func (w waitingWorkspace) WaitWorkspace(ctx context.Context, _ *connect.Request[ctrlv1.WaitWorkspaceRequest]) (*connect.Response[ctrlv1.WaitWorkspaceResponse], error) {
	w.waited <- struct{}{}
	<-ctx.Done()
	return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
}

// Ctrl-C while create follows its command says the command goes on in
// ctrl and how to look at it, not "canceled: context canceled".
func TestInterruptingAFollowSaysTheCommandGoesOn(t *testing.T) {
	waited := make(chan struct{}, 1)
	onFakeEndpoint(t, func(m *http.ServeMux) {
		m.Handle(ctrlv1connect.NewWorkspaceServiceHandler(waitingWorkspace{waited: waited}))
	})
	ctx, interrupt := context.WithCancel(context.Background())
	go func() {
		<-waited
		interrupt()
	}()
	var stdout, stderr strings.Builder
	code := cli.Main(ctx, []string{"workspace", "create", "--command-id", "c-1"}, &stdout, &stderr)
	if said := stderr.String(); code == 0 || !strings.Contains(said, "the create of ws-1 (command c-1) goes on in ctrl: kibotos workspace wait ws-1 c-1 follows it again") ||
		strings.Contains(said, "context canceled") {
		t.Errorf("create interrupted while following: exit %d\n%s", code, said)
	}
}

// creatingVolume admits a Volume and keeps it CREATING, telling read each
// time it is read.
type creatingVolume struct {
	ctrlv1connect.UnimplementedVolumeServiceHandler
	read chan<- struct{}
}

func (v creatingVolume) volume() *ctrlv1.Volume {
	return &ctrlv1.Volume{VolumeId: "vol-1", State: ctrlv1.VolumeState_VOLUME_STATE_CREATING}
}

func (v creatingVolume) CreateVolume(context.Context, *connect.Request[ctrlv1.CreateVolumeRequest]) (*connect.Response[ctrlv1.CreateVolumeResponse], error) {
	return connect.NewResponse(&ctrlv1.CreateVolumeResponse{Volume: v.volume()}), nil
}

func (v creatingVolume) GetVolume(context.Context, *connect.Request[ctrlv1.GetVolumeRequest]) (*connect.Response[ctrlv1.GetVolumeResponse], error) {
	select {
	case v.read <- struct{}{}:
	default:
	}
	return connect.NewResponse(&ctrlv1.GetVolumeResponse{Volume: v.volume()}), nil
}

// Any other wait interrupted says so, not "context canceled".
func TestInterruptingAnyWaitSaysWhatGoesOn(t *testing.T) {
	read := make(chan struct{}, 1)
	onFakeEndpoint(t, func(m *http.ServeMux) { m.Handle(ctrlv1connect.NewVolumeServiceHandler(creatingVolume{read: read})) })
	ctx, interrupt := context.WithCancel(context.Background())
	go func() {
		<-read
		interrupt()
	}()
	var stdout, stderr strings.Builder
	code := cli.Main(ctx, []string{"volume", "create", "--capacity", "1G"}, &stdout, &stderr)
	if said := stderr.String(); code == 0 || said != "kibotos: interrupted; anything ctrl admitted goes on there\n" {
		t.Errorf("volume create interrupted while waiting: exit %d\n%s", code, said)
	}
}
