package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/guest"
	"github.com/kibotos/kibotos/internal/node/fsutil"
	"github.com/kibotos/kibotos/internal/node/hostinfo"
	"github.com/kibotos/kibotos/internal/node/vm"
)

// Name is the provider's name (vm.Provider.Name).
const Name = "qemu"

// Provider is QEMU as a vm.Provider.
type Provider struct {
	bin    string // empty when QEMU is not installed
	binErr error
	log    *slog.Logger

	probeMu    sync.Mutex // held while probing
	accelMu    sync.Mutex
	accel      Accel
	accelDone  bool   // probed, kept from a probe, or set (WithAccel)
	verdictDir string // where the probe's verdict is kept; "" keeps none
}

// Option configures a Provider at New.
type Option func(*Provider)

// WithAccel sets the accelerator instead of probing for one: an operator
// who knows the host (`kibotos node --accel`) saves the probe, which on a
// host whose KVM crawls costs the first start ProbeTimeout and a core for
// as long. An empty accel probes, as without the option.
func WithAccel(accel Accel) Option {
	return func(p *Provider) {
		if accel != "" {
			p.accel, p.accelDone = accel, true
		}
	}
}

// New is the QEMU provider, with qemu-system-x86_64 from PATH. A nil
// logger is slog.Default(). Without WithAccel it probes KVM at the first
// start (Prepare).
func New(log *slog.Logger, opts ...Option) *Provider {
	if log == nil {
		log = slog.Default()
	}
	p := &Provider{log: log}
	if bin, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		p.bin = bin
	} else {
		p.binErr = fmt.Errorf("QEMU (qemu-system-x86_64) is not installed: %w", err)
	}
	for _, o := range opts {
		o(p)
	}
	if p.accelDone && p.bin != "" {
		p.log.Info("accelerator chosen", "accel", p.accel, "why", "set by the operator (--accel): no probe")
	}
	return p
}

// ParseAccel reads an accelerator as flags give it: "auto" (or empty) is
// no choice, so the provider probes; "kvm" and "tcg" are those.
func ParseAccel(s string) (Accel, error) {
	switch Accel(strings.ToLower(s)) {
	case "", "auto":
		return "", nil
	case KVM:
		return KVM, nil
	case TCG:
		return TCG, nil
	}
	return "", fmt.Errorf("accelerator %q: want auto, kvm or tcg", s)
}

// Name implements vm.Provider.
func (p *Provider) Name() string { return Name }

// Available implements vm.Provider.
func (p *Provider) Available() error { return p.binErr }

// Capabilities implements vm.Provider: provider.qemu, and the accelerator
// once the KVM probe chose one.
func (p *Provider) Capabilities() []string {
	if p.bin == "" {
		return nil
	}
	caps := []string{capability.QEMU}
	p.accelMu.Lock()
	defer p.accelMu.Unlock()
	switch {
	case !p.accelDone:
	case p.accel == KVM:
		caps = append(caps, capability.AccelKVM)
	default:
		caps = append(caps, capability.AccelTCG)
	}
	return caps
}

// Prepare probes KVM once per provider, with the first platform the node
// boots (ChooseAccel), unless a verdict is kept for this boot
// (WithVerdictDir). A probe that ctx cut short is no verdict: the next
// Prepare probes again, and Prepare answers ctx's error.
func (p *Provider) Prepare(ctx context.Context, kernel, initrd string) error {
	p.probeMu.Lock()
	defer p.probeMu.Unlock()
	p.accelMu.Lock()
	done := p.accelDone
	p.accelMu.Unlock()
	if done {
		return nil
	}
	accel, why, settled := p.keptAccel()
	if accel == "" {
		accel, why, settled = chooseAccel(ctx, Spec{Binary: p.bin, Kernel: kernel, Initrd: initrd, VCPUs: 1})
		if err := ctx.Err(); err != nil {
			return err
		}
		if settled && p.verdictDir != "" {
			if err := KeepAccel(p.verdictDir, p.bin, accel); err != nil {
				p.log.Warn("cannot keep the accelerator verdict: the next start probes again", "dir", p.verdictDir, "err", err)
			}
		}
	}
	p.accelMu.Lock()
	p.accel, p.accelDone = accel, true
	p.accelMu.Unlock()
	p.log.Info("accelerator chosen", "accel", accel, "why", why, "settled", settled)
	return nil
}

