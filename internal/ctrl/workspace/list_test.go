package workspace_test

import (
	"fmt"
	"slices"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

// ListWorkspaces pages in workspace_id order until an empty
// next_page_token, narrows by a label selector (k=v, !k, k in (...)), binds
// its page token to the filter (another selector, or include_deleted
// flipped, is invalid_argument naming page_token), refuses a malformed
// selector naming label_selector, and lists a DELETED Workspace only with
// include_deleted.
func TestListWorkspacesPagesFiltersAndHidesDeleted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		var ids []string
		for i, team := range []string{"a", "b", "a", "", "a"} {
			s := spec(256 * mib)
			s.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
			if team != "" {
				s.Labels = map[string]string{"team": team}
			}
			res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd(fmt.Sprintf("c%d", i)), Spec: s})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.GetWorkspace().GetWorkspaceId())
		}
		deleted := ids[2] // a team=a Workspace
		if _, err := e.ws.Delete(ctx, &ctrlv1.DeleteWorkspaceRequest{Command: cmd("d1"), WorkspaceId: deleted}); err != nil {
			t.Fatal(err)
		}
		list := func(selector string, includeDeleted bool) []string {
			t.Helper()
			var out []string
			token := ""
			for {
				res, err := e.ws.List(ctx, &ctrlv1.ListWorkspacesRequest{LabelSelector: selector, PageSize: 1, PageToken: token, IncludeDeleted: includeDeleted})
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range res.GetWorkspaces() {
					out = append(out, w.GetWorkspaceId())
				}
				if token = res.GetNextPageToken(); token == "" {
					return out
				}
			}
		}
		sorted := func(in ...string) []string { out := slices.Clone(in); slices.Sort(out); return out }
		for _, tc := range []struct {
			selector       string
			includeDeleted bool
			want           []string
		}{
			{"", false, sorted(ids[0], ids[1], ids[3], ids[4])},
			{"", true, sorted(ids...)},
			{"team=a", false, sorted(ids[0], ids[4])},
			{"team=a", true, sorted(ids[0], ids[2], ids[4])},
			{"!team", false, sorted(ids[3])},
			{"team in (a,b)", false, sorted(ids[0], ids[1], ids[4])},
		} {
			if got := list(tc.selector, tc.includeDeleted); !slices.Equal(got, tc.want) {
				t.Errorf("selector %q, include_deleted %t: %v, want %v", tc.selector, tc.includeDeleted, got, tc.want)
			}
		}
		first, err := e.ws.List(ctx, &ctrlv1.ListWorkspacesRequest{LabelSelector: "team=a", PageSize: 1})
		if err != nil || first.GetNextPageToken() == "" {
			t.Fatalf("first page: %v %v", first, err)
		}
		for name, req := range map[string]*ctrlv1.ListWorkspacesRequest{
			"another selector":        {LabelSelector: "team=b", PageToken: first.GetNextPageToken()},
			"include_deleted flipped": {LabelSelector: "team=a", IncludeDeleted: true, PageToken: first.GetNextPageToken()},
		} {
			if _, err := e.ws.List(ctx, req); connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "page_token" {
				t.Errorf("a page token with %s: %v (field %q), want invalid_argument naming page_token", name, err, apierr.FieldOf(err))
			}
		}
		if _, err := e.ws.List(ctx, &ctrlv1.ListWorkspacesRequest{LabelSelector: "team in (a"}); connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "label_selector" {
			t.Errorf("a malformed selector: %v (field %q), want invalid_argument naming label_selector", err, apierr.FieldOf(err))
		}
	})
}
