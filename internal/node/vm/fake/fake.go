// Package fake is a VM provider for unit tests of the code around VMs (the
// node's start pipeline): it boots nothing. Each instance is a goroutine
// answering a few guest agent calls (Ping, Shutdown, StatFile) over an
// in-process channel, and it passes the provider conformance suite
// (internal/node/vm/vmtest) like a real provider. Never wire it into a
// node that serves Workspaces; the one exception is the commit-point
// test's node (test/commitpoint), which a ctrl built with the failpoint
// tag places on.
//
// Its "template root" disk is a text file listing the paths the guest
// has, one a line; the Volume's mount path is there too. An agent restart
// is a new Provider from Restarted, which sees the instances of the one
// before (they outlive the agent, as VMs do).
package fake

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/node/vm"
)

// Name is the fake provider's name.
const Name = "fake"

// stateFile is the fake's own file in a run directory.
const stateFile = "fake.json"

// Provider is the fake provider.
type Provider struct {
	h *host
	// FailStart, when set, makes Start fail with it.
	FailStart error
	// Unbootable, when set, makes every instance exit at boot (a guest
	// that powers off before its agent answers).
	Unbootable bool
}

// host holds the running instances, by run directory: what outlives an
// agent.
type host struct {
	mu   sync.Mutex
	runs map[string]*Instance
}

// New is a fake provider with no instances.
func New() *Provider { return &Provider{h: &host{runs: map[string]*Instance{}}} }

// Restarted is the provider a restarted agent has: a new one that finds
// this one's instances again by their run directories.
func (p *Provider) Restarted() *Provider { return &Provider{h: p.h} }

func (p *Provider) Name() string     { return Name }
func (p *Provider) Available() error { return nil }

// Capabilities are provider.fake, which ctrl does not place on (only a
// ctrl built with the failpoint tag does, for the commit-point test).
func (p *Provider) Capabilities() []string { return []string{capability.Provider(Name)} }

// Start implements vm.Provider.
func (p *Provider) Start(_ context.Context, s vm.Spec) (vm.Instance, error) {
	if p.FailStart != nil {
		return nil, p.FailStart
	}
	paths := map[string]bool{"/": true}
	for _, d := range s.Disks {
		switch d.Role {
		case vm.TemplateRoot:
			if err := readPaths(d.Path, paths); err != nil {
				return nil, fmt.Errorf("template root: %w", err)
			}
		case vm.Volume:
			paths[filepath.Clean(d.MountPath)] = true
		}
	}
	if err := os.MkdirAll(s.RunDir, 0o700); err != nil {
		return nil, err
	}
	data, err := json.Marshal(s.BootID)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(s.RunDir, stateFile), data, 0o600); err != nil {
		return nil, err
	}
	x := &Instance{
		runDir: s.RunDir, bootID: s.BootID, paths: paths, memory: s.MemoryMiB << 20,
		started: time.Now(), exited: make(chan struct{}),
	}
	x.agent = handlerTransport{mux(x)}
	p.h.mu.Lock()
	p.h.runs[s.RunDir] = x
	p.h.mu.Unlock()
	if p.Unbootable {
		x.end(vm.PowerOff, "the guest powered off at boot")
	}
	return x, nil
}

// Attach implements vm.Provider.
func (p *Provider) Attach(runDir string) (vm.Instance, error) {
	if _, err := os.Stat(runDir); err != nil {
		return nil, err
	}
	p.h.mu.Lock()
	x := p.h.runs[runDir]
	p.h.mu.Unlock()
	if x == nil {
		x = &Instance{runDir: runDir, exited: make(chan struct{})}
		x.end(vm.Crashed, "no fake instance ran in "+runDir)
	}
	return x, nil
}

// readPaths adds the lines of the template root file to paths.
func readPaths(path string, paths map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); strings.HasPrefix(l, "/") {
			paths[filepath.Clean(l)] = true
		}
	}
	return sc.Err()
}

// Instance is one fake VM.
type Instance struct {
	runDir  string
	bootID  string
	paths   map[string]bool
	memory  uint64
	started time.Time
	agent   http.RoundTripper

	mu        sync.Mutex
	exited    chan struct{}
	exit      vm.Exit
	resets    int
	lastReset time.Time
	hung      bool                  // its agent answers no Ping and no Shutdown
	report    *guestv1.MemoryReport // what its agent's Ping says of memory
	shutdowns int                   // Shutdown calls its agent received
}

func (x *Instance) end(c vm.Cause, detail string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	select {
	case <-x.exited:
		return
	default:
	}
	x.exit = vm.Exit{Cause: c, Detail: detail}
	close(x.exited)
}

// Reset makes the guest reset its machine: it comes back at once, within
// the same instance.
func (x *Instance) Reset() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.resets, x.lastReset = x.resets+1, time.Now()
}

