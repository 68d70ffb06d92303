package qemu_test

import (
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
