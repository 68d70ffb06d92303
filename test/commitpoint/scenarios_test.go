package commitpoint_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/testenv"
)

// scenario is one command the walk crashes ctrl in.
type scenario struct {
	name string
	// setup makes what the command acts on (with commands of its own,
	// under prefix) and returns its id; nil when it acts on nothing yet.
	setup func(t *testing.T, s *system, prefix string) string
	// send sends the command commandID on target and returns its answer.
	send func(ctx context.Context, s *system, commandID, target string) (proto.Message, error)
	// target reads the command's target from its answer, for a command
	// that makes it.
	target func(answer proto.Message) string
	// done says whether the command reached its end; it fails the test
	// when the command failed.
	done func(t *testing.T, s *system, commandID, target string) bool
	// final: done reads the command itself final through the API (a
	// Workspace command), not only its target.
	final bool
	// starts is how many executions the node must have started for the
	// target (a Workspace) when the command ended; -1 for a Volume.
	starts int
	// cleanup removes what the command left, so the system stays small.
	cleanup func(t *testing.T, s *system, prefix, target string)
}

const (
	volumeBytes  = 16 << 20
	resizedBytes = 32 << 20
	layerBytes   = 64 << 20
	workspaceMiB = 128
	volumeMount  = "/data"
	noExecutions = -1
)

var scenarios = []scenario{
	{
		name: "CreateVolume",
		send: func(ctx context.Context, s *system, id, _ string) (proto.Message, error) {
			return unary(ctx, s.c.Volumes.CreateVolume, &ctrlv1.CreateVolumeRequest{Command: cmd(id), Spec: &ctrlv1.VolumeSpec{CapacityBytes: volumeBytes}})
		},
		target: func(m proto.Message) string { return m.(*ctrlv1.CreateVolumeResponse).GetVolume().GetVolumeId() },
		done:   volumeIs(ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE, volumeBytes),
		starts: noExecutions, cleanup: deleteVolume,
	},
	{
		name:  "ResizeVolume",
		setup: newVolume,
		send: func(ctx context.Context, s *system, id, volumeID string) (proto.Message, error) {
			return unary(ctx, s.c.Volumes.ResizeVolume, &ctrlv1.ResizeVolumeRequest{Command: cmd(id), VolumeId: volumeID, CapacityBytes: resizedBytes})
		},
		done:   volumeIs(ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE, resizedBytes),
		starts: noExecutions, cleanup: deleteVolume,
	},
	{
		name:  "MoveVolume",
		setup: newVolume,
		send: func(ctx context.Context, s *system, id, volumeID string) (proto.Message, error) {
			return unary(ctx, s.c.Nodes.MoveVolume, &operatorv1.MoveVolumeRequest{Command: cmd(id), VolumeId: volumeID, StoragePool: poolNames[1]})
		},
		done: func(t *testing.T, s *system, _, volumeID string) bool {
			o, err := s.c.Nodes.GetStoragePoolObject(context.Background(), connect.NewRequest(&operatorv1.GetStoragePoolObjectRequest{
				Object: &operatorv1.GetStoragePoolObjectRequest_VolumeId{VolumeId: volumeID},
			}))
			return err == nil && o.Msg.GetObject().GetStoragePool() == poolNames[1] && o.Msg.GetObject().GetMovingTo() == ""
		},
		starts: noExecutions, cleanup: deleteVolume,
	},
	createScenario("CreateWorkspace", ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW),
	// Without a Volume to make first, a create is placed and its
	// StartExecution recorded in its admission's transaction
	// (command.Effect.Begin): a crash right after it leaves the command
	// leased, RUNNING and sent to its node.
	createScenario("CreateWorkspaceWithoutVolume", ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE),
	{
		name: "StartWorkspace",
		setup: func(t *testing.T, s *system, prefix string) string {
			id := newWorkspace(t, s, prefix)
			if _, err := s.c.Workspaces.StopWorkspace(context.Background(), connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmd(prefix + "-stop"), WorkspaceId: id})); err != nil {
				t.Fatal(err)
			}
			waitWorkspaceCommand(t, s, prefix+"-stop", id, ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED)
			return id
		},
		send: func(ctx context.Context, s *system, id, workspaceID string) (proto.Message, error) {
			return unary(ctx, s.c.Workspaces.StartWorkspace, &ctrlv1.StartWorkspaceRequest{Command: cmd(id), WorkspaceId: workspaceID})
		},
		done:    workspaceCommandDone(ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE),
		final:   true,
		starts:  2, // the setup's create, and this start
		cleanup: deleteWorkspace,
	},
	{
		name:  "DeleteWorkspace",
		setup: newWorkspace,
		send: func(ctx context.Context, s *system, id, workspaceID string) (proto.Message, error) {
			return unary(ctx, s.c.Workspaces.DeleteWorkspace, &ctrlv1.DeleteWorkspaceRequest{Command: cmd(id), WorkspaceId: workspaceID})
		},
		done:   workspaceCommandDone(ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED),
		final:  true,
		starts: 1, // the setup's create
	},
}

