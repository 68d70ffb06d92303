package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/guest"
	"github.com/kibotos/kibotos/internal/node/blockfile"
	"github.com/kibotos/kibotos/internal/node/fsutil"
	"github.com/kibotos/kibotos/internal/node/vm/qemu"
)

// Capability names for executions.
const (
	CapabilityQEMU     = "provider.qemu"
	CapabilityAccelKVM = "accel.kvm"
	CapabilityAccelTCG = "accel.tcg"
)

// Timings of executions. Variables so tests can shorten them.
var (
	// bootTimeout bounds the wait for a booting guest's agent: a TCG boot
	// on a loaded host takes tens of seconds.
	bootTimeout = 3 * time.Minute
	// probeInterval is how often each running guest is pinged.
	probeInterval = 5 * time.Second
	// deliveryReportInterval is how often a start reports artifact progress.
	deliveryReportInterval = time.Second
	// probeTimeout bounds one ping.
	probeTimeout = 5 * time.Second
	// defaultStopTimeout applies when StopExecution names none.
	defaultStopTimeout = 60 * time.Second
)

// Layout of an execution's run directory, <state dir>/executions/<id>/:
// QEMU's own files (qemu.pid, agent.sock, console.log, qemu.stderr, see
// package qemu) and recordFile. recordFile exists while the node considers
// the execution its own: from just before QEMU starts until the execution
// ended and was answered (StopExecution) or reported (an observation).
// Only console.log is kept after that, for post-mortems.
const (
	executionsDir = "executions"
	recordFile    = "execution.json"
	consoleFile   = "console.log" // written by QEMU (qemu.consoleLog)
	// qemuStderrFile is QEMU's own error output (written by qemu.Start).
	qemuStderrFile = "qemu.stderr"
)

// execRecord is what a restarted agent needs to take an execution back.
type execRecord struct {
	InstanceID      string     `json:"instance_id"`
	BootID          string     `json:"boot_id"`
	Accel           qemu.Accel `json:"accel"`
	LayerCreated    bool       `json:"layer_created"`
	Layer           recordRef  `json:"layer"`
	Volume          *recordRef `json:"volume,omitempty"`
	VolumeMountPath string     `json:"volume_mount_path,omitempty"`
	StartedAt       time.Time  `json:"started_at"`
}

type recordRef struct {
	StoragePool string `json:"storage_pool"`
	ObjectID    string `json:"object_id"`
}

type execState int

const (
	// booting: StartExecution started the VM and waits for its agent. Not
	// reported: the StartExecution answer says how the boot went.
	booting execState = iota
	running
	// ended: the VM is gone; the execution stays until an observation
	// reported it.
	ended
)

// execution is one VM. id, runDir and rec never change; the other fields
// are guarded by executions.mu (vm is set once, before the execution runs).
type execution struct {
	id     string
	runDir string
	rec    execRecord
	vm     *qemu.VM // nil for one found dead on re-attach

	state      execState
	stopping   bool // a StopExecution (or a failed start) ends it
	end        nodev1.ExecutionEnd
	responding bool
	probeErr   string
	memory     *guestv1.MemoryReport // the latest, times on this host's clock
	cancel     context.CancelFunc    // ends its watcher and prober
}

// executions are the VMs this agent runs.
type executions struct {
	a       *agent
	dir     string
	qemuBin string // empty when QEMU is not installed
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
	changed chan struct{}

	probeMu   sync.Mutex // held while probing
	accelMu   sync.Mutex
	accel     qemu.Accel
	accelDone bool // probed

	mu       sync.Mutex
	byID     map[string]*execution
	starting map[string]execRecord // block files claimed by starts in progress
}

func newExecutions(ctx context.Context, a *agent) (*executions, error) {
	ctx, stop := context.WithCancel(ctx)
	e := &executions{
		a:        a,
		dir:      filepath.Join(a.cfg.StateDir, executionsDir),
		ctx:      ctx,
		stop:     stop,
		changed:  make(chan struct{}, 1),
		byID:     map[string]*execution{},
		starting: map[string]execRecord{},
	}
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		stop()
		return nil, err
	}
	if bin, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		e.qemuBin = bin
	} else {
		a.log.Warn("QEMU not found: not advertising "+CapabilityQEMU, "err", err)
	}
	return e, nil
}

