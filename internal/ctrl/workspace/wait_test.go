package workspace_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

const (
	creating = ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING
	deleted  = ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED
)

func TestWaitWorkspaceRefusesBadRequests(t *testing.T) {
	e := sqlite(t)
	res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(256 * mib)})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetWorkspace().GetWorkspaceId()
	for _, tc := range []struct {
		name  string
		req   *ctrlv1.WaitWorkspaceRequest
		code  connect.Code
		field string
	}{
		{"nothing to wait for", &ctrlv1.WaitWorkspaceRequest{WorkspaceId: id}, connect.CodeInvalidArgument, "states"},
		{"unspecified state", &ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, States: []ctrlv1.WorkspaceState{0}}, connect.CodeInvalidArgument, "states"},
		{"unknown state", &ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, States: []ctrlv1.WorkspaceState{99}}, connect.CodeInvalidArgument, "states"},
		{"timeout too long", &ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, States: []ctrlv1.WorkspaceState{deleted}, Timeout: durationpb.New(2 * time.Minute)}, connect.CodeInvalidArgument, "timeout"},
		{"negative timeout", &ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, States: []ctrlv1.WorkspaceState{deleted}, Timeout: durationpb.New(-time.Second)}, connect.CodeInvalidArgument, "timeout"},
		{"unknown Workspace", &ctrlv1.WaitWorkspaceRequest{WorkspaceId: "ws-missing", States: []ctrlv1.WorkspaceState{deleted}}, connect.CodeNotFound, ""},
		{"another Workspace's command", &ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, CommandId: "nope"}, connect.CodeNotFound, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.ws.Wait(ctx, tc.req)
			if connect.CodeOf(err) != tc.code {
				t.Fatalf("code %v (%v), want %v", connect.CodeOf(err), err, tc.code)
			}
			if got := apierr.FieldOf(err); tc.field != "" && got != tc.field {
				t.Errorf("field %q, want %q", got, tc.field)
			}
		})
	}
}

func TestWaitWorkspaceAnswersWhenReachedOrAtItsTimeout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(256 * mib)})
		if err != nil {
			t.Fatal(err)
		}
		id := res.GetWorkspace().GetWorkspaceId()

		// Already holds: answered at once.
		got, err := e.ws.Wait(ctx, &ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, States: []ctrlv1.WorkspaceState{deleted, creating}})
		if err != nil || !got.GetReached() || got.GetWorkspace().GetState() != creating {
			t.Fatalf("wait for CREATING while CREATING: %v %v", got, err)
		}

		// Never holds within the timeout: not reached, not an error. No
		// runner drives the create here, so nothing changes.
		got, err = e.ws.Wait(ctx, &ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, CommandId: "c1", Timeout: durationpb.New(300 * time.Millisecond)})
		if err != nil || got.GetReached() || got.GetCommand().GetCommandId() != "c1" ||
			got.GetCommand().GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_ADMITTED {
			t.Fatalf("wait for a command nothing drives: %v %v", got, err)
		}

		// A write while it waits answers it: the delete cancels the create
		// and deletes the Workspace, which was never placed.
		type answer struct {
			res *ctrlv1.WaitWorkspaceResponse
			err error
		}
		waited := make(chan answer, 1)
		go func() {
			res, err := e.ws.Wait(ctx, &ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, CommandId: "c1", Timeout: durationpb.New(time.Minute)})
			waited <- answer{res, err}
		}()
		if _, err := e.ws.Delete(ctx, &ctrlv1.DeleteWorkspaceRequest{Command: cmd("d1"), WorkspaceId: id}); err != nil {
			t.Fatal(err)
		}
		a := <-waited
		if a.err != nil || !a.res.GetReached() || a.res.GetCommand().GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED ||
			a.res.GetWorkspace().GetState() != deleted {
			t.Fatalf("wait for the create while a delete cancels it: %v %v", a.res, a.err)
		}
	})
}

