package qemu_test

import (
	"context"
	"os"
	"testing"
	"time"

	"connectrpc.com/connect"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/node/vm"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
	"github.com/kibotos/kibotos/internal/node/vm/vmtest"
	"github.com/kibotos/kibotos/internal/testenv"
)

// QEMU passes the provider conformance suite on real microVMs.
func TestConformance(t *testing.T) {
	art := testenv.BuildVMArtifacts(t)
	vmtest.Run(t, vmtest.Env{
		Provider: qemu.New(nil),
		// The first provider probes KVM as a node does; the restarted one is
		// given the host's verdict.
		Restarted: func(vm.Provider) vm.Provider { return qemu.New(nil, qemu.WithAccel(testenv.Accel(t))) },
		Kernel:    art.Kernel(), Initrd: art.Initrd(), Root: art.Template.Path,
		RootFile: "/etc/os-release",
		NewDisk: func(t *testing.T, dir string) string {
			sub, err := os.MkdirTemp(dir, "disk")
			if err != nil {
				t.Fatal(err)
			}
			return layer(t, sub)
		},
		Reset: func(t *testing.T, inst vm.Instance) {
			// The guest's own reboot(2): the kernel restarts the machine.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			stream, err := vm.Agent(inst).Exec(ctx, connect.NewRequest(&guestv1.ExecRequest{Argv: []string{"reboot", "-f"}}))
			if err != nil {
				t.Fatal(err)
			}
			for stream.Receive() {
			}
			_ = stream.Close()
		},
		BootTimeout: 3 * time.Minute,
	})
}
