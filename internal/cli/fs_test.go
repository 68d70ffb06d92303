package cli_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

// pagedFiles is a FileService whose ListDirectory answers in two pages.
type pagedFiles struct {
	ctrlv1connect.UnimplementedFileServiceHandler
	asked []*ctrlv1.ListDirectoryRequest
}

func (p *pagedFiles) ListDirectory(_ context.Context, req *connect.Request[ctrlv1.ListDirectoryRequest]) (*connect.Response[ctrlv1.ListDirectoryResponse], error) {
	p.asked = append(p.asked, req.Msg)
	if req.Msg.GetPageToken() == "" {
		return connect.NewResponse(&ctrlv1.ListDirectoryResponse{NextPageToken: "page-2", Entries: []*ctrlv1.FileInfo{
			{Path: "/d/bin", Type: ctrlv1.FileType_FILE_TYPE_SYMLINK, Mode: 0o777, SymlinkTarget: "usr/bin", Uid: 1000, Gid: 1000},
		}}), nil
	}
	return connect.NewResponse(&ctrlv1.ListDirectoryResponse{Entries: []*ctrlv1.FileInfo{
		{Path: "/d/su", Type: ctrlv1.FileType_FILE_TYPE_REGULAR, Mode: 0o4755, SizeBytes: 1234, Owner: "root", Group: "root"},
		{Path: "/d/tmp", Type: ctrlv1.FileType_FILE_TYPE_DIRECTORY, Mode: 0o1777, Owner: "root", Group: "root"},
	}}), nil
}

// files ls reads every page with the same request, and shows each entry
// as ls -l would: the type letter and special bits in MODE, a link's
// target after its path, a uid with no name as its number.
func TestFilesLsReadsEveryPageAndShowsModesAsLsDoes(t *testing.T) {
	p := &pagedFiles{}
	onFakeEndpoint(t, func(m *http.ServeMux) { m.Handle(ctrlv1connect.NewFileServiceHandler(p)) })
	code, stdout, stderr := runCLI("workspace", "files", "ls", "ws-1", "/d", "--depth", "2", "-u", "dev")
	if code != 0 {
		t.Fatalf("files ls: exit %d: %s", code, stderr)
	}
	rows := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(rows) != 4 {
		t.Fatalf("files ls printed %q, want a header and three entries", stdout)
	}
	for i, want := range []string{"/d/bin -> usr/bin  lrwxrwxrwx  1000  1000", "/d/su  -rwsr-xr-x  root  root  1234", "/d/tmp  drwxrwxrwt  root  root  0"} {
		if !strings.HasPrefix(strings.Join(strings.Fields(rows[i+1]), "  "), strings.Join(strings.Fields(want), "  ")) {
			t.Errorf("row %d: %q, want it to begin %q", i+1, rows[i+1], want)
		}
	}
	if len(p.asked) != 2 || p.asked[1].GetPageToken() != "page-2" {
		t.Fatalf("asked %v, want two pages", p.asked)
	}
	for _, r := range p.asked {
		if r.GetWorkspaceId() != "ws-1" || r.GetPath() != "/d" || r.GetDepth() != 2 || r.GetUser() != "dev" {
			t.Errorf("a page asked %v, want ws-1's /d at depth 2 as dev", r)
		}
	}
}