// keptAccel is the verdict an earlier probe kept for this boot and QEMU
// binary (WithVerdictDir), or "".
func (p *Provider) keptAccel() (Accel, string, bool) {
	if p.verdictDir == "" {
		return "", "", false
	}
	a := KeptAccel(p.verdictDir, p.bin)
	if a == "" {
		return "", "", false
	}
	return a, fmt.Sprintf("an earlier probe's verdict on this boot, kept in %s: no probe", p.verdictDir), true
}

func (p *Provider) chosenAccel() Accel {
	p.accelMu.Lock()
	defer p.accelMu.Unlock()
	if !p.accelDone {
		return TCG
	}
	return p.accel
}

// Start implements vm.Provider. The disks become virtio block devices in
// the order of s.Disks (vda, vdb, vdc).
func (p *Provider) Start(ctx context.Context, s vm.Spec) (vm.Instance, error) {
	if p.bin == "" {
		return nil, p.binErr
	}
	if err := p.Prepare(ctx, s.Kernel, s.Initrd); err != nil {
		return nil, err
	}
	spec := Spec{
		RunDir: s.RunDir, Binary: p.bin, Kernel: s.Kernel, Initrd: s.Initrd,
		VCPUs: s.VCPUs, MemoryMiB: s.MemoryMiB, Accel: p.chosenAccel(),
		Cmdline: vm.GuestParams(s, func(i int) string { return fmt.Sprintf("/dev/vd%c", 'a'+i) }),
	}
	for _, d := range s.Disks {
		spec.Drives = append(spec.Drives, Drive{Path: d.Path, ReadOnly: d.Role == vm.TemplateRoot})
	}
	if s.Network != nil {
		switch dev := s.Network.Device(); {
		case dev.UserMode != nil:
			spec.Net = dev.UserMode
		case dev.Stream != nil:
			spec.NetStream = dev.Stream.Name
		default:
			return nil, errors.New("QEMU offers the user-mode network and a stream socket; the network attachment asks for another device")
		}
	}
	v, err := Start(spec)
	if err != nil {
		return nil, err
	}
	return newInstance(v, spec.Accel), nil
}

// Attach implements vm.Provider. A run directory whose VM is gone (or
// never wrote its pid file) gives an instance that has exited, its cause
// read from the console.
func (p *Provider) Attach(runDir string) (vm.Instance, error) {
	if _, err := os.Stat(runDir); err != nil {
		return nil, err
	}
	v, err := Attach(runDir)
	if err != nil {
		return endedInstance(runDir, err), nil
	}
	return newInstance(v, ""), nil
}

// instance is a VM as a vm.Instance.
type instance struct {
	vm     *VM
	accel  Accel
	killed atomic.Bool // Kill sent the signal
	exited chan struct{}
	exit   vm.Exit

	resetMu   sync.Mutex
	resets    int
	lastReset time.Time
}

func newInstance(v *VM, accel Accel) *instance {
	x := &instance{vm: v, accel: accel, exited: make(chan struct{})}
	x.resets, x.lastReset = readResets(v.RunDir)
	go x.watch()
	return x
}

// resetsFile keeps the resets the provider counted, for an agent that
// re-attaches: the console says how many there were, not when.
const resetsFile = "resets.json"

type resetsRecord struct {
	Count int       `json:"count"`
	Last  time.Time `json:"last"`
}

func readResets(runDir string) (int, time.Time) {
	var r resetsRecord
	if b, err := os.ReadFile(filepath.Join(runDir, resetsFile)); err == nil {
		_ = json.Unmarshal(b, &r)
	}
	return r.Count, r.Last
}

// countResets takes the console's count of resets: more than known are
// resets seen now.
func (x *instance) countResets(n int) {
	x.resetMu.Lock()
	defer x.resetMu.Unlock()
	if n <= x.resets {
		return
	}
	x.resets, x.lastReset = n, time.Now()
	if b, err := json.Marshal(resetsRecord{Count: x.resets, Last: x.lastReset}); err == nil {
		_ = fsutil.WriteFileAtomic(x.vm.RunDir, resetsFile, b, 0o600)
	}
}

func (x *instance) Resets() (int, time.Time) {
	x.resetMu.Lock()
	defer x.resetMu.Unlock()
	return x.resets, x.lastReset
}

