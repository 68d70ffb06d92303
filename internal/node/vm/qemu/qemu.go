// Package qemu runs executions as QEMU microVMs: `qemu-system-x86_64 -M
// microvm`, the platform's kernel booted directly, virtio block devices for
// the template root, the writable layer and the Volume, and a virtio-serial
// port for the guest agent (internal/guestchan).
//
// A VM is a process of its own session: killing the node agent never kills
// a Workspace. Each execution has a run directory holding QEMU's pid file,
// the agent socket and the console log, from which a restarted node agent
// re-attaches (Attach).
package qemu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/procfs"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/internal/guestchan"
	"github.com/kibotos/kibotos/internal/node/netslot"
)

// Accel is how QEMU executes guest code.
type Accel string

const (
	// KVM is hardware virtualisation, used only where a boot probe shows it
	// is usable and fast.
	KVM Accel = "kvm"
	// TCG is QEMU's software emulation: slower, available everywhere.
	TCG Accel = "tcg"
)

// Drive is one virtio block device, in the order the guest sees them
// (vda, vdb, vdc).
type Drive struct {
	Path     string
	ReadOnly bool
}

// Spec is one VM to run.
type Spec struct {
	// RunDir is the execution's directory: pid file, agent socket, console.
	RunDir  string
	Binary  string // qemu-system-x86_64; empty looks it up in PATH
	Kernel  string // an uncompressed vmlinux (PVH entry)
	Initrd  string
	Cmdline string // appended to the base kernel command line
	VCPUs   int
	// MemoryMiB is guest RAM, exactly what the Workspace asked for.
	MemoryMiB uint64
	Drives    []Drive
	Accel     Accel
	// Net is the guest's network device on QEMU's user-mode network, or
	// NetStream (a socket file name in RunDir) the one QEMU carries over a
	// stream socket it listens on; neither gives the guest no network
	// device.
	Net       *netslot.UserMode
	NetStream string
	// DiesWithAgent kills the VM when the process that started it dies,
	// however it dies. Only the KVM boot probe asks for it: a Workspace's
	// VM outlives its agent, but a probe left by an agent killed while
	// probing would run on with nobody to stop it.
	DiesWithAgent bool
}

// Files in a run directory.
const (
	pidFile     = "qemu.pid"
	agentSocket = "agent.sock"
	consoleLog  = "console.log"
	stderrFile  = "qemu.stderr"
)

// baseCmdline makes the guest quiet, send its console to the serial port,
// reset by triple fault and at once on a panic, account memory pressure (Debian's kernel
// has PSI off unless asked: the guest's memory watch reads it), and skip
// the TSC calibration that hangs under load on these hosts
// (notes/vm-on-ci.md).
func baseCmdline() string {
	args := []string{"console=ttyS0", "reboot=t", "panic=-1", "quiet", "loglevel=4", "psi=1"}
	if khz := hostKHz(); khz > 0 {
		args = append(args, fmt.Sprintf("tsc_early_khz=%d", khz))
	}
	return strings.Join(args, " ")
}

// hostKHz reads the host CPU frequency, or 0.
func hostKHz() int {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(mhz * 1000)
			}
		}
	}
	return 0
}

