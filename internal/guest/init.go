package guest

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kibotos/kibotos/internal/guestchan"
)

// LogPrefix starts every line the guest writes to its console.
const LogPrefix = "kibotos-guest: "

// Bounds of the waits at boot: there is no udev, so the guest polls for
// device nodes that devtmpfs makes as drivers find their devices.
const (
	DeviceTimeout = 10 * time.Second
	PortTimeout   = 15 * time.Second
	// StopGrace is how long processes have between SIGTERM and SIGKILL at
	// shutdown.
	StopGrace = 5 * time.Second
)

// System is the guest machine as PID 1 set it up: what it mounted, and how
// to leave the new root to unmount it. It implements Machine.
type System struct {
	Log *log.Logger

	pid1    bool
	grace   time.Duration
	stop    func()
	table   MountTable
	oldRoot *os.File // the initramfs root, held to leave the chroot at shutdown

	shutdownOnce sync.Once
	shutdown     ShutdownResult
	down         atomic.Bool // shutting down: the port going away is expected
	powerOnce    sync.Once
}

var _ Machine = (*System)(nil)

// Standalone is a System for an agent that is not PID 1: it mounts nothing,
// and its PowerOff calls stop (which should end the agent) instead.
func Standalone(logger *log.Logger, stop func()) *System {
	return &System{Log: logger, stop: stop}
}

