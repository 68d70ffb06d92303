package fake_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kibotos/kibotos/internal/node/vm"
	"github.com/kibotos/kibotos/internal/node/vm/fake"
	"github.com/kibotos/kibotos/internal/node/vm/vmtest"
)

// The fake passes the conformance suite the real providers pass, so the
// start pipeline's tests on it exercise the same contract.
func TestConformance(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root.txt")
	if err := os.WriteFile(root, []byte("/etc\n/etc/os-release\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vmtest.Run(t, vmtest.Env{
		Provider:  fake.New(),
		Restarted: func(p vm.Provider) vm.Provider { return p.(*fake.Provider).Restarted() },
		Kernel:    "vmlinux", Initrd: "initrd", Root: root, RootFile: "/etc/os-release",
		NewDisk: func(t *testing.T, dir string) string {
			f, err := os.CreateTemp(dir, "disk")
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			return f.Name()
		},
		Reset:       func(t *testing.T, inst vm.Instance) { inst.(*fake.Instance).Reset() },
		BootTimeout: 10 * time.Second,
	})
}