// Args is QEMU's command line for s.
func Args(s Spec) []string {
	accel := s.Accel
	if accel == "" {
		accel = TCG
	}
	args := []string{
		"-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on",
		"-accel", string(accel),
		"-smp", strconv.Itoa(max(s.VCPUs, 1)),
		"-m", strconv.FormatUint(s.MemoryMiB, 10),
		// No -no-reboot: a guest that resets its machine restarts within
		// the same QEMU, the same execution (the provider counts resets
		// from the console, and kills a guest whose kernel panicked).
		"-nodefaults", "-no-user-config", "-nographic",
		"-kernel", s.Kernel,
		"-append", strings.TrimSpace(baseCmdline() + " " + s.Cmdline),
		"-serial", "file:" + filepath.Join(s.RunDir, consoleLog),
		"-pidfile", filepath.Join(s.RunDir, pidFile),
	}
	if accel == KVM {
		args = append(args, "-cpu", "host")
	}
	if s.Initrd != "" {
		args = append(args, "-initrd", s.Initrd)
	}
	for i, d := range s.Drives {
		id := fmt.Sprintf("vd%c", 'a'+i)
		opt := fmt.Sprintf("id=%s,file=%s,format=raw,if=none,cache=none,aio=threads", id, d.Path)
		if d.ReadOnly {
			opt += ",readonly=on"
		}
		args = append(args, "-drive", opt, "-device", "virtio-blk-device,drive="+id)
	}
	if n := s.Net; n != nil {
		// The guest's network device: QEMU's user-mode network, with no
		// root needed. restrict=on keeps every packet inside: slirp would
		// otherwise forward the gateway address to the host's own
		// loopback (ctrl's endpoints), which no network policy may reach.
		netdev := "user,id=net0,net=" + n.Network.String()
		if n.Isolated {
			netdev = "user,id=net0,restrict=on,net=" + n.Network.String()
		}
		args = append(args, "-netdev", netdev, "-device", "virtio-net-device,netdev=net0")
	}
	if s.NetStream != "" {
		// QEMU listens and the node connects: after an agent restart the
		// node connects again (QEMU's stream server listens anew when its
		// client goes). Relative, as the agent socket is.
		args = append(args, "-netdev", "stream,id=net0,server=on,addr.type=unix,addr.path="+s.NetStream,
			"-device", "virtio-net-device,netdev=net0")
	}
	return append(args,
		"-device", "virtio-serial-device",
		// Relative to QEMU's working directory, the run directory: a unix
		// socket path is limited to 107 bytes, and run directories nest.
		"-chardev", fmt.Sprintf("socket,id=agent,path=%s,server=on,wait=off", agentSocket),
		"-device", "virtserialport,chardev=agent,name="+guestchan.PortName,
	)
}

// VM is a running QEMU process.
type VM struct {
	RunDir string
	PID    int
	cmd    *exec.Cmd // nil for a re-attached VM
	exited chan struct{}
	err    error

	// QEMU's chardev socket takes one connection at a time, so every call
	// to the agent shares one HTTP/2 connection.
	httpOnce sync.Once
	http     *http.Client
	runDirFD *os.File // keeps a /proc/self/fd path to the socket valid
}

// Start launches s in its own session, so the VM outlives this process.
func Start(s Spec) (*VM, error) {
	if err := os.MkdirAll(s.RunDir, 0o700); err != nil {
		return nil, err
	}
	bin := s.Binary
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("qemu-system-x86_64"); err != nil {
			return nil, fmt.Errorf("QEMU is not installed (Debian package qemu-system-x86): %w", err)
		}
	}
	_ = os.Remove(filepath.Join(s.RunDir, agentSocket))
	cmd := exec.Command(bin, Args(s)...)
	cmd.Dir = s.RunDir
	stderr, err := os.Create(filepath.Join(s.RunDir, stderrFile))
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if s.DiesWithAgent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	return launch(cmd, s.DiesWithAgent)
}

// launch starts cmd and watches for its exit. The kernel sends a parent-death
// signal when the thread that forked the child exits, not the process; a
// Go thread may exit while the agent lives on, so with deathSignal the
// starting goroutine keeps its thread locked until QEMU is gone.
func launch(cmd *exec.Cmd, deathSignal bool) (*VM, error) {
	started := make(chan error, 1)
	vm := &VM{RunDir: cmd.Dir, cmd: cmd, exited: make(chan struct{})}
	go func() {
		if deathSignal {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start QEMU: %w", err)
			return
		}
		vm.PID = cmd.Process.Pid
		started <- nil
		vm.err = cmd.Wait()
		close(vm.exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return vm, nil
}

// Attach finds the VM of a run directory again, from its pid file, or,
// before QEMU wrote that (an agent killed right after it launched QEMU),
// from the command lines of the host's processes: the one that names the
// run directory's pid file is its QEMU. Taking it for gone would start a
// second QEMU on the same disks, refused by the first one's image locks,
// and leave the first running unseen.
func Attach(runDir string) (*VM, error) {
	path := filepath.Join(runDir, pidFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return attachByCmdline(runDir, path, err)
	}
	if err != nil {
		return nil, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("pid file of %s: %w", runDir, err)
	}
	return attachPID(runDir, pid)
}

// attachByCmdline attaches to the process whose arguments hold
// "-pidfile path", or answers noFile when none does. procfs (Prometheus'
// reader of /proc) rather than parsing /proc by hand: it is already in
// the module graph and reads every process's arguments whole.
func attachByCmdline(runDir, path string, noFile error) (*VM, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("no pid file in %s, and the processes cannot be listed: %w", runDir, err)
	}
	for _, p := range procs {
		args, err := p.CmdLine()
		if err != nil {
			continue // it ended meanwhile
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-pidfile" && args[i+1] == path {
				return attachPID(runDir, p.PID)
			}
		}
	}
	return nil, noFile
}

