package cli_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/testenv"
)

// A list longer than ctrl's default page (100) is shown whole, in the
// table, with -q and with -o json: the commands read one page before,
// and showed the first 100 as if they were all.
func TestListsShowMoreThanOnePage(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	c.StartNode(t, "node-a", "", "")
	const n = 101
	var volumes, grants []string
	for i := range n {
		v, err := c.Volumes.CreateVolume(context.Background(), connect.NewRequest(&ctrlv1.CreateVolumeRequest{
			Command: &ctrlv1.CommandMetadata{CommandId: fmt.Sprintf("vol-%d", i)}, Spec: &ctrlv1.VolumeSpec{CapacityBytes: 64 << 20},
		}))
		if err != nil {
			t.Fatal(err)
		}
		volumes = append(volumes, v.Msg.GetVolume().GetVolumeId())
		g, err := c.Enrollment.CreateEnrollmentGrant(context.Background(), connect.NewRequest(&operatorv1.CreateEnrollmentGrantRequest{
			Command: &ctrlv1.CommandMetadata{CommandId: fmt.Sprintf("grant-%d", i)}, NodeId: fmt.Sprintf("node-%d", i),
		}))
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g.Msg.GetGrant().GetGrantId())
	}
	useWorkspace(t, c)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"volume", "list", "-q"}, volumes},
		{[]string{"pool", "objects", "default", "--kind", "volume", "-q"}, volumes},
		{[]string{"enrollment", "list", "-q"}, grants},
	} {
		code, out, errOut := kibotos(t, c, tc.args...)
		got := strings.Fields(out)
		if code != 0 || !sameSet(got, tc.want) {
			t.Errorf("%s: exit %d, %d ids, want the %d made\n%s", strings.Join(tc.args, " "), code, len(got), len(tc.want), errOut)
		}
	}
	code, out, errOut := kibotos(t, c, "volume", "list")
	if lines := strings.Count(out, "\n"); code != 0 || lines != n+1 {
		t.Errorf("volume list: exit %d, %d lines, want a header and %d rows\n%s", code, lines, n, errOut)
	}
	code, out, errOut = kibotos(t, c, "volume", "list", "-o", "json")
	list := &ctrlv1.ListVolumesResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), list) != nil || len(list.GetVolumes()) != n || list.GetNextPageToken() != "" {
		t.Errorf("volume list -o json: exit %d, %d Volumes, next page %q\n%s", code, len(list.GetVolumes()), list.GetNextPageToken(), errOut)
	}
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// pagedWorkspaces answers ListWorkspaces two at a time, in order; with
// stuck, every page carries the token it was asked with.
type pagedWorkspaces struct {
	ctrlv1connect.UnimplementedWorkspaceServiceHandler
	ids   []string
	stuck bool
}

func (p pagedWorkspaces) ListWorkspaces(_ context.Context, req *connect.Request[ctrlv1.ListWorkspacesRequest]) (*connect.Response[ctrlv1.ListWorkspacesResponse], error) {
	from, _ := strconv.Atoi(req.Msg.GetPageToken())
	to := min(from+2, len(p.ids))
	res := &ctrlv1.ListWorkspacesResponse{}
	for _, id := range p.ids[from:to] {
		res.Workspaces = append(res.Workspaces, &ctrlv1.Workspace{WorkspaceId: id})
	}
	switch {
	case p.stuck:
		res.NextPageToken = strconv.Itoa(from)
	case to < len(p.ids):
		res.NextPageToken = strconv.Itoa(to)
	}
	return connect.NewResponse(res), nil
}

// A list follows next_page_token to the last page, in order, and a server
// that answers a page with the token it was asked with is an error, not a
// list without end.
func TestListsFollowPageTokens(t *testing.T) {
	ids := []string{"ws-1", "ws-2", "ws-3", "ws-4", "ws-5"}
	onFakeEndpoint(t, func(m *http.ServeMux) { m.Handle(ctrlv1connect.NewWorkspaceServiceHandler(pagedWorkspaces{ids: ids})) })
	if code, out, errOut := runCLI("workspace", "list", "-q"); code != 0 || !slices.Equal(strings.Fields(out), ids) {
		t.Errorf("workspace list -q: exit %d, %q, want %q\n%s", code, strings.Fields(out), ids, errOut)
	}

	onFakeEndpoint(t, func(m *http.ServeMux) {
		m.Handle(ctrlv1connect.NewWorkspaceServiceHandler(pagedWorkspaces{ids: ids, stuck: true}))
	})
	if code, out, errOut := runCLI("workspace", "list", "-q"); code == 0 || out != "" || !strings.Contains(errOut, "never end") {
		t.Errorf("workspace list from a server repeating its token: exit %d\n%s%s", code, out, errOut)
	}
}
