package qemu

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kibotos/kibotos/internal/node/fsutil"
)

// WithVerdictDir keeps the KVM probe's verdict in dir, named by what
// decides it (the host's boot and the QEMU binary): a provider made again
// on the same boot, as a node agent restarted, takes the kept verdict
// instead of probing. On a host whose KVM crawls (notes/vm-on-ci.md) that
// saves every restart's first start ProbeTimeout and a core. Only a
// settled verdict is kept: one a probe QEMU could not run for is not.
func WithVerdictDir(dir string) Option {
	return func(p *Provider) { p.verdictDir = dir }
}

// KeptAccel is the verdict kept in dir for this boot and the QEMU binary
// bin, or "" when there is none (or it cannot be read).
func KeptAccel(dir, bin string) Accel {
	key, err := verdictKey(bin)
	if err != nil {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(dir, key))
	if err != nil {
		return ""
	}
	a, err := ParseAccel(strings.TrimSpace(string(b)))
	if err != nil {
		return ""
	}
	return a
}

// KeepAccel keeps a as the verdict in dir for this boot and the QEMU
// binary bin. Two processes keeping theirs at once both write the host's
// answer; the file is replaced whole.
func KeepAccel(dir, bin string, a Accel) error {
	key, err := verdictKey(bin)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(dir, key, []byte(a), 0o644)
}

// verdictKey names a verdict by what decides it: the host's boot (KVM
// comes and goes with the host's own hypervisor and modules) and the QEMU
// binary (its path, size and time).
func verdictKey(bin string) (string, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(fmt.Appendf(nil, "%s\n%s\n%d\n%d", strings.TrimSpace(string(boot)), bin, fi.Size(), fi.ModTime().UnixNano()))
	return hex.EncodeToString(h[:8]), nil
}
