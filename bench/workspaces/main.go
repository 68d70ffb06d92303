// Command workspaces measures how long a Workspace takes to become usable
// through Kibotos, beside a bare QEMU boot of the same microVM, side by side
// in one run, and what a running Workspace costs in memory. It prints a
// table.
//
//	go run ./bench/workspaces -n 10
//
// Everything runs in this process, as `kibotos dev` does: ctrl (SQLite in a
// temporary directory, loopback ports) and one node agent with a default
// storage pool. The default platform (Debian's kernel package, an initramfs
// with kibotos-guest built from this tree) and the busybox template are
// built and registered at start; the kernel package is cached in
// $KIBOTOS_CACHE or <user cache dir>/kibotos.
//
// One warm-up Workspace is created and deleted first, and reported on its
// own line: it pays the node's one-off costs (the accelerator probe unless
// -accel sets it, the artifacts' first download from ctrl). Then, n times
// and one at a time so that boots do not compete for the CPUs:
//
//   - a bare boot of the Workspaces' VM: qemu.Start with the same kernel,
//     initramfs, template root (read-only), a fresh writable layer made by
//     the node's own code (a sparse file, mkfs.ext4, fsync; timed on its own
//     row, outside the boot), the same vCPUs, memory and accelerator, then
//     VM.WaitAgent; timed from qemu.Start to the guest agent's first answer,
//     with the moment the guest's console says its agent serves beside it.
//     It is killed at once.
//   - a Workspace, created through the Connect API (GetWorkspace polled every
//     20 ms until AVAILABLE), then `echo hi` run in it through
//     ProcessService.ExecProcess; both timed from the CreateWorkspace call.
//     The node's own boot time for it (the same span as a bare boot) is read
//     from the node's log. The Workspace keeps running.
//
// The bare boot goes first in each pair, so that both boot beside the same
// number of running Workspaces (i-1 for pair i). With the n Workspaces
// running, it reads this process's Go heap (ctrl, the node agent and this
// client together) and the resident memory of the node's QEMU processes;
// then it deletes them.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/kibotos/kibotos/bench/internal/benchnode"
	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/node/blockfile"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/netslot/usernet"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/telemetry"
	"github.com/kibotos/kibotos/internal/template"
)

const (
	mib        = 1 << 20
	nodeID     = "bench"
	pollEvery  = 20 * time.Millisecond
	waitLimit  = 5 * time.Minute
	layerBytes = 256 * mib
)