// createScenario is a CreateWorkspace whose Volume binding is of mode
// (NEW: a new Volume; NONE: none).
func createScenario(name string, mode ctrlv1.WorkspaceVolumeMode) scenario {
	return scenario{
		name: name,
		send: func(ctx context.Context, s *system, id, _ string) (proto.Message, error) {
			req := createRequest(id)
			if mode == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE {
				req.Spec.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: mode}
			}
			return unary(ctx, s.c.Workspaces.CreateWorkspace, req)
		},
		target: func(m proto.Message) string {
			return m.(*ctrlv1.CreateWorkspaceResponse).GetWorkspace().GetWorkspaceId()
		},
		done:    workspaceCommandDone(ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE),
		final:   true,
		starts:  1,
		cleanup: deleteWorkspace,
	}
}

func cmd(id string) *ctrlv1.CommandMetadata { return &ctrlv1.CommandMetadata{CommandId: id} }

// unary calls a unary RPC and returns its response message.
func unary[Req, Res any](ctx context.Context, call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), req *Req) (proto.Message, error) {
	res, err := call(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return any(res.Msg).(proto.Message), nil
}

func createRequest(id string) *ctrlv1.CreateWorkspaceRequest {
	return &ctrlv1.CreateWorkspaceRequest{
		Command: cmd(id),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			// No CPU reserved: the Workspaces the walk leaves running
			// while it goes on never fill the node.
			Resources: &ctrlv1.ResourceRequest{MemoryBytes: workspaceMiB << 20, WritableLayerCapacityBytes: layerBytes},
			Volume: &ctrlv1.WorkspaceVolumeBinding{
				Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW, MountPath: volumeMount,
				NewVolume: &ctrlv1.VolumeSpec{CapacityBytes: volumeBytes},
			},
		},
	}
}

// newVolume makes an AVAILABLE Volume in the default pool.
func newVolume(t *testing.T, s *system, prefix string) string {
	t.Helper()
	res, err := s.c.Volumes.CreateVolume(context.Background(), connect.NewRequest(&ctrlv1.CreateVolumeRequest{
		Command: cmd(prefix + "-volume"), Spec: &ctrlv1.VolumeSpec{CapacityBytes: volumeBytes},
	}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetVolume().GetVolumeId()
	done := volumeIs(ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE, volumeBytes)
	testenv.WaitFor(t, "volume "+id+" AVAILABLE", func() bool { return done(t, s, "", id) })
	return id
}

// newWorkspace makes an AVAILABLE Workspace with a new Volume.
func newWorkspace(t *testing.T, s *system, prefix string) string {
	t.Helper()
	res, err := s.c.Workspaces.CreateWorkspace(context.Background(), connect.NewRequest(createRequest(prefix+"-create")))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	waitWorkspaceCommand(t, s, prefix+"-create", id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE)
	return id
}

func waitWorkspaceCommand(t *testing.T, s *system, commandID, workspaceID string, state ctrlv1.WorkspaceState) {
	t.Helper()
	done := workspaceCommandDone(state)
	testenv.WaitFor(t, "command "+commandID, func() bool { return done(t, s, commandID, workspaceID) })
}

func volumeIs(state ctrlv1.VolumeState, capacity uint64) func(t *testing.T, s *system, _, volumeID string) bool {
	return func(t *testing.T, s *system, _, volumeID string) bool {
		t.Helper()
		res, err := s.c.Volumes.GetVolume(context.Background(), connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: volumeID}))
		if err != nil {
			return false // ctrl restarting
		}
		v := res.Msg.GetVolume()
		if v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_FAILED {
			t.Fatalf("volume %s FAILED: %v", volumeID, v)
		}
		return v.GetState() == state && v.GetSpec().GetCapacityBytes() == capacity
	}
}

// workspaceCommandDone says whether the Workspace command succeeded,
// leaving the Workspace in state.
func workspaceCommandDone(state ctrlv1.WorkspaceState) func(t *testing.T, s *system, commandID, workspaceID string) bool {
	return func(t *testing.T, s *system, commandID, workspaceID string) bool {
		t.Helper()
		ctx := context.Background()
		res, err := s.c.Workspaces.GetWorkspaceCommand(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{CommandId: commandID}))
		if err != nil {
			return false
		}
		switch c := res.Msg.GetCommand(); c.GetState() {
		case ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED:
			t.Fatalf("command %s FAILED: %v", commandID, c.GetFailure())
		case ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED:
			w, err := s.c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: workspaceID}))
			if err != nil {
				return false
			}
			if got := w.Msg.GetWorkspace().GetState(); got != state {
				t.Fatalf("command %s SUCCEEDED leaving workspace %s %s, want %s", commandID, workspaceID, got, state)
			}
			return true
		}
		return false
	}
}

func deleteVolume(t *testing.T, s *system, prefix, volumeID string) {
	t.Helper()
	if _, err := s.c.Volumes.DeleteVolume(context.Background(), connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: cmd(prefix + "-delete"), VolumeId: volumeID})); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "volume "+volumeID+" DELETED", func() bool {
		res, err := s.c.Volumes.GetVolume(context.Background(), connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: volumeID}))
		return connect.CodeOf(err) == connect.CodeNotFound || err == nil && res.Msg.GetVolume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_DELETED
	})
}

func deleteWorkspace(t *testing.T, s *system, prefix, workspaceID string) {
	t.Helper()
	if _, err := s.c.Workspaces.DeleteWorkspace(context.Background(), connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: cmd(prefix + "-delete"), WorkspaceId: workspaceID})); err != nil {
		t.Fatal(err)
	}
	waitWorkspaceCommand(t, s, prefix+"-delete", workspaceID, ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED)
}
