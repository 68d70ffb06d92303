// Package vmtest is the conformance suite every VM provider passes, as
// storetest is for the stores: boot to the guest agent, disks by role,
// re-attach after an agent restart, kill, exit causes, sampling. It runs
// on QEMU (real microVMs, internal/node/vm/qemu) and on the fake
// (internal/node/vm/fake).
package vmtest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/usernet"
	"github.com/kibotos/kibotos/internal/node/vm"
)

// Env is what the suite boots, and how it drives a provider.
type Env struct {
	// Provider is the provider under test.
	Provider vm.Provider
	// Restarted is the provider a restarted agent has: a new one, which
	// must find p's VMs again from their run directories.
	Restarted func(p vm.Provider) vm.Provider
	// Kernel, Initrd and Root are the platform and the template root.
	Kernel, Initrd, Root string
	// RootFile is a path the template root has.
	RootFile string
	// NewDisk makes a fresh writable disk (a layer or a Volume) in dir.
	NewDisk func(t *testing.T, dir string) string
	// Reset makes inst's guest reset its machine.
	Reset func(t *testing.T, inst vm.Instance)
	// BootTimeout bounds a boot to the agent.
	BootTimeout time.Duration
}

// Run runs every case of the suite on env.
func Run(t *testing.T, env Env) {
	t.Run("BootsToItsAgent", func(t *testing.T) { t.Parallel(); bootsToItsAgent(t, env) })
	t.Run("DisksByRole", func(t *testing.T) { t.Parallel(); disksByRole(t, env) })
	t.Run("ReattachAfterAgentRestart", func(t *testing.T) { t.Parallel(); reattach(t, env) })
	t.Run("ExitCauses", func(t *testing.T) { t.Parallel(); exitCauses(t, env) })
}

const volumeMount = "/data"

// boot starts a VM with a template root, a fresh layer and a Volume.
func boot(t *testing.T, env Env, p vm.Provider, bootID string) (vm.Instance, vm.Spec) {
	t.Helper()
	dir := t.TempDir()
	att, err := usernet.New().Attach(context.Background(), bootID, netslot.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	spec := vm.Spec{
		RunDir: filepath.Join(dir, "run"), Kernel: env.Kernel, Initrd: env.Initrd, VCPUs: 1, MemoryMiB: 256,
		Disks: []vm.Disk{
			{Role: vm.TemplateRoot, Path: env.Root},
			{Role: vm.WritableLayer, Path: env.NewDisk(t, dir)},
			{Role: vm.Volume, Path: env.NewDisk(t, dir), MountPath: volumeMount},
		},
		Network: att, BootID: bootID, Hostname: "vmtest",
	}
	ctx, cancel := context.WithTimeout(context.Background(), env.BootTimeout)
	defer cancel()
	inst, err := p.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inst.Kill() })
	return inst, spec
}

func waitAgent(t *testing.T, env Env, inst vm.Instance) *guestv1.PingResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), env.BootTimeout)
	defer cancel()
	ping, err := inst.WaitAgent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ping
}

func waitExit(t *testing.T, env Env, inst vm.Instance, what string) vm.Exit {
	t.Helper()
	select {
	case <-inst.Exited():
		return inst.Exit()
	case <-time.After(env.BootTimeout):
		t.Fatalf("%s: the VM did not end", what)
	}
	return vm.Exit{}
}

// The guest agent answers with the boot id the spec gave; the provider
// advertises its capability and says how guest code runs; a running VM
// samples.
func bootsToItsAgent(t *testing.T, env Env) {
	p := env.Provider
	if err := p.Available(); err != nil {
		t.Fatalf("provider %s is not available: %v", p.Name(), err)
	}
	inst, _ := boot(t, env, p, "boot-vmtest-1")
	if ping := waitAgent(t, env, inst); ping.GetBootId() != "boot-vmtest-1" {
		t.Errorf("boot_id %q, want the spec's", ping.GetBootId())
	}
	caps := p.Capabilities()
	if len(caps) == 0 || caps[0] != capability.Provider(p.Name()) {
		t.Errorf("capabilities %v, want %s first", caps, capability.Provider(p.Name()))
	}
	if inst.Accel() == "" {
		t.Error("no accelerator reported")
	}
	select {
	case <-inst.Exited():
		t.Fatal("the VM ended by itself")
	default:
	}
	u, err := inst.Sample()
	if err != nil || u.MemoryBytes == 0 || u.CPUSeconds < 0 {
		t.Errorf("sample of a running VM: %+v %v, want memory resident", u, err)
	}
}