// Reboot makes the guest answer from another boot without the provider
// counting a reset (as a reset its console did not show).
func (x *Instance) Reboot() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.bootID += "-rebooted"
}

// Hang makes the guest agent stop answering pings and Shutdown (hung
// true) or answer them again, as a guest that stopped responding and
// recovered.
func (x *Instance) Hang(hung bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.hung = hung
}

// ReportMemory makes the guest agent's pings carry r as its memory report
// (nil: none, as a guest that predates the report).
func (x *Instance) ReportMemory(r *guestv1.MemoryReport) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.report = r
}

// Shutdowns is how many Shutdown calls the guest agent received,
// answered or not.
func (x *Instance) Shutdowns() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.shutdowns
}

func (x *Instance) Resets() (int, time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.resets, x.lastReset
}

func (x *Instance) PID() int                   { return 0 }
func (x *Instance) Accel() string              { return "fake" }
func (x *Instance) Channel() http.RoundTripper { return x.agent }
func (x *Instance) Exited() <-chan struct{}    { return x.exited }
func (x *Instance) Release()                   {}

func (x *Instance) Exit() vm.Exit {
	<-x.exited
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.exit
}

func (x *Instance) Kill() error {
	x.end(vm.Killed, "killed")
	return nil
}

func (x *Instance) Sample() (vm.Usage, error) {
	select {
	case <-x.exited:
		return vm.Usage{}, errors.New("the fake VM ended")
	default:
	}
	return vm.Usage{CPUSeconds: time.Since(x.started).Seconds() / 100, MemoryBytes: x.memory}, nil
}

func (x *Instance) WaitAgent(ctx context.Context) (*guestv1.PingResponse, error) {
	for {
		res, err := vm.Agent(x).Ping(ctx, connect.NewRequest(&guestv1.PingRequest{}))
		if err == nil {
			return res.Msg, nil
		}
		select {
		case <-x.exited:
			return nil, fmt.Errorf("the VM exited before its agent answered: %s", x.Exit().Detail)
		case <-ctx.Done():
			return nil, fmt.Errorf("the guest agent did not answer: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// agent is the fake guest agent.
type agent struct {
	guestv1connect.UnimplementedGuestAgentServiceHandler
	x *Instance
}

func mux(x *Instance) http.Handler {
	m := http.NewServeMux()
	m.Handle(guestv1connect.NewGuestAgentServiceHandler(agent{x: x}))
	return m
}

func (a agent) alive() error {
	select {
	case <-a.x.exited:
		return connect.NewError(connect.CodeUnavailable, errors.New("the fake VM ended"))
	default:
		return nil
	}
}

func (a agent) Ping(context.Context, *connect.Request[guestv1.PingRequest]) (*connect.Response[guestv1.PingResponse], error) {
	if err := a.alive(); err != nil {
		return nil, err
	}
	a.x.mu.Lock()
	hung, bootID, report := a.x.hung, a.x.bootID, a.x.report
	a.x.mu.Unlock()
	if hung {
		return nil, connect.NewError(connect.CodeDeadlineExceeded, errors.New("the fake guest is hung"))
	}
	return connect.NewResponse(&guestv1.PingResponse{BootId: bootID, AgentVersion: "fake", GuestTime: timestamppb.Now(), Memory: report}), nil
}

func (a agent) Shutdown(context.Context, *connect.Request[guestv1.ShutdownRequest]) (*connect.Response[guestv1.ShutdownResponse], error) {
	if err := a.alive(); err != nil {
		return nil, err
	}
	a.x.mu.Lock()
	a.x.shutdowns++
	hung := a.x.hung
	a.x.mu.Unlock()
	if hung {
		return nil, connect.NewError(connect.CodeDeadlineExceeded, errors.New("the fake guest is hung"))
	}
	// The answer first, then the power off, as kibotos-guest does.
	go a.x.end(vm.PowerOff, "the guest powered off (Shutdown)")
	return connect.NewResponse(&guestv1.ShutdownResponse{Durable: true, Message: "synced and unmounted (fake)"}), nil
}

func (a agent) StatFile(_ context.Context, req *connect.Request[guestv1.StatFileRequest]) (*connect.Response[guestv1.StatFileResponse], error) {
	if err := a.alive(); err != nil {
		return nil, err
	}
	p := filepath.Clean(req.Msg.GetRequest().GetPath())
	if !a.x.paths[p] {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("%s does not exist", p))
	}
	return connect.NewResponse(&guestv1.StatFileResponse{Response: &ctrlv1.StatFileResponse{Info: &ctrlv1.FileInfo{Path: p, Name: filepath.Base(p)}}}), nil
}

// handlerTransport calls the fake agent in process: unary calls only.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}