func main() {
	n := flag.Int("n", 10, "Workspaces (and bare boots)")
	memoryMiB := flag.Uint64("memory", 256, "guest memory in MiB, for both")
	volume := flag.String("volume", "none", "the Workspaces' Volume: none (the same drives as the bare boot) or new (the API's default: a new 1 GiB Volume)")
	keep := flag.Bool("keep", false, "keep the temporary directory (logs, state) at the end")
	accelFlag := flag.String("accel", "auto", "the node's accelerator, as `kibotos node --accel`: auto (the warm-up pays the probe), kvm or tcg")
	flag.Parse()
	accel, err := qemu.ParseAccel(*accelFlag)
	if *n < 1 || (*volume != "none" && *volume != "new") || err != nil {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*n, *memoryMiB, *volume, accel, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "bench/workspaces:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// sample is one Workspace and the bare boot before it.
type sample struct {
	// Workspace: from CreateWorkspace, AVAILABLE and the first output of
	// `echo hi`; the ExecProcess call to that output; from CreateWorkspace,
	// the node's qemu.Start; from that qemu.Start, the guest console's
	// "serving on" line and the agent's first answer (the node's own boot
	// time).
	available, firstOutput, exec, toStart, nodeServing, nodeBoot time.Duration
	// Bare boot: make the writable layer; from qemu.Start, the console's
	// "serving on" line and the agent's first answer.
	layer, serving, bare time.Duration
}

func run(n int, memoryMiB uint64, volume string, setAccel qemu.Accel, keep bool) (err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tmp, err := os.MkdirTemp("", "kibotos-bench-ws")
	if err != nil {
		return err
	}
	logPath := filepath.Join(tmp, "kibotos.log")
	defer func() {
		if err != nil || keep {
			progress("state and logs kept in %s (log: %s)", tmp, logPath)
			return
		}
		_ = os.RemoveAll(tmp)
	}()
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	capture := &logCapture{starts: map[string]time.Time{}, boots: map[string]time.Duration{}}
	// The context handler first, as the node's own logger has it: the
	// execution's instance_id travels in the context of its log calls.
	log := slog.New(telemetry.ContextHandler(&captureHandler{Handler: slog.NewTextHandler(logFile, nil), c: capture}))

	// The platform and the template, as `kibotos dev` builds them.
	art, err := buildArtifacts(ctx, tmp)
	if err != nil {
		return err
	}

	// ctrl and one node agent in this process, as runDev starts them.
	srv, err := ctrl.Start(ctx, ctrl.Config{
		WorkspaceListen: "127.0.0.1:0", OperatorListen: "127.0.0.1:0", NodeListen: "127.0.0.1:0",
		StateDir: filepath.Join(tmp, "ctrl"), Logger: log.With("component", "ctrl"),
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	cat := srv.Catalog()
	if _, err := cat.RegisterPlatform(ctx, "default", art.platform, art.platformDir, true); err != nil {
		return err
	}
	if _, err := cat.RegisterTemplate(ctx, "busybox", art.template, true); err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	nodeState := filepath.Join(tmp, "node")
	nd, err := benchnode.Start(ctx, srv, benchnode.Config{
		NodeID: nodeID, StateDir: nodeState, PoolDir: filepath.Join(tmp, "pools", "default"), Logger: log.With("component", "node"), HTTP: hc,
		Accel: setAccel,
	})
	if err != nil {
		return err
	}
	defer func() {
		if nerr := nd.Close(); nerr != nil && err == nil {
			err = nerr
		}
	}()
	progress("ctrl and node %q ready (ctrl %s, node state %s)", nodeID, srv.Client.WorkspaceEndpoint, nodeState)

	ws := ctrlv1connect.NewWorkspaceServiceClient(hc, srv.Client.WorkspaceEndpoint, connect.WithInterceptors(auth.Bearer(srv.Client.Token)))
	procs := ctrlv1connect.NewProcessServiceClient(hc, srv.Client.WorkspaceEndpoint, connect.WithInterceptors(auth.Bearer(srv.Client.Token)))
	b := &bench{ws: ws, procs: procs, memoryMiB: memoryMiB, volume: volume, capture: capture, nodeState: nodeState}
	var ids []string
	defer func() {
		// Delete every Workspace still there, even after a failure: none
		// of their VMs may outlive the run.
		if derr := b.deleteAll(context.WithoutCancel(ctx), ids); derr != nil && err == nil {
			err = derr
		}
	}()

	heapBefore := heapInuse()
	rssBefore := selfRSS()

	// Warm-up: the node's one-off costs, reported apart.
	progress("warm-up Workspace (the node probes the accelerator unless -accel set it, and downloads the artifacts once)")
	warmID, warm, err := b.workspace(ctx, 0)
	if err != nil {
		if warmID != "" {
			ids = append(ids, warmID)
		}
		return fmt.Errorf("warm-up: %w", err)
	}
	accel, err := executionAccel(nodeState)
	if err != nil {
		return err
	}
	progress("warm-up: AVAILABLE after %s, first output after %s; accelerator %s (%s)", sec(warm.available), sec(warm.firstOutput), accel, capture.why())
	if err := b.deleteAll(ctx, []string{warmID}); err != nil {
		return err
	}
	heapIdle := heapInuse()

	blocks, err := blockfile.New()
	if err != nil {
		return err
	}
	samples := make([]sample, n)
	for i := range n {
		// The bare boot first: it and the Workspace after it both boot
		// beside the same i running Workspaces (pair i+1 here).
		layer, serving, bare, err := bareBoot(ctx, blocks, art, tmp, i+1, memoryMiB, accel)
		if err != nil {
			return fmt.Errorf("bare boot %d: %w", i+1, err)
		}
		id, s, err := b.workspace(ctx, i+1)
		if id != "" {
			ids = append(ids, id)
		}
		if err != nil {
			return fmt.Errorf("workspace %d: %w", i+1, err)
		}
		if a, err := executionAccel(nodeState); err != nil || a != accel {
			return fmt.Errorf("workspace %d runs with accelerator %q (%v), the warm-up with %q", i+1, a, err, accel)
		}
		s.layer, s.serving, s.bare = layer, serving, bare
		samples[i] = s
		progress("%d/%d: bare: layer %s, console says serving %s, agent answers %s | Workspace: QEMU started %s, console says serving %s later, agent answers %s later, AVAILABLE %s, first output %s (exec %s)",
			i+1, n, sec(s.layer), sec(s.serving), sec(s.bare), sec(s.toStart), sec(s.nodeServing), sec(s.nodeBoot), sec(s.available), sec(s.firstOutput), sec(s.exec))
	}

	heapRunning := heapInuse()
	rssRunning := selfRSS()
	qemuRSS, err := qemuRSS(nodeState, memoryMiB*mib)
	if err != nil {
		return err
	}
	if len(qemuRSS) != n {
		return fmt.Errorf("found %d QEMU processes of the node with %d Workspaces running", len(qemuRSS), n)
	}
	progress("deleting the %d Workspaces", n)
	if err := b.deleteAll(ctx, ids); err != nil {
		return err
	}
	ids = nil

	report(os.Stdout, reportInput{
		n: n, memoryMiB: memoryMiB, volume: volume, accel: accel, why: capture.why(), kernel: art.platform.KernelVersion,
		warm: warm, samples: samples,
		heapBefore: heapBefore, heapIdle: heapIdle, heapRunning: heapRunning,
		rssBefore: rssBefore, rssRunning: rssRunning, qemuRSS: qemuRSS,
	})
	return nil
}

// artifacts are the default platform and template, built here.
type artifacts struct {
	platform    *platform.Manifest
	platformDir string
	template    *template.Image
}

func (a *artifacts) kernel() string { return filepath.Join(a.platformDir, a.platform.Vmlinux) }
func (a *artifacts) initrd() string { return filepath.Join(a.platformDir, a.platform.Initramfs) }

func buildArtifacts(ctx context.Context, tmp string) (*artifacts, error) {
	guest := filepath.Join(tmp, "kibotos-guest")
	progress("building kibotos-guest")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", guest, "github.com/kibotos/kibotos/cmd/kibotos-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build kibotos-guest: %v: %s", err, out)
	}
	cache := os.Getenv("KIBOTOS_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil, err
		}
		cache = filepath.Join(base, "kibotos")
	}
	progress("kernel package (cache %s)", cache)
	deb, err := platform.DownloadDebianKernel(ctx, cache, nil)
	if err != nil {
		return nil, err
	}
	a := &artifacts{platformDir: filepath.Join(tmp, "platform")}
	if err := os.MkdirAll(a.platformDir, 0o755); err != nil {
		return nil, err
	}
	progress("building the platform from %s", filepath.Base(deb))
	if a.platform, err = platform.Build(ctx, platform.BuildInput{KernelDeb: deb, GuestBinary: guest}, a.platformDir); err != nil {
		return nil, err
	}
	root := filepath.Join(tmp, "root")
	if err := template.BusyboxDir(busybox(), root); err != nil {
		return nil, fmt.Errorf("busybox template: %w (Debian package busybox-static)", err)
	}
	if a.template, err = template.FromDir(ctx, root, filepath.Join(tmp, "root.img")); err != nil {
		return nil, err
	}
	progress("platform: kernel %s; template root %d bytes", a.platform.KernelVersion, a.template.Size)
	return a, nil
}

func busybox() string {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "busybox"
}

type bench struct {
	ws        ctrlv1connect.WorkspaceServiceClient
	procs     ctrlv1connect.ProcessServiceClient
	memoryMiB uint64
	volume    string
	capture   *logCapture
	nodeState string
}

// workspace creates Workspace i and runs `echo hi` in it as soon as it is
// AVAILABLE, timing both from the CreateWorkspace call.
func (b *bench) workspace(ctx context.Context, i int) (string, sample, error) {
	var s sample
	spec := &ctrlv1.WorkspaceCreateSpec{
		Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: b.memoryMiB * mib, WritableLayerCapacityBytes: layerBytes},
		Labels:    map[string]string{"bench": "workspaces"},
	}
	if b.volume == "none" {
		spec.Volume = &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}
	}
	t0 := time.Now()
	res, err := b.ws.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: fmt.Sprintf("bench-create-%d", i)}, Spec: spec,
	}))
	if err != nil {
		return "", s, err
	}
	id := res.Msg.GetWorkspace().GetWorkspaceId()
	watch, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	servingAt := watchConsole(watch, filepath.Join(b.nodeState, "executions", id+".*", "console.log"))
	if _, err := b.waitState(ctx, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE); err != nil {
		return id, s, err
	}
	s.available = time.Since(t0)
	stopWatch()
	start, boot, ok := b.capture.boot(id)
	if !ok {
		return id, s, fmt.Errorf("the node logged no start or boot time for workspace %s", id)
	}
	serving, ok := <-servingAt
	if !ok {
		return id, s, fmt.Errorf("workspace %s is AVAILABLE, but its console has no \"serving on\" line", id)
	}
	s.toStart, s.nodeServing, s.nodeBoot = start.Sub(t0), serving.Sub(start), boot

	t1 := time.Now()
	stream, err := b.procs.ExecProcess(ctx, connect.NewRequest(&ctrlv1.ExecProcessRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: fmt.Sprintf("bench-exec-%d", i)}, WorkspaceId: id,
		Spec: &ctrlv1.ProcessSpec{Argv: []string{"echo", "hi"}},
	}))
	if err != nil {
		return id, s, fmt.Errorf("exec: %w", err)
	}
	defer stream.Close()
	var out strings.Builder
	code := int32(-1)
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *ctrlv1.ExecProcessResponse_Output:
			if out.Len() == 0 && len(ev.Output.GetData()) > 0 {
				now := time.Now()
				s.firstOutput, s.exec = now.Sub(t0), now.Sub(t1)
			}
			out.Write(ev.Output.GetData())
		case *ctrlv1.ExecProcessResponse_Exit:
			code = ev.Exit.GetExitCode()
		}
	}
	if err := stream.Err(); err != nil {
		return id, s, fmt.Errorf("exec: %w", err)
	}
	if code != 0 || out.String() != "hi\n" {
		return id, s, fmt.Errorf("exec `echo hi`: exit %d, output %q", code, out.String())
	}
	return id, s, nil
}

