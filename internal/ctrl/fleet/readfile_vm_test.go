package fleet_test

import (
	"math"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/guest"
)

// Through ctrl, on a real guest: a ReadFile of /dev/zero without length
// ends with out_of_range (field length, stage READING_FILE) after the
// documented 64 MiB instead of streaming for ever; offsets and lengths
// the guest cannot use are invalid_argument naming the field.
func TestReadFileLimitsOnARealVM(t *testing.T) {
	e := newVMEnv(t)
	e.startNode("node-a", "")
	res, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(createRequest("create-1")))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	e.waitState(id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	files := ctrlv1connect.NewFileServiceClient(http.DefaultClient, e.c.Ctrl.Client.WorkspaceEndpoint, connect.WithInterceptors(auth.Bearer(e.c.Ctrl.Client.Token)))
	read := func(r *ctrlv1.ReadFileRequest) (int, error) {
		r.WorkspaceId = id
		stream, err := files.ReadFile(ctx, connect.NewRequest(r))
		if err != nil {
			return 0, err
		}
		defer stream.Close()
		n := 0
		for stream.Receive() {
			n += len(stream.Msg().GetData())
		}
		return n, stream.Err()
	}
	n, err := read(&ctrlv1.ReadFileRequest{Path: "/dev/zero"})
	detail := apierr.DetailOf(err)
	if connect.CodeOf(err) != connect.CodeOutOfRange || apierr.FieldOf(err) != "length" || detail.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_READING_FILE {
		t.Errorf("ReadFile /dev/zero: %v (detail %v), want out_of_range naming length at READING_FILE", err, detail)
	}
	if n != guest.ReadToEndSlack {
		t.Errorf("ReadFile /dev/zero sent %d bytes, want the cap %d", n, guest.ReadToEndSlack)
	}
	for field, r := range map[string]*ctrlv1.ReadFileRequest{
		"offset": {Path: "/etc/passwd", Offset: math.MaxInt64 + 1},
		"length": {Path: "/etc/passwd", Length: math.MaxUint64},
	} {
		if _, err := read(r); connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != field {
			t.Errorf("ReadFile with %s 2^63 or more: %v, want invalid_argument naming %s", field, err, field)
		}
	}
}