func attachPID(runDir string, pid int) (*VM, error) {
	vm := &VM{RunDir: runDir, PID: pid, exited: make(chan struct{})}
	if !vm.Alive() {
		close(vm.exited)
		return nil, fmt.Errorf("the VM of %s (pid %d) is not running", runDir, pid)
	}
	go vm.watch()
	return vm, nil
}

// watch notices the exit of a VM this process is not the parent of.
func (v *VM) watch() {
	for v.Alive() {
		time.Sleep(200 * time.Millisecond)
	}
	close(v.exited)
}

// Alive reports whether the QEMU process still runs.
func (v *VM) Alive() bool {
	if v.cmd != nil {
		select {
		case <-v.exited:
			return false
		default:
			return true
		}
	}
	if err := syscall.Kill(v.PID, 0); err != nil {
		return false
	}
	// A zombie or a reused pid is not our VM.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", v.PID))
	return err == nil && strings.Contains(string(cmdline), v.RunDir)
}

// Exited is closed when the VM's process has ended.
func (v *VM) Exited() <-chan struct{} { return v.exited }

// ExitState is how the QEMU process ended, once Exited is closed. It is nil
// before, and always for a re-attached VM, which this process cannot wait
// for.
func (v *VM) ExitState() *os.ProcessState {
	if v.cmd == nil {
		return nil
	}
	select {
	case <-v.exited:
		return v.cmd.ProcessState
	default:
		return nil
	}
}

// Agent is a client of the guest agent.
func (v *VM) Agent() guestv1connect.GuestAgentServiceClient {
	return guestv1connect.NewGuestAgentServiceClient(v.agentHTTP(), guestchan.BaseURL)
}

// AgentTransport is the transport of the guest channel, for relaying
// calls to the guest agent as they are (the node's data endpoint).
func (v *VM) AgentTransport() http.RoundTripper { return v.agentHTTP().Transport }

func (v *VM) agentHTTP() *http.Client {
	v.httpOnce.Do(func() {
		path, dir := socketPath(v.RunDir)
		v.runDirFD = dir
		v.http = guestchan.Client(path)
	})
	return v.http
}

// Release closes this process's connection to the guest agent, so another
// process (a restarted node agent) can connect.
func (v *VM) Release() {
	v.agentHTTP().CloseIdleConnections()
}

// WaitAgent pings the guest agent until it answers, the VM exits, or ctx
// ends.
func (v *VM) WaitAgent(ctx context.Context) (*guestv1.PingResponse, error) {
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		res, err := v.Agent().Ping(attempt, connect.NewRequest(&guestv1.PingRequest{}))
		cancel()
		if err == nil {
			return res.Msg, nil
		}
		select {
		case <-v.exited:
			return nil, fmt.Errorf("the VM exited before its agent answered: %s", v.Console(20))
		case <-ctx.Done():
			return nil, fmt.Errorf("the guest agent did not answer: %w (last: %v); console: %s", ctx.Err(), err, v.Console(20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Console returns the last lines the guest wrote to its console.
func (v *VM) Console(lines int) string {
	b, _ := os.ReadFile(filepath.Join(v.RunDir, consoleLog))
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// Kill ends the VM at once (a force stop) and waits for it to be gone.
func (v *VM) Kill() error {
	if err := syscall.Kill(v.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	<-v.exited
	return nil
}

// socketPath is a path the host can connect to the agent socket by. A unix
// socket path is limited to 107 bytes; a longer one is reached through a
// descriptor of the run directory (/proc/self/fd/N/agent.sock), which stays
// open for the life of this process.
func socketPath(runDir string) (string, *os.File) {
	full := filepath.Join(runDir, agentSocket)
	if len(full) < 100 {
		return full, nil
	}
	dir, err := os.Open(runDir)
	if err != nil {
		return full, nil
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), agentSocket), dir
}
