package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kibotos/kibotos/internal/node/vm/qemu"
)

var (
	accelOnce sync.Once
	accel     qemu.Accel
	accelErr  error
)

// Accel is the accelerator the node's KVM probe (qemu.ChooseAccel) picks on
// this host (HostAccel); test nodes are given it (qemu.WithAccel).
func Accel(t testing.TB) qemu.Accel {
	t.Helper()
	a, err := HostAccel()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// HostAccel probes once and keeps the verdict in the cache directory for
// as long as the host's boot and its QEMU binary stay the same, so that
// test binaries and the nodes they start (KIBOTOS_ACCEL for `kibotos node`
// and `kibotos dev`) do not each pay the probe: on a host whose KVM crawls
// (notes/vm-on-ci.md) it costs every first start 20 s and a core. The
// verdict is the probe's own, made with the test platform; the provider's
// own tests probe as a node does.
func HostAccel() (qemu.Accel, error) {
	accelOnce.Do(func() {
		cache, err := cacheDir()
		if err != nil {
			accelErr = err
			return
		}
		accel, accelErr = cachedAccel(cache)
	})
	return accel, accelErr
}

// cachedAccel reads the kept verdict for this boot and QEMU binary, or
// probes with the test platform (built only then) and keeps it, as a node
// with a verdict directory does (qemu.WithVerdictDir).
func cachedAccel(cache string) (qemu.Accel, error) {
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", fmt.Errorf("QEMU is not installed: %w", err)
	}
	dir := filepath.Join(cache, "accel")
	if a := qemu.KeptAccel(dir, bin); a != "" {
		return a, nil
	}
	art, err := vmArtifacts(cache)
	if err != nil {
		return "", err
	}
	a, _ := qemu.ChooseAccel(context.Background(), qemu.Spec{Binary: bin, Kernel: art.Kernel(), Initrd: art.Initrd(), VCPUs: 1})
	return a, qemu.KeepAccel(dir, bin, a)
}