// The guest has the template root's files and the Volume at its mount
// path; nothing else is there.
func disksByRole(t *testing.T, env Env) {
	inst, _ := boot(t, env, env.Provider, "boot-vmtest-2")
	waitAgent(t, env, inst)
	agent := vm.Agent(inst)
	stat := func(path string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := agent.StatFile(ctx, connect.NewRequest(&guestv1.StatFileRequest{Request: &ctrlv1.StatFileRequest{Path: path, User: "root"}}))
		return err
	}
	for _, path := range []string{env.RootFile, volumeMount} {
		if err := stat(path); err != nil {
			t.Errorf("%s in the guest: %v", path, err)
		}
	}
	if err := stat("/kibotos-vmtest-absent"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("a path no disk has: %v, want not_found", err)
	}
}

// A restarted agent's provider takes the VM back from its run directory:
// the same VM, its agent answering; a killed VM comes back as ended.
func reattach(t *testing.T, env Env) {
	inst, spec := boot(t, env, env.Provider, "boot-vmtest-3")
	waitAgent(t, env, inst)
	inst.Release() // as an agent that exits does
	again, err := env.Restarted(env.Provider).Attach(spec.RunDir)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-again.Exited():
		t.Fatalf("the re-attached VM has ended: %+v", again.Exit())
	default:
	}
	if again.PID() != inst.PID() {
		t.Errorf("re-attached pid %d, want %d", again.PID(), inst.PID())
	}
	if ping := waitAgent(t, env, again); ping.GetBootId() != "boot-vmtest-3" {
		t.Errorf("the re-attached VM answers boot_id %q", ping.GetBootId())
	}
	if _, err := again.Sample(); err != nil {
		t.Errorf("sample of the re-attached VM: %v", err)
	}
	if err := again.Kill(); err != nil {
		t.Fatal(err)
	}
	if exit := waitExit(t, env, again, "kill"); exit.Cause != vm.Killed {
		t.Errorf("a killed VM ended as %v (%s), want killed", exit.Cause, exit.Detail)
	}
	dead, err := env.Restarted(env.Provider).Attach(spec.RunDir)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-dead.Exited():
	case <-time.After(env.BootTimeout):
		t.Error("attached a VM that was killed as running")
	}
	if _, err := env.Restarted(env.Provider).Attach(filepath.Join(t.TempDir(), "never")); err == nil {
		t.Error("attached a run directory that does not exist")
	}
}

// A guest that powers off ends as PowerOff; one that resets its machine
// comes back within the same instance, its agent answering again, and the
// reset is counted.
func exitCauses(t *testing.T, env Env) {
	off, _ := boot(t, env, env.Provider, "boot-vmtest-4")
	waitAgent(t, env, off)
	ctx, cancel := context.WithTimeout(context.Background(), env.BootTimeout)
	defer cancel()
	if _, err := vm.Agent(off).Shutdown(ctx, connect.NewRequest(&guestv1.ShutdownRequest{})); err != nil {
		t.Fatal(err)
	}
	if exit := waitExit(t, env, off, "power off"); exit.Cause != vm.PowerOff {
		t.Errorf("a guest that powered off ended as %v (%s)", exit.Cause, exit.Detail)
	}

	reset, _ := boot(t, env, env.Provider, "boot-vmtest-5")
	waitAgent(t, env, reset)
	if n, last := reset.Resets(); n != 0 || !last.IsZero() {
		t.Errorf("resets of a fresh guest: %d at %v", n, last)
	}
	before := time.Now()
	env.Reset(t, reset)
	deadline := time.Now().Add(env.BootTimeout)
	for n, _ := reset.Resets(); n == 0; n, _ = reset.Resets() {
		select {
		case <-reset.Exited():
			t.Fatalf("a guest that reset ended: %+v", reset.Exit())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the reset was never counted")
		}
	}
	if ping := waitAgent(t, env, reset); ping.GetBootId() != "boot-vmtest-5" {
		t.Errorf("the guest came back with boot_id %q", ping.GetBootId())
	}
	if n, last := reset.Resets(); n != 1 || last.Before(before) {
		t.Errorf("resets %d at %v, want 1 after %v", n, last, before)
	}
	select {
	case <-reset.Exited():
		t.Fatalf("a guest that reset ended: %+v", reset.Exit())
	default:
	}
}
