package qemu_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
)

func TestArgsDescribeTheMicroVM(t *testing.T) {
	args := qemu.Args(qemu.Spec{
		RunDir: "/run/x", Kernel: "/p/vmlinux", Initrd: "/p/initrd", Cmdline: "kibotos.root=/dev/vda",
		VCPUs: 2, MemoryMiB: 512, Accel: qemu.TCG,
		Drives: []qemu.Drive{{Path: "/t/root.img", ReadOnly: true}, {Path: "/l/layer.img"}},
		Net:    &netslot.UserMode{Network: netip.MustParsePrefix("10.0.2.0/24"), Isolated: true},
	})
	line := strings.Join(args, " ")
	for _, want := range []string{
		"-M microvm", "-accel tcg", "-smp 2", "-m 512", "-kernel /p/vmlinux", "-initrd /p/initrd",
		"id=vda,file=/t/root.img,format=raw,if=none,cache=none,aio=threads,readonly=on",
		"id=vdb,file=/l/layer.img,format=raw,if=none,cache=none,aio=threads -device virtio-blk-device,drive=vdb",
		"virtserialport,chardev=agent,name=kibotos.agent", "path=agent.sock", "-pidfile /run/x/qemu.pid",
		"-netdev user,id=net0,restrict=on,net=10.0.2.0/24 -device virtio-net-device,netdev=net0",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("missing %q in\n%s", want, line)
		}
	}
	appendArg := args[slices.Index(args, "-append")+1]
	if !strings.HasPrefix(appendArg, "console=ttyS0") || !strings.HasSuffix(appendArg, "kibotos.root=/dev/vda") {
		t.Errorf("kernel command line %q", appendArg)
	}
	if strings.Contains(line, "-no-reboot") {
		t.Error("-no-reboot: a guest reset would end the execution")
	}
	if strings.Contains(line, "-cpu host") {
		t.Error("-cpu host is for KVM only")
	}
}

// A stream device: QEMU listens on the socket named in the run directory
// (relative, as the agent's), and no user-mode network is made.
func TestArgsCarryTheGuestsFramesOnAStreamSocket(t *testing.T) {
	line := strings.Join(qemu.Args(qemu.Spec{RunDir: "/run/x", Kernel: "/k", NetStream: "net.sock"}), " ")
	if want := "-netdev stream,id=net0,server=on,addr.type=unix,addr.path=net.sock -device virtio-net-device,netdev=net0"; !strings.Contains(line, want) {
		t.Errorf("missing %q in\n%s", want, line)
	}
	if strings.Contains(line, "-netdev user") {
		t.Errorf("a user-mode network beside the stream:\n%s", line)
	}
}