// notify asks the session for an observation now.
func (e *executions) notify() {
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

func (e *executions) capabilities() []string {
	var caps []string
	if e.qemuBin != "" {
		caps = append(caps, CapabilityQEMU)
	}
	e.accelMu.Lock()
	defer e.accelMu.Unlock()
	switch {
	case !e.accelDone:
	case e.accel == qemu.KVM:
		caps = append(caps, CapabilityAccelKVM)
	default:
		caps = append(caps, CapabilityAccelTCG)
	}
	return caps
}

// chooseAccel probes KVM once per agent run, with the first platform the
// node boots.
func (e *executions) chooseAccel(ctx context.Context, kernel, initrd string) qemu.Accel {
	e.probeMu.Lock()
	defer e.probeMu.Unlock()
	e.accelMu.Lock()
	accel, done := e.accel, e.accelDone
	e.accelMu.Unlock()
	if done {
		return accel
	}
	accel, why := qemu.ChooseAccel(ctx, qemu.Spec{Binary: e.qemuBin, Kernel: kernel, Initrd: initrd, VCPUs: 1})
	if ctx.Err() != nil {
		return accel // not a verdict: probe again next time
	}
	e.accelMu.Lock()
	e.accel, e.accelDone = accel, true
	e.accelMu.Unlock()
	e.a.log.Info("accelerator chosen", "accel", accel, "why", why)
	return accel
}

// reattach takes back every execution whose record is in the run
// directories: a VM still running is running again; one that ended while
// the agent was away is reported as ended.
func (e *executions) reattach() error {
	entries, err := os.ReadDir(e.dir)
	if err != nil {
		return err
	}
	for _, ent := range entries {
		if !ent.IsDir() {
			continue
		}
		runDir := filepath.Join(e.dir, ent.Name())
		data, err := os.ReadFile(filepath.Join(runDir, recordFile))
		if errors.Is(err, fs.ErrNotExist) {
			continue // an ended execution's console log
		}
		if err != nil {
			return err
		}
		var rec execRecord
		if err := json.Unmarshal(data, &rec); err != nil || rec.InstanceID != ent.Name() {
			e.a.log.Error("ignoring an unreadable execution record", "path", filepath.Join(runDir, recordFile), "err", err)
			continue
		}
		x := &execution{id: rec.InstanceID, runDir: runDir, rec: rec}
		vm, err := qemu.Attach(runDir)
		if err != nil {
			x.state, x.end = ended, classifyEnd(consoleTail(runDir), nil, 0, 0)
			e.a.log.Warn("an execution ended while the agent was away", "instance_id", x.id, "end", x.end, "err", err)
			e.byID[x.id] = x
			continue
		}
		x.vm, x.state, x.probeErr = vm, running, "not probed yet"
		e.byID[x.id] = x
		e.a.log.Info("re-attached to a running execution", "instance_id", x.id, "pid", vm.PID, "boot_id", rec.BootID)
		e.watch(x)
	}
	return nil
}

// detach lets go of the VMs when the agent stops: they keep running.
func (e *executions) detach() {
	e.stop()
	e.wg.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.byID {
		if x.vm != nil {
			x.vm.Release()
		}
	}
}

// watch starts the watcher and the prober of a running execution.
func (e *executions) watch(x *execution) {
	ctx, cancel := context.WithCancel(e.ctx)
	x.cancel = cancel
	e.wg.Go(func() { e.watchExit(ctx, x) })
	e.wg.Go(func() { e.probe(ctx, x) })
}

// watchExit notices a VM that ends without a StopExecution and reports how
// it ended.
func (e *executions) watchExit(ctx context.Context, x *execution) {
	// The host's OOM kill counter, sampled so that a kill is attributed
	// only when it happened close to the VM's end.
	oom := oomKills()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			oom = oomKills()
			continue
		case <-x.vm.Exited():
		}
		break
	}
	end := classifyEnd(consoleTail(x.runDir), x.vm.ExitState(), oom, oomKills())
	e.mu.Lock()
	if x.stopping {
		e.mu.Unlock()
		return // its stop says how it ended
	}
	x.state, x.end, x.responding, x.probeErr = ended, end, false, ""
	e.mu.Unlock()
	x.cancel()
	e.a.log.Warn("execution ended without a stop", "instance_id", x.id, "end", end, "exit", exitDescription(x.vm.ExitState()), "console", lastLines(consoleTail(x.runDir), 5))
	e.notify()
}

