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