func (b *bench) waitState(ctx context.Context, id string, want ctrlv1.WorkspaceState) (*ctrlv1.Workspace, error) {
	deadline := time.Now().Add(waitLimit)
	for {
		res, err := b.ws.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
		if err != nil {
			return nil, err
		}
		w := res.Msg.GetWorkspace()
		switch w.GetState() {
		case want:
			return w, nil
		case ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED:
			return nil, fmt.Errorf("workspace %s FAILED: %v", id, w.GetFailure())
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("workspace %s is %v after %s, waiting for %v", id, w.GetState(), waitLimit, want)
		}
		time.Sleep(pollEvery)
	}
}

// deleteAll deletes the Workspaces and waits until every one is DELETED.
func (b *bench) deleteAll(ctx context.Context, ids []string) error {
	var errs []error
	for _, id := range ids {
		if _, err := b.ws.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{
			Command: &ctrlv1.CommandMetadata{CommandId: "bench-delete-" + id}, WorkspaceId: id,
		})); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", id, err))
		}
	}
	for _, id := range ids {
		if _, err := b.waitState(ctx, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// executionAccel reads the accelerator the node recorded for its running
// executions (<node state>/executions/<id>/execution.json); all must agree.
func executionAccel(nodeState string) (qemu.Accel, error) {
	records, _ := filepath.Glob(filepath.Join(nodeState, "executions", "*", "execution.json"))
	var accel qemu.Accel
	for _, p := range records {
		data, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		var rec struct {
			Accel qemu.Accel `json:"accel"`
		}
		if err := json.Unmarshal(data, &rec); err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		if accel != "" && rec.Accel != accel {
			return "", fmt.Errorf("executions run with %s and %s", accel, rec.Accel)
		}
		accel = rec.Accel
	}
	if accel == "" {
		return "", fmt.Errorf("no execution record under %s", nodeState)
	}
	return accel, nil
}

// bareBoot boots the Workspaces' VM without Kibotos: the same kernel,
// initramfs and template root, a fresh writable layer made by the node's own
// code, the same vCPUs, memory and accelerator. It returns how long the
// layer took; from qemu.Start, when the guest wrote on its console that its
// agent serves (polled every 20 ms); and from qemu.Start, the guest agent's
// first answer to VM.WaitAgent.
func bareBoot(ctx context.Context, blocks *blockfile.Manager, art *artifacts, tmp string, i int, memoryMiB uint64, accel qemu.Accel) (layerTime, serving, boot time.Duration, err error) {
	dir := filepath.Join(tmp, "bare", strconv.Itoa(i))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(dir)
	ref := blockfile.Ref{PoolDir: dir, Kind: blockfile.WritableLayer, ObjectID: fmt.Sprintf("bare-%d", i)}
	t0 := time.Now()
	if _, err := blocks.Ensure(ctx, ref, layerBytes); err != nil {
		return 0, 0, 0, fmt.Errorf("writable layer: %w", err)
	}
	layerTime = time.Since(t0)
	layer, err := ref.Path()
	if err != nil {
		return 0, 0, 0, err
	}
	runDir := filepath.Join(dir, "run")
	t1 := time.Now()
	vm, err := qemu.Start(qemu.Spec{
		RunDir: runDir, Kernel: art.kernel(), Initrd: art.initrd(),
		Cmdline: fmt.Sprintf("kibotos.root=/dev/vda kibotos.layer=/dev/vdb kibotos.boot_id=bare-%d", i),
		VCPUs:   1, MemoryMiB: memoryMiB, Accel: accel,
		Drives: []qemu.Drive{{Path: art.template.Path, ReadOnly: true}, {Path: layer}},
		Net:    &netslot.UserMode{Network: usernet.GuestNetwork, Isolated: true},
	})
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() {
		if kerr := vm.Kill(); kerr != nil && err == nil {
			err = kerr
		}
	}()
	watch, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	servingAt := watchConsole(watch, filepath.Join(runDir, "console.log"))
	wctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	_, err = vm.WaitAgent(wctx)
	boot = time.Since(t1)
	stopWatch()
	if err != nil {
		return 0, 0, 0, err
	}
	at, ok := <-servingAt
	if !ok {
		return 0, 0, 0, errors.New("the agent answered, but the console has no \"serving on\" line")
	}
	return layerTime, at.Sub(t1), boot, nil
}

// watchConsole polls the console log matching pattern every 20 ms until the
// guest writes that its agent serves, and sends when it saw that. It sends
// nothing (the channel is closed) when ctx ends first; a last look is taken
// then, so a line written just before is not missed.
func watchConsole(ctx context.Context, pattern string) <-chan time.Time {
	out := make(chan time.Time, 1)
	serving := func() bool {
		paths, _ := filepath.Glob(pattern)
		for _, p := range paths {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), " serving on ") {
				return true
			}
		}
		return false
	}
	go func() {
		defer close(out)
		for ctx.Err() == nil {
			if serving() {
				out <- time.Now()
				return
			}
			time.Sleep(pollEvery)
		}
		if serving() {
			out <- time.Now()
		}
	}()
	return out
}