// probe pings the guest agent every probeInterval. An unresponsive guest
// is only reported, never stopped.
func (e *executions) probe(ctx context.Context, x *execution) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		res, err := x.vm.Agent().Ping(pctx, connect.NewRequest(&guestv1.PingRequest{}))
		cancel()
		if ctx.Err() != nil {
			return
		}
		responding, probeErr := err == nil, ""
		switch {
		case err != nil:
			probeErr = err.Error()
		case res.Msg.GetBootId() != x.rec.BootID:
			probeErr = fmt.Sprintf("the guest answers with boot_id %q, not %q: it rebooted", res.Msg.GetBootId(), x.rec.BootID)
		}
		var memory *guestv1.MemoryReport
		if err == nil {
			memory = hostClockMemory(res.Msg, time.Now())
		}
		e.mu.Lock()
		changed := x.state == running && (x.responding != responding || x.probeErr != probeErr || memoryChanged(x.memory, memory))
		if x.state == running {
			x.responding, x.probeErr = responding, probeErr
			if memory != nil {
				x.memory = memory
			}
		}
		e.mu.Unlock()
		if changed {
			e.a.log.Info("guest probe", "instance_id", x.id, "responding", responding, "probe_error", probeErr)
			e.notify()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// instanceIDs are the running executions, sorted.
func (e *executions) instanceIDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for id, x := range e.byID {
		if x.state == running {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// isRunning reports whether execution id runs.
func (e *executions) isRunning(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.byID[id]
	return x != nil && x.state == running
}

// vmPIDs are the VMM processes of the running executions.
func (e *executions) vmPIDs() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	var pids []int
	for _, x := range e.byID {
		if x.state == running && x.vm != nil {
			pids = append(pids, x.vm.PID)
		}
	}
	return pids
}

// reports are the running executions and the ended ones not reported
// yet; endedIDs are the latter, for reported once the observation is sent.
func (e *executions) reports() (reports []*nodev1.ExecutionReport, endedIDs []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, x := range e.byID {
		switch x.state {
		case running:
			reports = append(reports, &nodev1.ExecutionReport{InstanceId: id, Running: true, Responding: x.responding, ProbeError: x.probeErr, Memory: x.memory})
		case ended:
			reports = append(reports, &nodev1.ExecutionReport{InstanceId: id, End: x.end})
			endedIDs = append(endedIDs, id)
		}
	}
	slices.SortFunc(reports, func(a, b *nodev1.ExecutionReport) int { return strings.Compare(a.GetInstanceId(), b.GetInstanceId()) })
	return reports, endedIDs
}

// reported forgets ended executions an observation carried.
func (e *executions) reported(ids []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		if x := e.byID[id]; x != nil && x.state == ended {
			delete(e.byID, id)
			e.cleanRunDir(x.runDir)
		}
	}
}

// cleanRunDir removes everything but the console log.
func (e *executions) cleanRunDir(runDir string) {
	entries, _ := os.ReadDir(runDir)
	for _, ent := range entries {
		if ent.Name() != consoleFile {
			if err := os.RemoveAll(filepath.Join(runDir, ent.Name())); err != nil {
				e.a.log.Warn("cannot clean a run directory", "dir", runDir, "err", err)
			}
		}
	}
	_ = fsutil.SyncDir(runDir)
}

// runningVM finds the VM of a running execution, for the data plane.
func (e *executions) runningVM(id string) (*qemu.VM, error) {
	e.mu.Lock()
	x := e.byID[id]
	e.mu.Unlock()
	if x == nil {
		if validInstanceID(id) == nil {
			if _, err := os.Stat(filepath.Join(e.dir, id)); err == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("execution %s is not running", id))
			}
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("this node has no execution %s", id))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if x.state != running || x.stopping {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("execution %s is not running", id))
	}
	return x.vm, nil
}

var bootIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

func validInstanceID(id string) error {
	if err := blockfile.ValidObjectID(id); err != nil {
		return fmt.Errorf("instance_id: %w", err)
	}
	return nil
}

