package qemu_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
	"github.com/kibotos/kibotos/internal/testenv"
)

// layer makes a writable layer the way a node does: a sparse ext4 file.
func layer(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "layer.img")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	mkfs := "/sbin/mkfs.ext4"
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		mkfs = p
	}
	if out, err := exec.Command(mkfs, "-q", "-F", "-b", "4096", path).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v %s", err, out)
	}
	return path
}

func boot(t *testing.T, art *testenv.VMArtifacts) (*qemu.VM, qemu.Spec) {
	t.Helper()
	run := t.TempDir()
	spec := qemu.Spec{
		RunDir: run, Kernel: art.Kernel(), Initrd: art.Initrd(), VCPUs: 1, MemoryMiB: 256, Accel: qemu.TCG,
		Cmdline: "kibotos.root=/dev/vda kibotos.layer=/dev/vdb kibotos.boot_id=boot-test-1",
		Drives:  []qemu.Drive{{Path: art.Template.Path, ReadOnly: true}, {Path: layer(t, run)}},
	}
	vm, err := qemu.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vm.Kill() })
	return vm, spec
}

func execIn(t *testing.T, vm *qemu.VM, argv ...string) (string, int32) {
	t.Helper()
	return execAgent(t, vm.Agent(), argv...)
}

func execAgent(t *testing.T, agent guestv1connect.GuestAgentServiceClient, argv ...string) (string, int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := agent.Exec(ctx, connect.NewRequest(&guestv1.ExecRequest{Argv: argv}))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	code := int32(-100)
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *guestv1.ExecResponse_Output:
			out.Write(ev.Output.GetData())
		case *guestv1.ExecResponse_Exited:
			code = ev.Exited.GetExitCode()
		}
	}
	if err := stream.Err(); err != nil && err != io.EOF {
		t.Fatalf("exec %v: %v", argv, err)
	}
	return out.String(), code
}

// A real microVM: Debian's kernel, Kibotos's initramfs and agent, a busybox
// template root, a writable layer. TCG, as on every CI machine.
func TestMicroVMBootsToItsAgentAndRunsProcesses(t *testing.T) {
	art := testenv.BuildVMArtifacts(t)
	vm, _ := boot(t, art)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ping, err := vm.WaitAgent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ping.GetBootId() != "boot-test-1" {
		t.Errorf("boot_id %q, want the one the host gave", ping.GetBootId())
	}
	out, code := execIn(t, vm, "uname", "-r")
	if code != 0 || strings.TrimSpace(out) != art.Platform.KernelVersion {
		t.Errorf("uname -r in the guest: %q (exit %d), want %s", out, code, art.Platform.KernelVersion)
	}
	// The root is the template under the writable layer: writable, and the
	// template's own files are there.
	out, code = execIn(t, vm, "sh", "-c", "echo kept > /root/note && cat /root/note /etc/os-release")
	if code != 0 || !strings.Contains(out, "kept") || !strings.Contains(out, "Kibotos busybox") {
		t.Errorf("writing under /: %q (exit %d)", out, code)
	}
	if _, code := execIn(t, vm, "sh", "-c", "exit 7"); code != 7 {
		t.Errorf("exit status %d, want 7", code)
	}
}

// A node agent that restarts finds its VMs again: they run in their own
// session, and Attach re-reads their pid file.
func TestAttachFindsARunningVMAgain(t *testing.T) {
	art := testenv.BuildVMArtifacts(t)
	vm, spec := boot(t, art)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := vm.WaitAgent(ctx); err != nil {
		t.Fatal(err)
	}
	vm.Release() // as a node agent that exits does
	again, err := qemu.Attach(spec.RunDir)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Alive() || again.PID != vm.PID {
		t.Fatalf("attached %+v, want pid %d alive", again, vm.PID)
	}
	if _, err := again.WaitAgent(ctx); err != nil {
		t.Errorf("the re-attached VM's agent: %v", err)
	}
	if err := again.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := qemu.Attach(spec.RunDir); err == nil {
		t.Error("attached a VM that was killed")
	}
}