// heapInuse is this process's Go heap in use after a collection.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC() // the second empties the sync.Pools' victim caches
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// rss is the resident memory of a process, from /proc/<pid>/status.
type rss struct {
	total, anon, file uint64 // VmRSS, RssAnon, RssFile
	pss               uint64 // shared pages divided among the processes mapping them
	// Of the anonymous memory, for a QEMU process: the guest RAM mapping's
	// resident part, and TCG's translation cache (anonymous executable
	// mappings).
	guestRAM, tcg uint64
}

// selfRSS is this process's resident memory.
func selfRSS() rss { return readRSS("/proc/self", 0) }

// kB parses a /proc value such as "  1234 kB" into bytes.
func kB(v string) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
	return n << 10, err == nil
}

// readRSS reads a process's resident memory from /proc/<pid>/status and
// smaps_rollup, and, when guestRAM is not zero, splits the anonymous part
// with smaps; fields it cannot read stay zero.
func readRSS(proc string, guestRAM uint64) rss {
	var r rss
	scan := func(name string, line func(string)) {
		f, err := os.Open(filepath.Join(proc, name))
		if err != nil {
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line(sc.Text())
		}
	}
	fields := map[string]*uint64{"VmRSS": &r.total, "RssAnon": &r.anon, "RssFile": &r.file}
	scan("status", func(l string) {
		if k, v, ok := strings.Cut(l, ":"); ok && fields[k] != nil {
			*fields[k], _ = kB(v)
		}
	})
	scan("smaps_rollup", func(l string) {
		if v, ok := strings.CutPrefix(l, "Pss:"); ok {
			r.pss, _ = kB(v)
		}
	})
	if guestRAM == 0 {
		return r
	}
	// smaps: a mapping's header line ("start-end perms offset dev inode
	// [path]"), then its "Key: value kB" lines.
	var anonymous, exec bool
	var size uint64
	scan("smaps", func(l string) {
		if f := strings.Fields(l); len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			anonymous, exec, size = f[4] == "0" && len(f) == 5, strings.Contains(f[1], "x"), 0
			return
		}
		if v, ok := strings.CutPrefix(l, "Size:"); ok {
			size, _ = kB(v)
		} else if v, ok := strings.CutPrefix(l, "Rss:"); ok && anonymous {
			n, _ := kB(v)
			switch {
			case size == guestRAM && r.guestRAM == 0:
				r.guestRAM = n
			case exec:
				r.tcg += n
			}
		}
	})
	return r
}