// hostnamePattern is what a guest host name may be (sethostname takes up
// to 64 bytes; the kernel command line takes no spaces).
var hostnamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,63}$`)

func validateStart(op *nodev1.StartExecution) error {
	if err := validInstanceID(op.GetInstanceId()); err != nil {
		return err
	}
	if !bootIDPattern.MatchString(op.GetBootId()) {
		return fmt.Errorf("boot_id %q is not 1 to 128 of [A-Za-z0-9._:-]", op.GetBootId())
	}
	for name, a := range map[string]*nodev1.Artifact{"kernel": op.GetKernel(), "initrd": op.GetInitrd(), "template_root": op.GetTemplateRoot()} {
		if a.GetDigest() == "" {
			return fmt.Errorf("no %s artifact", name)
		}
	}
	if op.GetLayer() == nil {
		return errors.New("no layer")
	}
	if op.GetLayer().GetKind() != nodev1.BlockFileKind_BLOCK_FILE_KIND_WRITABLE_LAYER {
		return fmt.Errorf("layer is a block file of kind %v, not a writable layer", op.GetLayer().GetKind())
	}
	if v := op.GetVolume(); v != nil {
		if v.GetKind() != nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME {
			return fmt.Errorf("volume is a block file of kind %v, not a Volume", v.GetKind())
		}
		p := op.GetVolumeMountPath()
		if !filepath.IsAbs(p) || filepath.Clean(p) == "/" || strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r == '"' || r == 0x7f }) {
			return fmt.Errorf("volume_mount_path %q is not an absolute path other than / without spaces", p)
		}
		for _, reserved := range []string{"/dev", "/proc", "/sys"} {
			if c := filepath.Clean(p); c == reserved || strings.HasPrefix(c, reserved+"/") {
				return fmt.Errorf("volume_mount_path %s is under %s, which the guest mounts itself", p, reserved)
			}
		}
	}
	if h := op.GetHostname(); h != "" && !hostnamePattern.MatchString(h) {
		return fmt.Errorf("hostname %q is not 1 to 64 of [A-Za-z0-9.-]", h)
	}
	if op.GetVcpus() == 0 {
		return errors.New("vcpus is 0")
	}
	if op.GetMemoryBytes() < mib {
		return fmt.Errorf("memory_bytes %d is less than 1 MiB", op.GetMemoryBytes())
	}
	return nil
}

const mib = 1 << 20

func resultOf(msg proto.Message) *nodev1.CommandResult {
	a, err := anypb.New(msg)
	if err != nil {
		return failure("", connect.CodeInternal, err.Error())
	}
	return &nodev1.CommandResult{Result: a}
}

// startExecution applies StartExecution. See execution.proto. Every
// failure says what it left of the writable layer (StartFailure): those
// from the layer step on say it themselves (startFailed); any other came
// before the layer, which the start then never touched.
func (e *executions) startExecution(ctx context.Context, op *nodev1.StartExecution) *nodev1.CommandResult {
	res := e.startSteps(ctx, op)
	if res.GetCode() != 0 && res.GetResult() == nil {
		if a, err := anypb.New(&nodev1.StartFailure{LayerUntouched: true}); err == nil {
			res.Result = a
		}
	}
	return res
}

// startSteps runs a start: checks, artifacts, the writable layer, the boot.
func (e *executions) startSteps(ctx context.Context, op *nodev1.StartExecution) *nodev1.CommandResult {
	if err := validateStart(op); err != nil {
		return failure("", connect.CodeInvalidArgument, "StartExecution: "+err.Error())
	}
	if e.qemuBin == "" {
		return failure("", connect.CodeUnimplemented, "this node cannot run executions: QEMU (qemu-system-x86_64) is not installed")
	}
	id := op.GetInstanceId()
	if why := e.a.host.refuseIfTight(); why != "" && !e.isRunning(id) {
		// What already runs is not affected: a repeated start of a running
		// execution is still answered.
		return failure("", connect.CodeResourceExhausted, "StartExecution refused: "+why)
	}
	log := e.a.log.With("instance_id", id)

	e.mu.Lock()
	x := e.byID[id]
	if x != nil && x.state != running {
		x = nil // an ended one: start it anew
	}
	e.mu.Unlock()
	if x != nil {
		return e.answerRunning(ctx, x)
	}

	layerRef, res := e.a.blockFileRef(op.GetLayer())
	if res != nil {
		return res
	}
	layerPath, err := layerRef.Path()
	if err != nil {
		return failure("", connect.CodeInvalidArgument, err.Error())
	}
	var volumePath string
	if op.GetVolume() != nil {
		volRef, res := e.a.blockFileRef(op.GetVolume())
		if res != nil {
			return res
		}
		if volumePath, err = volRef.Path(); err != nil {
			return failure("", connect.CodeInvalidArgument, err.Error())
		}
		st, err := blockfile.Stat(volumePath)
		if err != nil {
			return failure("", errorCode(err), "Volume block file: "+err.Error())
		}
		if !st.Exists {
			return failure("", connect.CodeFailedPrecondition, fmt.Sprintf("the Volume's block file %s does not exist in pool %s", op.GetVolume().GetObjectId(), op.GetVolume().GetStoragePool()))
		}
	}
	claim := execRecord{InstanceID: id, Layer: recordRef{op.GetLayer().GetStoragePool(), op.GetLayer().GetObjectId()}}
	if v := op.GetVolume(); v != nil {
		claim.Volume = &recordRef{v.GetStoragePool(), v.GetObjectId()}
	}
	if other := e.claim(claim); other != "" {
		return failure("", connect.CodeFailedPrecondition, fmt.Sprintf("execution %s uses that block file now", other))
	}
	defer e.unclaim(id)

	// Artifacts, all at once.
	arts := []*nodev1.Artifact{op.GetKernel(), op.GetInitrd(), op.GetTemplateRoot()}
	paths := make([]string, len(arts))
	errs := make([]error, len(arts))
	var wg sync.WaitGroup
	for i, a := range arts {
		wg.Go(func() { paths[i], errs[i] = e.a.artifacts.Get(ctx, a) })
	}
	fetched := make(chan struct{})
	go func() { wg.Wait(); close(fetched) }()
	e.reportDelivery(id, arts, fetched)
	for i, err := range errs {
		if err != nil {
			return failure("", connect.CodeOf(err), fmt.Sprintf("artifact %s (%s): %v", arts[i].GetDigest(), arts[i].GetName(), err))
		}
	}
	kernel, initrd, root := paths[0], paths[1], paths[2]

	accel := e.chooseAccel(ctx, kernel, initrd)
	if ctx.Err() != nil {
		return failure("", connect.CodeCanceled, "the agent is stopping")
	}

	// The layer, last: a start that fails before the boot leaves no new
	// layer behind, so the retry still reports layer_created.
	st, err := blockfile.Stat(layerPath)
	if err != nil {
		return failure("", errorCode(err), "layer block file: "+err.Error())
	}
	created := false
	if !st.Exists {
		if st, err = e.a.blocks.Ensure(ctx, layerRef, op.GetLayerCapacityBytes()); err != nil {
			// It came to the layer: what a failed make left is not known.
			return startFailed(errorCode(err), "make the writable layer: "+err.Error(), false)
		}
		created = true
		log.Info("writable layer created", "path", layerPath, "capacity_bytes", st.CapacityBytes)
	}
	// failRemovingLayer answers a start that failed from here on: it
	// removes the layer this start made, and says whether it did, so ctrl
	// no longer counts a layer that is gone.
	failRemovingLayer := func(code connect.Code, msg string) *nodev1.CommandResult {
		removed := false
		if created {
			if _, err := e.a.blocks.Remove(layerRef); err != nil {
				log.Warn("cannot remove the layer this failed start made", "err", err)
			} else {
				removed = true
			}
		}
		return startFailed(code, msg, removed)
	}

	runDir := filepath.Join(e.dir, id)
	e.mu.Lock()
	if old := e.byID[id]; old != nil && old.state == ended {
		// An earlier execution of the instance ended and was not reported
		// yet: this start answers for it, and its run directory is reused.
		delete(e.byID, id)
	}
	e.mu.Unlock()
	if err := os.RemoveAll(runDir); err != nil {
		return failRemovingLayer(connect.CodeInternal, err.Error())
	}
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return failRemovingLayer(errorCode(err), err.Error())
	}
	rec := execRecord{
		InstanceID: id, BootID: op.GetBootId(), Accel: accel, LayerCreated: created,
		Layer:     recordRef{StoragePool: op.GetLayer().GetStoragePool(), ObjectID: op.GetLayer().GetObjectId()},
		StartedAt: time.Now().UTC(),
	}
	cmdline := "kibotos.root=/dev/vda kibotos.layer=/dev/vdb"
	drives := []qemu.Drive{{Path: root, ReadOnly: true}, {Path: layerPath}}
	if op.GetVolume() != nil {
		rec.Volume = &recordRef{StoragePool: op.GetVolume().GetStoragePool(), ObjectID: op.GetVolume().GetObjectId()}
		rec.VolumeMountPath = filepath.Clean(op.GetVolumeMountPath())
		cmdline += " kibotos.volume=/dev/vdc:" + rec.VolumeMountPath
		drives = append(drives, qemu.Drive{Path: volumePath})
	}
	cmdline += " kibotos.boot_id=" + op.GetBootId() + " " + qemu.NetCmdline()
	if h := op.GetHostname(); h != "" {
		cmdline += " kibotos.hostname=" + h
	}
	if err := writeRecord(runDir, rec); err != nil {
		return failRemovingLayer(errorCode(err), "write the execution record: "+err.Error())
	}
	fail := func(code connect.Code, msg string) *nodev1.CommandResult {
		e.mu.Lock()
		if e.byID[id] == x {
			delete(e.byID, id)
		}
		e.mu.Unlock()
		e.cleanRunDir(runDir)
		log.Warn("execution did not start", "code", code, "message", msg)
		return failRemovingLayer(code, msg)
	}
	x = &execution{id: id, runDir: runDir, rec: rec, state: booting}
	e.mu.Lock()
	e.byID[id] = x
	e.mu.Unlock()

	spec := qemu.Spec{
		RunDir: runDir, Binary: e.qemuBin, Kernel: kernel, Initrd: initrd, Cmdline: cmdline,
		VCPUs: int(op.GetVcpus()), MemoryMiB: op.GetMemoryBytes() / mib, Drives: drives, Accel: accel,
	}
	start := time.Now()
	vm, err := qemu.Start(spec)
	if err != nil {
		return fail(connect.CodeUnavailable, err.Error())
	}
	e.mu.Lock()
	x.vm = vm
	e.mu.Unlock()
	log.Info("execution booting", "pid", vm.PID, "accel", accel, "vcpus", spec.VCPUs, "memory_mib", spec.MemoryMiB, "boot_id", rec.BootID)

	wctx, cancel := context.WithTimeout(ctx, bootTimeout)
	ping, err := vm.WaitAgent(wctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			// The agent stops: the VM goes on booting, and the next run
			// re-attaches it from its record.
			return failure("", connect.CodeCanceled, "the agent is stopping")
		}
		code := connect.CodeDeadlineExceeded
		select {
		case <-vm.Exited():
			code = connect.CodeUnavailable
		default:
		}
		e.mu.Lock()
		x.stopping = true
		e.mu.Unlock()
		if kerr := vm.Kill(); kerr != nil {
			log.Error("cannot kill a VM that did not boot", "pid", vm.PID, "err", kerr)
		}
		msg := "the execution did not boot: " + err.Error()
		if why := guestPowerOffReason(consoleTail(runDir)); why != "" {
			msg += "; the guest powered off: " + why
		}
		if q := strings.TrimSpace(lastLines(readTail(filepath.Join(runDir, qemuStderrFile)), 10)); q != "" {
			msg += "; QEMU: " + q
		}
		return fail(code, msg)
	}
	if ping.GetBootId() != rec.BootID {
		log.Warn("the guest answers with another boot_id", "got", ping.GetBootId(), "want", rec.BootID)
	}
	e.mu.Lock()
	x.state, x.responding = running, true
	e.watch(x)
	e.mu.Unlock()
	log.Info("execution running", "boot_time", time.Since(start).Round(time.Millisecond))
	e.notify()
	return resultOf(e.status(x))
}

// startFailed is the answer of a start that failed after it came to the
// writable layer: the code and message, and what it left of the layer.
func startFailed(code connect.Code, msg string, layerRemoved bool) *nodev1.CommandResult {
	res := failure("", code, msg)
	if a, err := anypb.New(&nodev1.StartFailure{LayerRemoved: layerRemoved}); err == nil {
		res.Result = a
	}
	return res
}

// reportDelivery sends the start's artifact progress about once a second
// until fetched is closed, starting only when something is missing: a
// start from cached artifacts reports nothing.
func (e *executions) reportDelivery(id string, arts []*nodev1.Artifact, fetched <-chan struct{}) {
	t := time.NewTicker(deliveryReportInterval)
	defer t.Stop()
	for {
		var delivered, total uint64
		for _, a := range arts {
			delivered += e.a.artifacts.Delivered(a)
			total += a.GetSizeBytes()
		}
		if delivered < total {
			e.a.sendProgress(&nodev1.ExecutionProgress{InstanceId: id, DeliveredBytes: delivered, TotalBytes: total})
		}
		select {
		case <-fetched:
			return
		case <-t.C:
		}
	}
}

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

// answerRunning answers StartExecution for an execution that runs
// already, once its guest agent answers (it may still be booting after a
// restart of the agent).
func (e *executions) answerRunning(ctx context.Context, x *execution) *nodev1.CommandResult {
	e.mu.Lock()
	responding := x.responding
	e.mu.Unlock()
	if !responding {
		wctx, cancel := context.WithTimeout(ctx, bootTimeout)
		_, err := x.vm.WaitAgent(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return failure("", connect.CodeCanceled, "the agent is stopping")
			}
			code := connect.CodeDeadlineExceeded
			select {
			case <-x.vm.Exited():
				code = connect.CodeUnavailable
			default:
			}
			return failure("", code, "the execution runs but its guest agent does not answer: "+err.Error())
		}
	}
	e.a.log.Info("execution runs already; answering its status", "instance_id", x.id)
	return resultOf(e.status(x))
}

func (e *executions) status(x *execution) *nodev1.ExecutionStatus {
	st := &nodev1.ExecutionStatus{
		InstanceId:   x.id,
		Running:      true,
		LayerCreated: x.rec.LayerCreated,
		Accel:        string(x.rec.Accel),
		BootId:       x.rec.BootID,
	}
	if p, ok := e.a.pools[x.rec.Layer.StoragePool]; ok {
		ref := blockfile.Ref{PoolDir: p.Dir, Kind: blockfile.WritableLayer, ObjectID: x.rec.Layer.ObjectID}
		if path, err := ref.Path(); err == nil {
			if s, err := blockfile.Stat(path); err == nil {
				st.LayerCapacityBytes = s.CapacityBytes
			}
		}
	}
	return st
}

// claim reserves the block files of an execution being started: it
// fails, naming the user, when another live or starting execution uses
// one of them. unclaim ends the reservation once the start is over (the
// execution, if it runs, holds them from then on).
func (e *executions) claim(rec execRecord) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	uses := func(other execRecord) bool {
		return other.Layer == rec.Layer ||
			(rec.Volume != nil && other.Volume != nil && *other.Volume == *rec.Volume)
	}
	for id, x := range e.byID {
		if x.state != ended && id != rec.InstanceID && uses(x.rec) {
			return id
		}
	}
	for id, other := range e.starting {
		if id != rec.InstanceID && uses(other) {
			return id
		}
	}
	e.starting[rec.InstanceID] = rec
	return ""
}

func (e *executions) unclaim(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.starting, id)
}

// stopExecution applies StopExecution. See execution.proto.
func (e *executions) stopExecution(ctx context.Context, op *nodev1.StopExecution) *nodev1.CommandResult {
	id := op.GetInstanceId()
	if err := validInstanceID(id); err != nil {
		return failure("", connect.CodeInvalidArgument, "StopExecution: "+err.Error())
	}
	log := e.a.log.With("instance_id", id)
	e.mu.Lock()
	x := e.byID[id]
	if x == nil || x.state != running {
		e.mu.Unlock()
		return resultOf(&nodev1.StopResult{Durable: false, Message: "not running"})
	}
	x.stopping = true
	e.mu.Unlock()
	x.cancel() // no more probes

	var res nodev1.StopResult
	if op.GetForce() {
		if err := x.vm.Kill(); err != nil {
			return failure("", connect.CodeInternal, "kill the VM: "+err.Error())
		}
		res.Message = "killed at once (force)"
	} else {
		timeout := defaultStopTimeout
		if s := op.GetTimeoutSeconds(); s > 0 {
			timeout = time.Duration(s) * time.Second
		}
		durable, msg, exited := shutdown(ctx, x.vm, timeout)
		if ctx.Err() != nil && !exited {
			// The agent stops: the guest powers off by itself, and the
			// next run reports how it ended.
			return failure("", connect.CodeCanceled, "the agent is stopping")
		}
		if exited {
			res.Durable, res.Message = durable, msg
		} else {
			if err := x.vm.Kill(); err != nil {
				return failure("", connect.CodeInternal, "kill the VM: "+err.Error())
			}
			res.Message = fmt.Sprintf("the guest did not power off within %s: killed", timeout)
			if msg != "" {
				res.Message += " (" + msg + ")"
			}
		}
	}
	e.mu.Lock()
	x.state, x.end, x.responding, x.probeErr = ended, nodev1.ExecutionEnd_EXECUTION_END_STOPPED, false, ""
	e.mu.Unlock()
	// Answered here: a restart must not report it again.
	if err := os.Remove(filepath.Join(x.runDir, recordFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("cannot remove the execution record", "err", err)
	}
	log.Info("execution stopped", "durable", res.Durable, "message", res.Message)
	e.notify()
	return resultOf(&res)
}

// shutdown asks the guest agent to shut down, retrying while it cannot be
// reached, then waits for the VM to exit, all within timeout. exited says
// whether the VM is gone; durable and msg are the guest's answer.
func shutdown(ctx context.Context, vm *qemu.VM, timeout time.Duration) (durable bool, msg string, exited bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	answered := false
	for !answered {
		res, err := vm.Agent().Shutdown(ctx, connect.NewRequest(&guestv1.ShutdownRequest{}))
		if err == nil {
			durable, msg, answered = res.Msg.GetDurable(), res.Msg.GetMessage(), true
			break
		}
		msg = "the guest agent did not answer Shutdown: " + err.Error()
		t := time.NewTimer(500 * time.Millisecond)
		select {
		case <-vm.Exited():
			t.Stop()
			return false, msg, true
		case <-ctx.Done():
			t.Stop()
			return false, msg, false
		case <-t.C:
		}
	}
	select {
	case <-vm.Exited():
		return durable, msg, true
	case <-ctx.Done():
		return false, msg, false
	}
}

func writeRecord(runDir string, rec execRecord) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(runDir, recordFile, append(data, '\n'), 0o600)
}

// consoleTail is the end of an execution's console log.
func consoleTail(runDir string) string {
	return readTail(filepath.Join(runDir, consoleFile))
}

// readTail is the last 16 KiB of a file, or "".
func readTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 16 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		_, _ = f.Seek(-max, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, max))
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// classifyEnd says how a VM that ended without a StopExecution ended:
//
//   - GUEST_SHUTDOWN when the guest kernel powered off (or restarted, which
//     -no-reboot turns into an exit): it printed "reboot: Power down" or
//     "reboot: Restarting system" and no panic.
//   - HOST_MEMORY_EXHAUSTED when the host's OOM killer probably ended the
//     VMM. The kernel log that would say so is not readable portably, so
//     this is a heuristic: the VMM died of SIGKILL that the node did not
//     send, and the host's OOM kill counter (oom_kill in /proc/vmstat,
//     counting memory cgroup kills too) rose in the seconds before it was
//     noticed. Without the counter, SIGKILL alone decides. A re-attached
//     VMM is not this process's child, so its exit status is unknown: the
//     counter alone decides.
//   - CRASHED otherwise (a guest panic, a QEMU error, a kill by someone
//     else).
func classifyEnd(console string, st *os.ProcessState, oomBefore, oomAfter int64) nodev1.ExecutionEnd {
	if !strings.Contains(console, "Kernel panic") &&
		(strings.Contains(console, "reboot: Power down") || strings.Contains(console, "reboot: Restarting system")) {
		return nodev1.ExecutionEnd_EXECUTION_END_GUEST_SHUTDOWN
	}
	oomRose := oomBefore >= 0 && oomAfter > oomBefore
	if st == nil {
		if oomRose {
			return nodev1.ExecutionEnd_EXECUTION_END_HOST_MEMORY_EXHAUSTED
		}
		return nodev1.ExecutionEnd_EXECUTION_END_CRASHED
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL &&
		(oomRose || oomBefore < 0 || oomAfter < 0) {
		return nodev1.ExecutionEnd_EXECUTION_END_HOST_MEMORY_EXHAUSTED
	}
	return nodev1.ExecutionEnd_EXECUTION_END_CRASHED
}

// oomKills reads the host's OOM kill counter, or -1.
func oomKills() int64 {
	f, err := os.Open("/proc/vmstat")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

func exitDescription(st *os.ProcessState) string {
	if st == nil {
		return "unknown (re-attached)"
	}
	return st.String()
}

// hostClockMemory is the guest's memory report with its times moved to
// this host's clock (the API reports them "on the clock of the host that
// probed"), using the guest's clock reading in the same answer.
func hostClockMemory(ping *guestv1.PingResponse, hostNow time.Time) *guestv1.MemoryReport {
	r := ping.GetMemory()
	if r == nil {
		return nil
	}
	r = proto.Clone(r).(*guestv1.MemoryReport)
	if ping.GetGuestTime() == nil {
		return r
	}
	offset := hostNow.Sub(ping.GetGuestTime().AsTime())
	move := func(ts *timestamppb.Timestamp) *timestamppb.Timestamp {
		if ts == nil {
			return nil
		}
		return timestamppb.New(ts.AsTime().Add(offset))
	}
	r.SaturatedSince = move(r.GetSaturatedSince())
	if k := r.GetLatestKill(); k != nil {
		k.KilledAt = move(k.GetKilledAt())
	}
	return r
}

// memoryChanged tells whether a report is worth an observation: the
// condition or the kills changed (the stall share alone moves every second).
func memoryChanged(old, cur *guestv1.MemoryReport) bool {
	if cur == nil {
		return false
	}
	return old.GetCondition() != cur.GetCondition() || old.GetKillCount() != cur.GetKillCount()
}