// KernelBootID reads the kernel's boot id from procDir (/proc).
func KernelBootID(procDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(procDir, "sys/kernel/random/boot_id"))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// RunStandalone runs the agent outside PID 1 on port (see Serve) until ctx
// ends or a Shutdown call ends it. An empty bootID is the kernel's.
func RunStandalone(ctx context.Context, port, bootID, version string, logger *log.Logger) error {
	if bootID == "" {
		id, err := KernelBootID("/proc")
		if err != nil {
			return fmt.Errorf("boot id: %w", err)
		}
		bootID = id
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reaper := NewReaper()
	go reaper.Run(ctx)
	agent := &Agent{BootID: bootID, Version: version, Reaper: reaper, Machine: Standalone(logger, cancel),
		Sampler: startSampler(ctx, []string{"/", "/tmp", "/run"}, logger)}
	logger.Printf("agent %s serving on %s (boot id %s)", version, port, bootID)
	return Serve(ctx, port, agent.Handler(), func(err error) { logger.Printf("%v", err) })
}

// RunInit is PID 1: it prepares the machine, serves the agent on its port
// and never returns. A boot that cannot give the Workspace its storage or
// its agent powers the machine off, saying why on the console.
func RunInit(version string) {
	s := &System{Log: log.New(os.Stderr, LogPrefix, 0), pid1: true, grace: StopGrace}
	// PID 1 receives only the signals it has handlers for, and the Go
	// runtime's default for most is to exit, which would panic the kernel:
	// take them all.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	reaper := NewReaper()
	go reaper.Run(context.Background())
	go s.handleSignals(sigs)

	port, bootID, cfg, err := s.boot()
	if err != nil {
		s.PowerOff(fmt.Sprintf("boot failed: %v", err))
	}
	memory := &MemoryWatch{ProcDir: "/proc", Logf: s.Log.Printf}
	go func() {
		if err := memory.Run(context.Background()); err != nil {
			s.Log.Printf("memory watch: %v", err)
		}
	}()
	agent := &Agent{BootID: bootID, Version: version, Reaper: reaper, Machine: s, Memory: memory,
		Sampler: startSampler(context.Background(), SampledPaths(cfg), s.Log)}
	s.Log.Printf("agent %s serving on %s (boot id %s)", version, port, bootID)
	_ = Serve(context.Background(), port, agent.Handler(), func(err error) {
		if !s.down.Load() {
			s.Log.Printf("%v", err)
		}
	})
	s.PowerOff("the agent stopped serving")
}

func (s *System) handleSignals(sigs <-chan os.Signal) {
	for sig := range sigs {
		switch sig {
		case unix.SIGTERM, unix.SIGINT:
			go s.PowerOff(fmt.Sprintf("signal %v", sig))
		case unix.SIGCHLD, unix.SIGURG, unix.SIGPIPE, unix.SIGWINCH:
			// The reaper has its own SIGCHLD; SIGURG is the runtime's.
		default:
			s.Log.Printf("ignoring signal %v", sig)
		}
	}
}

// startSampler starts the CPU watch the sampler reads, from now until ctx
// ends; a /proc it cannot read leaves the agent without one (Sample then
// answers unimplemented), which is not worth failing a boot for.
func startSampler(ctx context.Context, paths []string, logger *log.Logger) *Sampler {
	cpu, err := NewCPUWatch("/proc", time.Now())
	if err != nil {
		logger.Printf("cpu watch: %v", err)
		return nil
	}
	go cpu.Run(ctx)
	return &Sampler{ProcDir: "/proc", CPU: cpu, Paths: paths}
}

// SampledPaths are the filesystems a Sample reports, in MetricsFilesystem's
// order: "/" (the writable layer), the Volume's mount path, "/tmp" and
// "/run". The sampler skips those that are not mount points.
func SampledPaths(cfg Config) []string {
	paths := []string{"/"}
	if cfg.Volume != nil {
		paths = append(paths, cfg.Volume.Path)
	}
	return append(paths, "/tmp", "/run")
}

// boot runs PID 1's steps and returns the agent's port, the boot id and
// the configuration it booted with.
func (s *System) boot() (port, bootID string, cfg Config, err error) {
	ctx := context.Background()
	s.Log.Printf("mounting /dev, /proc, /sys")
	for _, m := range PseudoMounts() {
		if err := s.table.mount(m); err != nil && !mountedAlready(err) {
			s.Log.Printf("%v", err)
		}
		if m.Target == "/dev" {
			// The kernel's console, whatever the initramfs carries.
			if c, err := os.OpenFile("/dev/console", os.O_WRONLY|unix.O_NOCTTY, 0); err == nil {
				s.Log.SetOutput(c)
			}
		}
	}
	// Ctrl-Alt-Del becomes a SIGINT to PID 1 (a clean power-off) rather
	// than an immediate reboot.
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF); err != nil {
		s.Log.Printf("ctrl-alt-del off: %v", err)
	}

	raw, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		s.Log.Printf("kernel command line: %v", err)
	}
	cfg, cfgErr := ParseCmdline(string(raw))

	s.loadModules(cfg.Params)

	if cfgErr != nil {
		s.Log.Printf("kernel command line: %v", strings.ReplaceAll(cfgErr.Error(), "\n", "; "))
	}
	s.Log.Printf("config: %s", describe(cfg))
	if err := s.mountStorage(ctx, cfg); err != nil {
		return "", "", cfg, err
	}
	if err := loopbackUp(); err != nil {
		s.Log.Printf("loopback: %v", err)
	}
	s.setUpNetwork(ctx, cfg)
	if cfg.Hostname != "" {
		if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
			s.Log.Printf("host name: %v", err)
		}
	}

	bootID = cfg.BootID
	if bootID == "" {
		if bootID, err = KernelBootID("/proc"); err != nil {
			return "", "", cfg, fmt.Errorf("boot id: %w", err)
		}
	}
	s.Log.Printf("waiting for the virtio-serial port %q", guestchan.PortName)
	port, err = WaitPort(ctx, "/sys", "/dev", guestchan.PortName, PortTimeout)
	if err != nil {
		return "", "", cfg, err
	}
	return port, bootID, cfg, nil
}

func describe(cfg Config) string {
	var parts []string
	if cfg.SwitchesRoot() {
		parts = append(parts, fmt.Sprintf("root %s (%s, read-only) + layer %s", cfg.Root, cfg.RootFSType, cfg.Layer))
	} else {
		parts = append(parts, "no root/layer: staying in the initramfs")
	}
	if cfg.Volume != nil {
		parts = append(parts, fmt.Sprintf("volume %s at %s", cfg.Volume.Device, cfg.Volume.Path))
	}
	if cfg.BootID != "" {
		parts = append(parts, "boot id "+cfg.BootID)
	}
	return strings.Join(parts, ", ")
}