// TestWaitWorkspaceSeesAnotherReplicasWrite runs two ctrl domains on one
// PostgreSQL database: a waiter on one sees the other's write, which it
// cannot hear, by reading again.
func TestWaitWorkspaceSeesAnotherReplicasWrite(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	replica := func(name string) *workspace.Service {
		st := storetest.Open(t, dsn)
		runner := command.NewRunner(st, name, slog.Default())
		f := fleet.New(st, runner, slog.Default(), fleet.DefaultConfig, fleet.Deps{})
		return workspace.New(st, f, volume.New(st, f, runner, volume.DefaultProfile), runner)
	}
	setup := storetest.Open(t, dsn)
	storetest.PutNodeWithPool(t, setup, "node-a", "pool-a")
	storetest.PutReadyTemplate(t, setup, "busybox", "1", true)
	a, b := replica("a"), replica("b")
	res, err := a.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd("c1"), Spec: spec(256 * mib)})
	if err != nil {
		t.Fatal(err)
	}
	id := res.GetWorkspace().GetWorkspaceId()
	waited := make(chan *ctrlv1.WaitWorkspaceResponse, 1)
	go func() {
		res, err := a.Wait(ctx, &ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, States: []ctrlv1.WorkspaceState{deleted}, Timeout: durationpb.New(time.Minute)})
		if err != nil {
			t.Error(err)
		}
		waited <- res
	}()
	if _, err := b.Delete(ctx, &ctrlv1.DeleteWorkspaceRequest{Command: cmd("d1"), WorkspaceId: id}); err != nil {
		t.Fatal(err)
	}
	if got := <-waited; !got.GetReached() || got.GetWorkspace().GetState() != deleted {
		t.Fatalf("replica a's wait after replica b deleted: %v", got)
	}
}

// GetWorkspace and WaitWorkspace read a Workspace without a Volume in one
// statement, and one with a Volume in a snapshot with it: either way the
// view is the one ListWorkspaces shows.
func TestAWorkspaceReadAloneShowsWhatAListShows(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		without := spec(128 * mib)
		without.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
		for i, s := range []*ctrlv1.WorkspaceCreateSpec{without, spec(128 * mib)} {
			res, err := e.ws.Create(ctx, &ctrlv1.CreateWorkspaceRequest{Command: cmd(fmt.Sprintf("read-%d", i)), Spec: s})
			if err != nil {
				t.Fatal(err)
			}
			id := res.GetWorkspace().GetWorkspaceId()
			got, err := e.ws.Get(ctx, &ctrlv1.GetWorkspaceRequest{WorkspaceId: id})
			if err != nil {
				t.Fatal(err)
			}
			waited, err := e.ws.Wait(ctx, &ctrlv1.WaitWorkspaceRequest{WorkspaceId: id, States: []ctrlv1.WorkspaceState{creating}})
			if err != nil || !waited.GetReached() {
				t.Fatalf("wait: %v, %v", waited, err)
			}
			list, err := e.ws.List(ctx, &ctrlv1.ListWorkspacesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var listed *ctrlv1.Workspace
			for _, w := range list.GetWorkspaces() {
				if w.GetWorkspaceId() == id {
					listed = w
				}
			}
			if !proto.Equal(got.GetWorkspace(), listed) || !proto.Equal(waited.GetWorkspace(), listed) {
				t.Errorf("Workspace %d: Get %v, Wait %v; List %v", i, got.GetWorkspace(), waited.GetWorkspace(), listed)
			}
		}
		if _, err := e.ws.Get(ctx, &ctrlv1.GetWorkspaceRequest{WorkspaceId: "ws-none"}); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("an unknown Workspace: %v, want not_found", err)
		}
	})
}

// With both states and a command_id, whichever holds first answers; a
// command of another Workspace is not_found; without a command_id the
// answer carries no command.
func TestWaitWorkspaceWithStatesAndACommand(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		a := e.createWithoutVolume(t, "c-a")
		b := e.createWithoutVolume(t, "c-b")

		// The state holds, the command (c-a, ADMITTED) has not ended.
		got, err := e.ws.Wait(ctx, &ctrlv1.WaitWorkspaceRequest{WorkspaceId: a, CommandId: "c-a", States: []ctrlv1.WorkspaceState{creating}})
		if err != nil || !got.GetReached() || got.GetCommand().GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_ADMITTED {
			t.Errorf("the state held first: %v %v, want reached with c-a still ADMITTED", got, err)
		}
		// The command ended, the state (DELETED) does not hold.
		e.endCommand(t, "c-a")
		got, err = e.ws.Wait(ctx, &ctrlv1.WaitWorkspaceRequest{WorkspaceId: a, CommandId: "c-a", States: []ctrlv1.WorkspaceState{deleted}})
		if err != nil || !got.GetReached() || got.GetWorkspace().GetState() == deleted ||
			got.GetCommand().GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED {
			t.Errorf("the command ended first: %v %v, want reached with c-a SUCCEEDED", got, err)
		}

		_, err = e.ws.Wait(ctx, &ctrlv1.WaitWorkspaceRequest{WorkspaceId: a, CommandId: "c-b", States: []ctrlv1.WorkspaceState{creating}})
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("a wait on %s with the command of %s: %v, want not_found", a, b, err)
		}

		got, err = e.ws.Wait(ctx, &ctrlv1.WaitWorkspaceRequest{WorkspaceId: b, States: []ctrlv1.WorkspaceState{creating}})
		if err != nil || got.Command != nil {
			t.Errorf("a wait without a command_id: %v %v, want no command in the answer", got, err)
		}
	})
}
