package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/node/blockfile"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/vm"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/template"
)

const (
	layerBytes = 256 * mib
	bootLimit  = 5 * time.Minute
	execLimit  = 10 * time.Minute
)

// artifacts are the default platform and the busybox template with the
// probe, built here as bench/workspaces builds them.
type artifacts struct {
	platform    *platform.Manifest
	platformDir string
	template    *template.Image
}

func (a *artifacts) kernel() string { return filepath.Join(a.platformDir, a.platform.Vmlinux) }
func (a *artifacts) initrd() string { return filepath.Join(a.platformDir, a.platform.Initramfs) }

// goBuild builds a static binary of pkg at out.
func goBuild(ctx context.Context, pkg, out string) error {
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v: %s", pkg, err, b)
	}
	return nil
}

func buildArtifacts(ctx context.Context, tmp string) (*artifacts, error) {
	progress("building kibotos-guest and the probe")
	guest, probe := filepath.Join(tmp, "kibotos-guest"), filepath.Join(tmp, "netprobe")
	if err := goBuild(ctx, "github.com/kibotos/kibotos/cmd/kibotos-guest", guest); err != nil {
		return nil, err
	}
	if err := goBuild(ctx, "github.com/kibotos/kibotos/bench/netslot/probe", probe); err != nil {
		return nil, err
	}
	cache := os.Getenv("KIBOTOS_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil, err
		}
		cache = filepath.Join(base, "kibotos")
	}
	deb, err := platform.DownloadDebianKernel(ctx, cache, nil)
	if err != nil {
		return nil, err
	}
	a := &artifacts{platformDir: filepath.Join(tmp, "platform")}
	if err := os.MkdirAll(a.platformDir, 0o755); err != nil {
		return nil, err
	}
	if a.platform, err = platform.Build(ctx, platform.BuildInput{KernelDeb: deb, GuestBinary: guest}, a.platformDir); err != nil {
		return nil, err
	}
	root := filepath.Join(tmp, "root")
	if err := template.BusyboxDir(busybox(), root); err != nil {
		return nil, fmt.Errorf("busybox template: %w (Debian package busybox-static)", err)
	}
	if err := copyFile(probe, filepath.Join(root, "bin", "netprobe")); err != nil {
		return nil, err
	}
	if a.template, err = template.FromDir(ctx, root, filepath.Join(tmp, "root.img")); err != nil {
		return nil, err
	}
	progress("platform: kernel %s; template root %d bytes", a.platform.KernelVersion, a.template.Size)
	return a, nil
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}

func busybox() string {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "busybox"
}

// chooseAccel is the node's own choice (a KVM boot probe) unless the flag
// forces one.
func chooseAccel(ctx context.Context, art *artifacts, c config) (qemu.Accel, string) {
	switch c.accel {
	case "tcg":
		return qemu.TCG, "forced by -accel"
	case "kvm":
		return qemu.KVM, "forced by -accel"
	}
	return qemu.ChooseAccel(ctx, qemu.Spec{Kernel: art.kernel(), Initrd: art.initrd(), MemoryMiB: c.memoryMiB})
}

// boot starts a VM of the template on att as the node's QEMU provider
// would (the same kernel command line, drives and network device), tells
// att it runs, and waits for its agent.
func boot(ctx context.Context, art *artifacts, tmp, name string, att netslot.Attachment, memoryMiB uint64, accel qemu.Accel) (*qemu.VM, error) {
	dir := filepath.Join(tmp, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	blocks, err := blockfile.New()
	if err != nil {
		return nil, err
	}
	ref := blockfile.Ref{PoolDir: dir, Kind: blockfile.WritableLayer, ObjectID: name}
	if _, err := blocks.Ensure(ctx, ref, layerBytes); err != nil {
		return nil, fmt.Errorf("writable layer: %w", err)
	}
	layer, err := ref.Path()
	if err != nil {
		return nil, err
	}
	spec := vm.Spec{
		Disks:   []vm.Disk{{Role: vm.TemplateRoot, Path: art.template.Path}, {Role: vm.WritableLayer, Path: layer}},
		Network: att, BootID: "bench-" + name,
	}
	qs := qemu.Spec{
		RunDir: filepath.Join(dir, "run"), Kernel: art.kernel(), Initrd: art.initrd(), VCPUs: 1, MemoryMiB: memoryMiB, Accel: accel,
		Cmdline: vm.GuestParams(spec, func(i int) string { return fmt.Sprintf("/dev/vd%c", 'a'+i) }),
		Drives:  []qemu.Drive{{Path: art.template.Path, ReadOnly: true}, {Path: layer}},
	}
	switch dev := att.Device(); {
	case dev.UserMode != nil:
		qs.Net = dev.UserMode
	case dev.Stream != nil:
		qs.NetStream = dev.Stream.Name
	}
	progress("booting the %s VM", name)
	v, err := qemu.Start(qs)
	if err != nil {
		return nil, err
	}
	att.Started(qs.RunDir)
	wctx, cancel := context.WithTimeout(ctx, bootLimit)
	defer cancel()
	if _, err := v.WaitAgent(wctx); err != nil {
		_ = v.Kill()
		return nil, fmt.Errorf("%w; console:\n%s", err, v.Console(20))
	}
	return v, nil
}

// execIn runs argv in the guest and returns its standard output; a failure
// or a non-zero exit is an error with what it wrote on standard error.
func execIn(ctx context.Context, v *qemu.VM, argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, execLimit)
	defer cancel()
	stream, err := v.Agent().Exec(ctx, connect.NewRequest(&guestv1.ExecRequest{Argv: argv}))
	if err != nil {
		return "", fmt.Errorf("exec %v: %w", argv, err)
	}
	defer stream.Close()
	var stdout, stderr strings.Builder
	code := int32(-100)
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *guestv1.ExecResponse_Output:
			if ev.Output.GetStream() == guestv1.ExecStream_EXEC_STREAM_STDERR {
				stderr.Write(ev.Output.GetData())
			} else {
				stdout.Write(ev.Output.GetData())
			}
		case *guestv1.ExecResponse_Exited:
			code = ev.Exited.GetExitCode()
		}
	}
	if err := stream.Err(); err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("exec %v: %w", argv, err)
	}
	if code != 0 {
		return "", fmt.Errorf("%v exited %d: %s", argv, code, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
