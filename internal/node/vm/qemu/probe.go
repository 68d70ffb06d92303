package qemu

import (
	"context"
	"fmt"
	"os"
	"time"
)

// ProbeTimeout bounds the KVM boot probe. A usable KVM boots the platform to
// its agent in well under a second; a crawling one (PVM without VT, see
// notes/vm-on-ci.md) shows no output for minutes.
const ProbeTimeout = 20 * time.Second

// ChooseAccel decides between KVM and TCG for this host by booting the
// platform under KVM and waiting for its agent: the mere presence of
// /dev/kvm proves nothing. It returns the choice and why.
func ChooseAccel(ctx context.Context, s Spec) (Accel, string) {
	a, why, _ := chooseAccel(ctx, s)
	return a, why
}

// chooseAccel is ChooseAccel, also saying whether the verdict is settled
// for this boot: KVM unusable, KVM booting the platform, or KVM running it
// without an answer for ProbeTimeout. A probe QEMU could not run for (no
// run directory, QEMU failing or exiting early) or that ctx cut short is
// not: TCG is only its fallback.
func chooseAccel(ctx context.Context, s Spec) (accel Accel, why string, settled bool) {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return TCG, fmt.Sprintf("KVM is not usable (%v): software emulation (TCG)", err), true
	}
	f.Close()
	dir, err := os.MkdirTemp("", "kibotos-kvm-probe")
	if err != nil {
		return TCG, fmt.Sprintf("KVM probe: %v: software emulation (TCG)", err), false
	}
	defer os.RemoveAll(dir)
	s.RunDir, s.Accel, s.Drives, s.DiesWithAgent = dir, KVM, nil, true
	if s.MemoryMiB == 0 {
		s.MemoryMiB = 256
	}
	vm, err := Start(s)
	if err != nil {
		return TCG, fmt.Sprintf("KVM probe could not start QEMU (%v): software emulation (TCG)", err), false
	}
	defer vm.Kill()
	probe, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	start := time.Now()
	if _, err := vm.WaitAgent(probe); err != nil {
		if probe.Err() == nil || ctx.Err() != nil {
			return TCG, fmt.Sprintf("KVM probe: %v: software emulation (TCG)", err), false
		}
		return TCG, fmt.Sprintf("KVM did not boot the platform to its agent within %s: software emulation (TCG)", ProbeTimeout), true
	}
	return KVM, fmt.Sprintf("KVM booted the platform to its agent in %s", time.Since(start).Round(time.Millisecond)), true
}