// qemuRSS is the resident memory of every qemu-system-x86_64 process whose
// command line mentions the node's state directory.
func qemuRSS(nodeState string, guestRAM uint64) ([]rss, error) {
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	var out []rss
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil {
			continue // ended meanwhile
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) != "qemu-system-x86_64" || !strings.Contains(string(cmdline), nodeState+"/") {
			continue
		}
		if r := readRSS(p, guestRAM); r.total > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}

// logCapture keeps, from the node's log, why it chose its accelerator and
// the boot time it measured for each execution (qemu.Start to the guest
// agent's first answer, the same span as a bare boot).
type logCapture struct {
	mu     sync.Mutex
	msg    string
	starts map[string]time.Time     // by instance_id: when the node started QEMU
	boots  map[string]time.Duration // by instance_id: the boot time it logged
}

// boot is when the node started QEMU for the execution of Workspace id, and
// the boot time it measured.
func (c *logCapture) boot(id string) (time.Time, time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for inst, d := range c.boots {
		if start, ok := c.starts[inst]; ok && strings.HasPrefix(inst, id+".") {
			return start, d, true
		}
	}
	return time.Time{}, 0, false
}

func (c *logCapture) why() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.msg == "" {
		return "not logged"
	}
	return c.msg
}

type captureHandler struct {
	slog.Handler
	c     *logCapture
	attrs []slog.Attr // from With
}

