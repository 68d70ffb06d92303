package qemu_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
)

// An accelerator the operator sets is offered from the start, with no
// probe; without one the provider offers none until its probe chose.
func TestAnAcceleratorSetIsOfferedWithoutAProbe(t *testing.T) {
	for accel, want := range map[qemu.Accel]string{qemu.TCG: capability.AccelTCG, qemu.KVM: capability.AccelKVM} {
		caps := qemu.New(nil, qemu.WithAccel(accel)).Capabilities()
		if !slices.Contains(caps, want) || !slices.Contains(caps, capability.QEMU) {
			t.Errorf("WithAccel(%s): capabilities %v, want %s and %s", accel, caps, capability.QEMU, want)
		}
	}
	for _, p := range []*qemu.Provider{qemu.New(nil), qemu.New(nil, qemu.WithAccel(""))} {
		if caps := p.Capabilities(); slices.Contains(caps, capability.AccelTCG) || slices.Contains(caps, capability.AccelKVM) {
			t.Errorf("a provider that has not probed offers %v", caps)
		}
	}
}

func TestParseAccel(t *testing.T) {
	for in, want := range map[string]qemu.Accel{"": "", "auto": "", "kvm": qemu.KVM, "TCG": qemu.TCG} {
		if got, err := qemu.ParseAccel(in); err != nil || got != want {
			t.Errorf("ParseAccel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := qemu.ParseAccel("hvf"); err == nil {
		t.Error("ParseAccel(hvf) succeeded")
	}
}

// A verdict kept on this boot for this QEMU binary is taken instead of a
// probe; one kept for another binary is not.
func TestAKeptVerdictIsTakenWithoutAProbe(t *testing.T) {
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatalf("QEMU is not installed: %v", err)
	}
	dir := t.TempDir()
	if got := qemu.KeptAccel(dir, bin); got != "" {
		t.Fatalf("an empty directory keeps %q", got)
	}
	if err := qemu.KeepAccel(dir, bin, qemu.KVM); err != nil {
		t.Fatal(err)
	}
	if got := qemu.KeptAccel(dir, bin); got != qemu.KVM {
		t.Errorf("kept %q, want kvm", got)
	}
	other := filepath.Join(t.TempDir(), "qemu-system-x86_64")
	if err := os.WriteFile(other, []byte("another build"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := qemu.KeptAccel(dir, other); got != "" {
		t.Errorf("another QEMU binary takes the verdict %q", got)
	}
	// The platform does not exist: a probe could only ever fall back to
	// TCG, so KVM offered proves the kept verdict was taken.
	p := qemu.New(nil, qemu.WithVerdictDir(dir))
	if err := p.Prepare(context.Background(), "/nonexistent/vmlinuz", "/nonexistent/initrd"); err != nil {
		t.Fatal(err)
	}
	if caps := p.Capabilities(); !slices.Contains(caps, capability.AccelKVM) {
		t.Errorf("capabilities %v, want %s from the kept verdict", caps, capability.AccelKVM)
	}
}

// A probe QEMU could not run for keeps no verdict, so the next start
// probes again; a host without a usable /dev/kvm keeps TCG.
func TestOnlyASettledVerdictIsKept(t *testing.T) {
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatalf("QEMU is not installed: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "accel")
	p := qemu.New(nil, qemu.WithVerdictDir(dir))
	if err := p.Prepare(context.Background(), "/nonexistent/vmlinuz", "/nonexistent/initrd"); err != nil {
		t.Fatal(err)
	}
	if caps := p.Capabilities(); !slices.Contains(caps, capability.AccelTCG) {
		t.Errorf("capabilities %v after a probe without a platform, want %s", caps, capability.AccelTCG)
	}
	want := qemu.Accel("") // QEMU could not boot a platform that is not there
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err != nil {
		want = qemu.TCG // settled before QEMU is needed
	} else {
		f.Close()
	}
	if got := qemu.KeptAccel(dir, bin); got != want {
		t.Errorf("kept %q, want %q", got, want)
	}
}
