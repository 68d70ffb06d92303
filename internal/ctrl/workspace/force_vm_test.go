package workspace_test

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/testenv"
)

// "Force stop recovers a guest that does not [answer]", on a real VM: its
// QEMU process frozen (SIGSTOP), a NORMAL stop waits for the guest; a
// FORCE stop sent meanwhile takes its place, and the Workspace is STOPPED
// by it (last_stop forced, its durability unconfirmed) well within the
// NORMAL stop's own timeout of 60 s. The NORMAL stop failed as cancelled.
func TestAForceStopRecoversAGuestThatDoesNotAnswer(t *testing.T) {
	e := newVMEnv(t)
	id := e.create("create-1", &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}).GetWorkspaceId()
	runDirs, _ := filepath.Glob(filepath.Join(e.node.StateDir, "executions", id+".*"))
	if len(runDirs) != 1 {
		t.Fatalf("executions of %s: %v, want one", id, runDirs)
	}
	pid := testenv.VMProcess(runDirs[0])
	if pid == 0 {
		t.Fatal("no QEMU process runs the Workspace")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

	if _, err := e.c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmd("stop-normal"), WorkspaceId: id})); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Workspaces.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{
		Command: cmd("stop-force"), WorkspaceId: id, Mode: ctrlv1.StopMode_STOP_MODE_FORCE,
	})); err != nil {
		t.Fatalf("a FORCE stop while a NORMAL one waits for the guest: %v", err)
	}
	// Half the NORMAL stop's timeout, which alone would end it at 60 s.
	res, err := e.c.Workspaces.WaitWorkspace(ctx, connect.NewRequest(&ctrlv1.WaitWorkspaceRequest{
		WorkspaceId: id, CommandId: "stop-force", Timeout: durationpb.New(30 * time.Second),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Msg.GetCommand(); c.GetState() != ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED {
		t.Fatalf("the FORCE stop within 30 s: %v (%v)", c.GetState(), c.GetFailure())
	}
	w := res.Msg.GetWorkspace()
	if last := w.GetLastStop(); w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED || last.GetCommandId() != "stop-force" || !last.GetForce() ||
		last.GetDurability() != ctrlv1.StopDurability_STOP_DURABILITY_UNCONFIRMED {
		t.Errorf("after the FORCE stop: %v, last_stop %v; want STOPPED by stop-force, forced, unconfirmed", w.GetState(), last)
	}
	normal, err := e.c.Workspaces.GetWorkspaceCommand(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{CommandId: "stop-normal"}))
	if err != nil {
		t.Fatal(err)
	}
	if f := normal.Msg.GetCommand().GetFailure(); f.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_CANCELLED {
		t.Errorf("the NORMAL stop: %v, want failed as cancelled", normal.Msg.GetCommand())
	}
	if testenv.VMProcess(runDirs[0]) != 0 {
		t.Error("the QEMU process still runs after the FORCE stop")
	}
}