func (h *captureHandler) Handle(ctx context.Context, r slog.Record) error {
	instance := func() string {
		var inst string
		each := func(a slog.Attr) bool {
			if a.Key == "instance_id" {
				inst = a.Value.String()
			}
			return true
		}
		for _, a := range h.attrs {
			each(a)
		}
		r.Attrs(each)
		return inst
	}
	switch r.Message {
	case "accelerator chosen":
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "why" {
				h.c.mu.Lock()
				h.c.msg = a.Value.String()
				h.c.mu.Unlock()
			}
			return true
		})
	case "execution booting": // logged right after qemu.Start
		if inst := instance(); inst != "" {
			h.c.mu.Lock()
			h.c.starts[inst] = r.Time
			h.c.mu.Unlock()
		}
	case "execution running":
		var boot time.Duration
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "boot_time" {
				boot = a.Value.Duration()
			}
			return true
		})
		if inst := instance(); inst != "" {
			h.c.mu.Lock()
			h.c.boots[inst] = boot
			h.c.mu.Unlock()
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h *captureHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &captureHandler{Handler: h.Handler.WithAttrs(attrs), c: h.c, attrs: append(slices.Clip(h.attrs), attrs...)}
}

func (h *captureHandler) WithGroup(name string) slog.Handler {
	return &captureHandler{Handler: h.Handler.WithGroup(name), c: h.c, attrs: h.attrs}
}