// endedInstance is a run directory's VM that is not running.
func endedInstance(runDir string, why error) *instance {
	x := &instance{vm: &VM{RunDir: runDir, exited: make(chan struct{})}, exited: make(chan struct{})}
	close(x.vm.exited)
	x.exit = vm.Exit{Cause: classifyEnd(consoleTail(runDir), nil, 0, 0), Detail: why.Error()}
	close(x.exited)
	return x
}

// watch waits for the VM's end and says why it ended. The host's OOM kill
// counter is sampled meanwhile, so that a kill is attributed only when it
// happened close to the VM's end, and the console is read for resets
// (counted: QEMU restarts the guest) and panics (the guest is killed: its
// kernel would restart it for ever, panic=-1).
func (x *instance) watch() {
	var oom oomHistory
	oom.add(time.Now(), oomKills())
	console := &consoleWatch{path: filepath.Join(x.vm.RunDir, consoleLog)}
	panicked := false
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			oom.add(time.Now(), oomKills())
			console.scan()
			x.countResets(console.resets)
			if console.panics > 0 && !panicked {
				panicked = true
				_ = syscall.Kill(x.vm.PID, syscall.SIGKILL)
			}
			continue
		case <-x.vm.Exited():
		}
		break
	}
	tail := consoleTail(x.vm.RunDir)
	x.exit = vm.Exit{Cause: classifyEnd(tail, x.vm.ExitState(), oom.before(), oomKills()),
		Detail: exitDescription(x.vm.ExitState()) + "; console: " + lastLines(tail, 5)}
	switch {
	case x.killed.Load():
		x.exit.Cause = vm.Killed
	case panicked:
		x.exit = vm.Exit{Cause: vm.Crashed, Detail: "the guest kernel panicked: killed"}
	}
	close(x.exited)
}

func (x *instance) PID() int                   { return x.vm.PID }
func (x *instance) Accel() string              { return string(x.accel) }
func (x *instance) Channel() http.RoundTripper { return x.vm.AgentTransport() }
func (x *instance) Exited() <-chan struct{}    { return x.exited }
func (x *instance) Exit() vm.Exit              { <-x.exited; return x.exit }
func (x *instance) Release()                   { x.vm.Release() }

func (x *instance) Kill() error {
	if x.vm.PID == 0 {
		return nil
	}
	select {
	case <-x.exited:
		return nil
	default:
	}
	x.killed.Store(true)
	if err := x.vm.Kill(); err != nil {
		return err
	}
	<-x.exited
	return nil
}

func (x *instance) Sample() (vm.Usage, error) {
	u, err := hostinfo.ReadProcessUsage(x.vm.PID)
	if err != nil {
		return vm.Usage{}, err
	}
	return vm.Usage{CPUSeconds: u.CPUSeconds, MemoryBytes: u.RSSBytes}, nil
}

// WaitAgent implements vm.Instance: a VM that exited before its agent
// answered says how the guest powered off and what QEMU said.
func (x *instance) WaitAgent(ctx context.Context) (*guestv1.PingResponse, error) {
	ping, err := x.vm.WaitAgent(ctx)
	if err == nil {
		return ping, nil
	}
	select {
	case <-x.vm.Exited():
		<-x.exited // its cause is known before the caller looks
	default:
	}
	msg := err.Error()
	if why := guestPowerOffReason(consoleTail(x.vm.RunDir)); why != "" {
		msg += "; the guest powered off: " + why
	}
	if q := strings.TrimSpace(lastLines(readTail(filepath.Join(x.vm.RunDir, stderrFile)), 10)); q != "" {
		msg += "; QEMU: " + q
	}
	return nil, &agentError{msg: msg, err: err}
}

type agentError struct {
	msg string
	err error
}

func (e *agentError) Error() string { return e.msg }
func (e *agentError) Unwrap() error { return e.err }

// guestPowerOffReason is why kibotos-guest powered its machine off, from
// its last words on the console ("kibotos-guest: power off: <reason>"), or
// empty.
func guestPowerOffReason(console string) string {
	const marker = guest.LogPrefix + "power off: "
	i := strings.LastIndex(console, marker)
	if i < 0 {
		return ""
	}
	line, _, _ := strings.Cut(console[i+len(marker):], "\n")
	return strings.TrimSpace(line)
}

func exitDescription(st *os.ProcessState) string {
	if st == nil {
		return "unknown (re-attached)"
	}
	return st.String()
}