func (s *System) loadModules(cmdline []Param) {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	release := unix.ByteSliceToString(uts.Release[:])
	start := time.Now()
	results, err := LoadModules(ModulesDir, release, cmdline)
	if errors.Is(err, os.ErrNotExist) {
		s.Log.Printf("modules: no %s/%s; loading none", ModulesDir, ModuleOrderFile)
		return
	}
	if err != nil {
		s.Log.Printf("modules: %v", err)
		return
	}
	loaded, already, failed := 0, 0, 0
	for _, r := range results {
		switch {
		case r.Err != nil:
			failed++
			s.Log.Printf("module %s: %v", r.Name, r.Err)
		case r.AlreadyLoaded:
			already++
		default:
			loaded++
		}
	}
	s.Log.Printf("modules: %d loaded, %d already loaded, %d failed (%s)", loaded, already, failed, time.Since(start).Round(time.Millisecond))
}

// mountStorage mounts the root, layer, overlay and Volume and changes root
// into the overlay, as cfg says.
func (s *System) mountStorage(ctx context.Context, cfg Config) error {
	mounts := StorageMounts(cfg)
	if len(mounts) == 0 {
		return nil
	}
	devs := StorageDevices(cfg)
	s.Log.Printf("waiting for %s", strings.Join(devs, ", "))
	if err := WaitForBlockDevices(ctx, devs, DeviceTimeout); err != nil {
		return err
	}
	for _, m := range mounts {
		s.Log.Printf("mount %s", m)
		if err := s.table.mount(m); err != nil {
			return err
		}
	}
	if !cfg.SwitchesRoot() {
		return nil
	}
	for _, p := range MovedIntoNewRoot {
		if err := s.table.move(p, NewRoot+p); err != nil {
			return err
		}
	}
	old, err := os.Open("/")
	if err != nil {
		return err
	}
	if err := unix.Chdir(NewRoot); err != nil {
		old.Close()
		return err
	}
	if err := unix.Chroot("."); err != nil {
		old.Close()
		return fmt.Errorf("chroot %s: %w", NewRoot, err)
	}
	_ = unix.Chdir("/")
	s.oldRoot = old
	s.Log.Printf("changed root to %s", NewRoot)
	return nil
}

// setUpNetwork configures eth0 as cfg.Net and cfg.Net6 say. A network
// that cannot be set up is logged, not fatal: the agent runs over
// virtio-serial, so the Workspace stays usable and says why on its
// console. Each family is set up even when the other fails.
func (s *System) setUpNetwork(ctx context.Context, cfg Config) {
	if cfg.Net == nil && cfg.Net6 == nil {
		return
	}
	if err := WaitForInterface(ctx, "/sys", NetInterface, DeviceTimeout); err != nil {
		s.Log.Printf("network: %v", err)
		return
	}
	if cfg.Net != nil {
		s.setUpIPv4(*cfg.Net)
	}
	if cfg.Net6 != nil {
		s.setUpIPv6(*cfg.Net6)
	}
	if cfg.Net != nil {
		s.setUpNameserver(cfg.Net.DNS, cfg.DNSUnreachable)
	}
}

func (s *System) setUpIPv4(n NetConfig) {
	if err := ConfigureNetwork(NetInterface, n); err != nil {
		s.Log.Printf("network: %v", err)
		return
	}
	s.Log.Printf("network: %s %s via %s", NetInterface, n.Address, n.Gateway)
}

// setUpNameserver makes dns the guest's only nameserver, once both
// families are up (it may be IPv6). A link-local one is scoped to eth0:
// without its interface the address means nothing.
func (s *System) setUpNameserver(dns netip.Addr, unreachable bool) {
	if dns.IsLinkLocalUnicast() {
		dns = dns.WithZone(NetInterface)
	}
	if err := WriteResolvConf("/", dns); err != nil {
		s.Log.Printf("network: nameserver: %v", err)
	}
	if unreachable {
		if err := AddUnreachableRoute(dns.WithZone("")); err != nil {
			s.Log.Printf("network: %v", err)
		}
	}
	s.Log.Printf("network: nameserver %s", dns)
}

func (s *System) setUpIPv6(n Net6Config) {
	if err := ConfigureNetwork6(NetInterface, n); err != nil {
		s.Log.Printf("network: IPv6: %v", err)
		return
	}
	s.Log.Printf("network: %s %s via %s", NetInterface, n.Address, n.Gateway)
}