type reportInput struct {
	n                                 int
	memoryMiB                         uint64
	volume, why, kernel               string
	accel                             qemu.Accel
	warm                              sample
	samples                           []sample
	heapBefore, heapIdle, heapRunning uint64
	rssBefore, rssRunning             rss
	qemuRSS                           []rss
}

// nearestRank is the p-th percentile by the nearest-rank method.
func nearestRank(sorted []time.Duration, p float64) time.Duration {
	k := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(k, 1)-1]
}

func sec(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func mibs(b float64) string { return fmt.Sprintf("%.1f MiB", b/mib) }

func kibs(b float64) string { return fmt.Sprintf("%.0f KiB", b/1024) }

func report(w io.Writer, in reportInput) {
	volume := "no Volume (NONE)"
	if in.volume == "new" {
		volume = "a NEW 1 GiB Volume"
	}
	accel := strings.ToUpper(string(in.accel))
	fmt.Fprintf(w, "Workspace lifecycle: %d Workspaces and %d bare boots, interleaved (each bare boot just before its Workspace), one at a time; each VM %d MiB, 1 vCPU, a %d MiB writable layer; Workspaces with %s; kernel %s; GOMAXPROCS %d\n",
		in.n, in.n, in.memoryMiB, layerBytes/mib, volume, in.kernel, runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "accelerator: %s (the node's probe: %s)\n", accel, in.why)
	fmt.Fprintf(w, "warm-up Workspace (not counted): create → AVAILABLE %s, create → first exec output %s\n", sec(in.warm.available), sec(in.warm.firstOutput))
	rows := []struct {
		name string
		ms   bool
		get  func(sample) time.Duration
	}{
		{"Kibotos: create → AVAILABLE", false, func(s sample) time.Duration { return s.available }},
		{"- in it, create → the node's qemu.Start", true, func(s sample) time.Duration { return s.toStart }},
		{"- in it, the node's boot: qemu.Start → agent answers", false, func(s sample) time.Duration { return s.nodeBoot }},
		{"  - in that, qemu.Start → console says agent serving", false, func(s sample) time.Duration { return s.nodeServing }},
		{"  - in that, console says serving → agent answers", false, func(s sample) time.Duration { return s.nodeBoot - s.nodeServing }},
		{"- in it, the rest, after the node's boot", true, func(s sample) time.Duration { return s.available - s.toStart - s.nodeBoot }},
		{"Kibotos: create → first exec output", false, func(s sample) time.Duration { return s.firstOutput }},
		{"- in it, ExecProcess call → first output", true, func(s sample) time.Duration { return s.exec }},
		{"bare: qemu.Start → agent answers", false, func(s sample) time.Duration { return s.bare }},
		{"- in it, qemu.Start → console says agent serving", false, func(s sample) time.Duration { return s.serving }},
		{"- in it, console says serving → agent answers", false, func(s sample) time.Duration { return s.bare - s.serving }},
		{"bare: make the writable layer (before, untimed)", true, func(s sample) time.Duration { return s.layer }},
	}
	medians := make([]time.Duration, len(rows))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "measure\tp50\tp95\tall runs, in order\t")
	for i, r := range rows {
		unit, scale, format := "s", time.Second, "%.2f"
		if r.ms {
			unit, scale, format = "ms", time.Millisecond, "%.0f"
		}
		vals := make([]time.Duration, len(in.samples))
		var all []string
		for j, s := range in.samples {
			vals[j] = r.get(s)
			all = append(all, fmt.Sprintf(format, float64(vals[j])/float64(scale)))
		}
		slices.Sort(vals)
		medians[i] = nearestRank(vals, 50)
		p95 := nearestRank(vals, 95)
		fmt.Fprintf(tw, "%s\t"+format+" %s\t"+format+" %s\t%s %s\t\n", r.name,
			float64(medians[i])/float64(scale), unit, float64(p95)/float64(scale), unit, strings.Join(all, " "), unit)
	}
	tw.Flush()
	avail, first, bare := medians[0], medians[6], medians[8]
	fmt.Fprintf(w, "ratio of medians, Kibotos create → AVAILABLE / bare boot: %.2f (difference of the medians: %+.2f s)\n", avail.Seconds()/bare.Seconds(), (avail - bare).Seconds())
	fmt.Fprintf(w, "ratio of medians, Kibotos create → first exec output / bare boot: %.2f\n", first.Seconds()/bare.Seconds())

	n := float64(in.n)
	fmt.Fprintf(w, "Go heap in use (HeapInuse after GC; ctrl, node agent and this client share the process): %s before any Workspace, %s after the warm-up (none running), %s with %d running\n",
		mibs(float64(in.heapBefore)), mibs(float64(in.heapIdle)), mibs(float64(in.heapRunning)), in.n)
	fmt.Fprintf(w, "  per running Workspace: %s against before any Workspace, %s against after the warm-up\n",
		kibs((float64(in.heapRunning)-float64(in.heapBefore))/n), kibs((float64(in.heapRunning)-float64(in.heapIdle))/n))
	fmt.Fprintf(w, "this process's VmRSS: %s before any Workspace, %s with %d running: %s per running Workspace\n",
		mibs(float64(in.rssBefore.total)), mibs(float64(in.rssRunning.total)), in.n, kibs((float64(in.rssRunning.total)-float64(in.rssBefore.total))/n))
	var sum rss
	totals := make([]uint64, len(in.qemuRSS))
	for i, r := range in.qemuRSS {
		sum.total += r.total
		sum.anon += r.anon
		sum.file += r.file
		sum.pss += r.pss
		sum.guestRAM += r.guestRAM
		sum.tcg += r.tcg
		totals[i] = r.total
	}
	q := float64(len(in.qemuRSS))
	mean := func(v uint64) string { return mibs(float64(v) / q) }
	fmt.Fprintf(w, "QEMU per VM (%d processes, guest RAM %d MiB), means: VmRSS %s (min %s, max %s), PSS %s; anonymous %s = guest RAM resident %s + TCG translation cache %s + the rest %s; file-backed %s\n",
		len(in.qemuRSS), in.memoryMiB, mean(sum.total), mibs(float64(slices.Min(totals))), mibs(float64(slices.Max(totals))), mean(sum.pss),
		mean(sum.anon), mean(sum.guestRAM), mean(sum.tcg), mibs((float64(sum.anon)-float64(sum.guestRAM)-float64(sum.tcg))/q), mean(sum.file))
}
