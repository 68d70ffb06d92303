package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/node/blockfile"
	"github.com/kibotos/kibotos/internal/node/fsutil"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/vm"
	"github.com/kibotos/kibotos/internal/telemetry"
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
// the VM provider's own files (for QEMU: qemu.pid, agent.sock, console.log,
// qemu.stderr) and recordFile. recordFile exists while the node considers
// the execution its own: from just before the VM starts until the
// execution ended and was answered (StopExecution) or reported (an
// observation). The whole directory goes once the end is reported (or a
// start failed): ctrl holds what a post-mortem needs (the console's tail
// comes with a failed boot's error and with an unexpected end's detail),
// and a node keeping one directory per execution it ever ran would fill
// its disk.
const (
	executionsDir = "executions"
	recordFile    = "execution.json"
)

// legacyProvider is the provider of records that name none: the agent
// wrote them before it had more than QEMU.
const legacyProvider = "qemu"

// execRecord is what a restarted agent needs to take an execution back.
type execRecord struct {
	InstanceID string `json:"instance_id"`
	BootID     string `json:"boot_id"`
	// Provider names the VM provider that runs it; empty in records of
	// agents before the provider seam, which ran QEMU (legacyProvider).
	Provider        string     `json:"provider,omitempty"`
	Accel           string     `json:"accel"`
	LayerCreated    bool       `json:"layer_created"`
	Layer           recordRef  `json:"layer"`
	Volume          *recordRef `json:"volume,omitempty"`
	VolumeMountPath string     `json:"volume_mount_path,omitempty"`
	StartedAt       time.Time  `json:"started_at"`
	// Network is the policy in force and the Egresses and Resolvers it
	// names (an ApplyNetworkPolicy, protojson), so an agent starting
	// attaches a running execution's network as it was; absent in older
	// records and
	// for DENY_ALL alike, which is what it gives. It holds the Egresses'
	// passwords: the record is the agent's alone (0600).
	Network json.RawMessage `json:"network,omitempty"`
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
// are guarded by vmSet.mu (vm is set once, before the execution runs).
type execution struct {
	id     string
	runDir string
	rec    execRecord
	vm     vm.Instance        // nil until it booted
	net    netslot.Attachment // nil: no network (or not attached yet)

	state    execState
	stopping bool // a StopExecution (or a failed start) ends it
	// forced: a StopExecution with force came (force); a normal stop
	// under way or to come kills the VM instead of waiting for the guest,
	// by forceStop (nil while no normal stop waits).
	forced     bool
	forceStop  context.CancelFunc
	end        nodev1.ExecutionEnd
	responding bool
	probeErr   string
	memory     *guestv1.MemoryReport // the latest, times on this host's clock
	restarts   int                   // the guest's resets within this execution
	lastReset  time.Time
	comingBack bool               // from a reset until the agent answers again
	cancel     context.CancelFunc // ends its watcher and prober

	// unresponsiveSince is when the first probe that failed since the guest
	// last answered was sent (zero while it answers).
	unresponsiveSince time.Time
	// otherBoot: the guest answered from another boot than the one that
	// started the execution.
	otherBoot bool
}

// vmSet is the VMs this agent runs, one execution each (commandLanes
// are the order commands run in; ctrl/workspace drives a Workspace's
// executions from ctrl's side).
type vmSet struct {
	a        *agent
	dir      string
	provider vm.Provider     // nil: this node runs no VMs
	network  netslot.Network // nil: no network attachment
	ctx      context.Context
	stop     context.CancelFunc
	wg       sync.WaitGroup
	changed  chan struct{}

	mu       sync.Mutex
	byID     map[string]*execution
	starting map[string]execRecord // block files claimed by starts in progress
}

func newVMSet(ctx context.Context, a *agent) (*vmSet, error) {
	ctx, stop := context.WithCancel(ctx)
	e := &vmSet{
		a:        a,
		provider: a.cfg.Provider,
		network:  a.cfg.Network,
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
	switch {
	case e.provider == nil:
		a.log.Warn("no VM provider: this node runs no executions")
	case e.provider.Available() != nil:
		a.log.Warn("the VM provider cannot run VMs here: not advertising it", "provider", e.provider.Name(), "err", e.provider.Available())
	}
	return e, nil
}

// notify asks the session for an observation now.
func (e *vmSet) notify() {
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

func (e *vmSet) capabilities() []string {
	if e.provider == nil || e.provider.Available() != nil {
		return nil
	}
	return e.provider.Capabilities()
}

// reattach takes back every execution whose record is in the run
// directories: a VM still running is running again; one that ended while
// the agent was away is reported as ended.
func (e *vmSet) reattach() error {
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
			// An execution whose end was answered before the last agent
			// stopped, or a boot cut before its record (and so before its
			// VM): nothing runs there.
			e.removeRunDir(runDir)
			continue
		}
		if err != nil {
			return err
		}
		var rec execRecord
		if err := json.Unmarshal(data, &rec); err != nil || rec.InstanceID != ent.Name() {
			e.a.log.Error("ignoring an unreadable execution record", "path", filepath.Join(runDir, recordFile), "err", err)
			continue
		}
		if rec.Provider == "" {
			rec.Provider = legacyProvider
		}
		if e.provider == nil || rec.Provider != e.provider.Name() {
			e.a.log.Error("ignoring the record of an execution another VM provider runs", "path", filepath.Join(runDir, recordFile), "provider", rec.Provider)
			continue
		}
		x := &execution{id: rec.InstanceID, runDir: runDir, rec: rec}
		inst, err := e.provider.Attach(runDir)
		if err != nil {
			return fmt.Errorf("re-attach %s: %w", x.id, err)
		}
		x.vm = inst
		select {
		case <-inst.Exited():
			x.state, x.end = ended, endOf(inst.Exit())
			e.a.log.Warn("an execution ended while the agent was away", "instance_id", x.id, "end", x.end, "why", inst.Exit().Detail)
			e.byID[x.id] = x
			continue
		default:
		}
		x.state, x.probeErr = running, "not probed yet"
		x.restarts, x.lastReset = inst.Resets()
		e.reattachNetwork(x)
		e.byID[x.id] = x
		e.a.log.Info("re-attached to a running execution", "instance_id", x.id, "provider", rec.Provider, "pid", inst.PID(), "boot_id", rec.BootID)
		e.watch(x)
	}
	return nil
}

// reattachNetwork attaches a running execution's network again, under the
// policy its record holds. One that cannot be attached is logged and left
// without: its guest's network stays closed, never open.
func (e *vmSet) reattachNetwork(x *execution) {
	if e.network == nil {
		return
	}
	rec := &nodev1.ApplyNetworkPolicy{}
	if len(x.rec.Network) > 0 {
		if err := protojson.Unmarshal(x.rec.Network, rec); err != nil {
			e.a.log.Error("an execution's recorded network policy is unreadable: its network stays closed", "instance_id", x.id, "err", err)
			return
		}
	}
	att, err := e.network.Attach(e.ctx, x.id, policyOf(rec))
	if err != nil {
		e.a.log.Error("cannot attach a running execution's network again: it stays closed", "instance_id", x.id, "err", err)
		return
	}
	x.net = att
	att.Started(x.runDir)
}

// releaseNetwork lets go of an ended execution's network.
func (e *vmSet) releaseNetwork(x *execution) {
	e.mu.Lock()
	att := x.net
	x.net = nil
	e.mu.Unlock()
	if att != nil {
		if err := att.Release(); err != nil {
			e.a.log.Warn("cannot release an execution's network", "instance_id", x.id, "err", err)
		}
	}
}

// detach lets go of the VMs when the agent stops: they keep running (the
// networks the agent carries end with it, and are attached again when it
// starts).
func (e *vmSet) detach() {
	e.stop()
	e.wg.Wait()
	e.mu.Lock()
	xs := slices.Collect(maps.Values(e.byID))
	e.mu.Unlock()
	for _, x := range xs {
		if x.vm != nil {
			x.vm.Release()
		}
		e.releaseNetwork(x)
	}
}

// watch starts the watcher and the prober of a running execution.
func (e *vmSet) watch(x *execution) {
	ctx, cancel := context.WithCancel(e.ctx)
	x.cancel = cancel
	e.wg.Go(func() { e.watchExit(ctx, x) })
	e.wg.Go(func() { e.probe(ctx, x) })
}

// watchExit notices a VM that ends without a StopExecution and reports how
// it ended.
func (e *vmSet) watchExit(ctx context.Context, x *execution) {
	select {
	case <-ctx.Done():
		return
	case <-x.vm.Exited():
	}
	exit := x.vm.Exit()
	end := endOf(exit)
	e.mu.Lock()
	if x.stopping {
		e.mu.Unlock()
		return // its stop says how it ended
	}
	x.state, x.end, x.responding, x.probeErr = ended, end, false, ""
	e.mu.Unlock()
	x.cancel()
	e.releaseNetwork(x)
	e.a.log.Warn("execution ended without a stop", "instance_id", x.id, "end", end, "cause", exit.Cause, "exit", exit.Detail)
	e.notify()
}

// endOf is how ctrl is told an execution ended. A reset is a guest
// shutdown: the VM does not come back.
func endOf(exit vm.Exit) nodev1.ExecutionEnd {
	switch exit.Cause {
	case vm.PowerOff, vm.Reset:
		return nodev1.ExecutionEnd_EXECUTION_END_GUEST_SHUTDOWN
	case vm.OOMKilled:
		return nodev1.ExecutionEnd_EXECUTION_END_HOST_MEMORY_EXHAUSTED
	case vm.Killed:
		return nodev1.ExecutionEnd_EXECUTION_END_STOPPED
	}
	return nodev1.ExecutionEnd_EXECUTION_END_CRASHED
}

// probe pings the guest agent every probeInterval. An unresponsive guest
// is only reported, never stopped.
func (e *vmSet) probe(ctx context.Context, x *execution) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		sent := time.Now()
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		res, err := vm.Agent(x.vm).Ping(pctx, connect.NewRequest(&guestv1.PingRequest{}))
		cancel()
		if ctx.Err() != nil {
			return
		}
		responding, probeErr, otherBoot := err == nil, "", false
		switch {
		case err != nil:
			probeErr = err.Error()
		case res.Msg.GetBootId() != x.rec.BootID:
			probeErr = fmt.Sprintf("the guest answers with boot_id %q, not %q: it rebooted", res.Msg.GetBootId(), x.rec.BootID)
			otherBoot = true
		}
		var memory *guestv1.MemoryReport
		if err == nil {
			memory = hostClockMemory(res.Msg, time.Now())
		}
		resets, lastReset := x.vm.Resets()
		e.mu.Lock()
		changed := x.state == running && (x.responding != responding || x.probeErr != probeErr || memoryChanged(x.memory, memory) ||
			resets != x.restarts || (x.comingBack && responding))
		if x.state == running {
			x.responding, x.probeErr = responding, probeErr
			x.otherBoot = x.otherBoot || otherBoot
			switch {
			case responding:
				x.unresponsiveSince = time.Time{}
			case x.unresponsiveSince.IsZero():
				x.unresponsiveSince = sent
			}
			if memory != nil {
				x.memory = memory
			}
			if resets != x.restarts {
				// A reset: the guest comes back within this execution.
				x.restarts, x.lastReset, x.comingBack = resets, lastReset, !responding
				x.memory = memory
			} else if responding {
				x.comingBack = false
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
func (e *vmSet) instanceIDs() []string {
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
func (e *vmSet) isRunning(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.byID[id]
	return x != nil && x.state == running
}

// probeCounts counts the running executions, and those whose guest did
// not answer the latest probe (one coming back from a reset is not
// failing: it is rebooting).
func (e *vmSet) probeCounts() (runs, failing int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.byID {
		if x.state != running {
			continue
		}
		runs++
		if !x.responding && !x.comingBack {
			failing++
		}
	}
	return runs, failing
}

// samplers are the running executions' VMs, by instance id, for the
// host's readings.
func (e *vmSet) samplers() map[string]sampler {
	e.mu.Lock()
	defer e.mu.Unlock()
	vms := map[string]sampler{}
	for id, x := range e.byID {
		if x.state == running && x.vm != nil {
			vms[id] = x.vm
		}
	}
	return vms
}

// reports are the running executions and the ended ones not reported
// yet; endedIDs are the latter, for reported once the observation is sent.
func (e *vmSet) reports() (reports []*nodev1.ExecutionReport, endedIDs []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, x := range e.byID {
		switch x.state {
		case running:
			r := runningReport(x)
			if v := x.rec.Volume; v != nil {
				// Judged by judgeVolumes, outside the lock.
				r.Volume = &nodev1.VolumeReport{Ref: &nodev1.BlockFileRef{StoragePool: v.StoragePool, Kind: nodev1.BlockFileKind_BLOCK_FILE_KIND_VOLUME, ObjectId: v.ObjectID}}
			}
			reports = append(reports, r)
		case ended:
			reports = append(reports, &nodev1.ExecutionReport{InstanceId: id, End: x.end})
			endedIDs = append(endedIDs, id)
		}
	}
	slices.SortFunc(reports, func(a, b *nodev1.ExecutionReport) int { return strings.Compare(a.GetInstanceId(), b.GetInstanceId()) })
	return reports, endedIDs
}

// runningReport is running execution x's report, without its Volume's
// judgment. The caller holds e.mu.
func runningReport(x *execution) *nodev1.ExecutionReport {
	r := &nodev1.ExecutionReport{InstanceId: x.id, Running: true, Responding: x.responding, ProbeError: x.probeErr, Memory: x.memory,
		RestartCount: uint32(x.restarts), ComingBack: x.comingBack}
	if x.restarts > 0 {
		r.LastResetAt = timestamppb.New(x.lastReset)
	}
	if !x.responding && !x.unresponsiveSince.IsZero() {
		r.UnresponsiveSince = timestamppb.New(x.unresponsiveSince)
	}
	r.OtherBoot = x.otherBoot
	if x.net == nil {
		return r
	}
	r.NetworkDrainingRevision = x.net.Draining()
	r.EgressDraining = egressDraining(x.net)
	for _, f := range x.net.EgressFaults() {
		r.EgressFaults = append(r.EgressFaults, &nodev1.EgressFault{
			EgressId: f.EgressID, Kind: f.Kind, FailingSince: timestamppb.New(f.Since), Message: f.Message,
		})
	}
	for _, f := range x.net.ResolverFaults() {
		r.ResolverFaults = append(r.ResolverFaults, &nodev1.ResolverFault{
			ResolverId: f.ResolverID, Path: f.Path, Kind: f.Kind, FailingSince: timestamppb.New(f.Since), Message: f.Message,
		})
	}
	return r
}

// reported forgets ended executions an observation carried.
func (e *vmSet) reported(ids []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		if x := e.byID[id]; x != nil && x.state == ended {
			delete(e.byID, id)
			e.removeRunDir(x.runDir)
		}
	}
}

// removeRunDir removes an ended execution's run directory.
func (e *vmSet) removeRunDir(runDir string) {
	if err := os.RemoveAll(runDir); err != nil {
		e.a.log.Warn("cannot remove a run directory", "dir", runDir, "err", err)
	}
	_ = fsutil.SyncDir(filepath.Dir(runDir))
}

// runningVM finds the VM of a running execution, for the data plane.
func (e *vmSet) runningVM(id string) (vm.Instance, error) {
	inst, _, err := e.runningWithNetwork(id)
	return inst, err
}

// runningWithNetwork finds the VM of a running execution and its network
// attachment (nil: none).
func (e *vmSet) runningWithNetwork(id string) (vm.Instance, netslot.Attachment, error) {
	e.mu.Lock()
	x := e.byID[id]
	e.mu.Unlock()
	if x == nil {
		if validInstanceID(id) == nil {
			if _, err := os.Stat(filepath.Join(e.dir, id)); err == nil {
				return nil, nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("execution %s is not running", id))
			}
		}
		return nil, nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("this node has no execution %s", id))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if x.state != running || x.stopping {
		return nil, nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("execution %s is not running", id))
	}
	return x.vm, x.net, nil
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

// startExecution applies StartExecution. See execution.proto. The start
// is a run of small steps (start), each returning a Go error with its
// code; the CommandResult is made here only. Every failure says what it
// left of the writable layer (StartFailure): those from the layer step on
// carry it (a *layerError); any other came before the layer, which the
// start then never touched.
func (e *vmSet) startExecution(ctx context.Context, op *nodev1.StartExecution) *nodev1.CommandResult {
	st, err := e.start(ctx, op)
	if err == nil {
		return resultOf(st)
	}
	failed := &nodev1.StartFailure{LayerUntouched: true}
	var le *layerError
	if errors.As(err, &le) {
		failed = &nodev1.StartFailure{LayerRemoved: le.removed}
	}
	var ne *networkError
	failed.NetworkUnenforceable = errors.As(err, &ne)
	var re *readinessError
	failed.NotReady = errors.As(err, &re)
	res := failure("", connect.CodeOf(err), errorMessage(err))
	if a, aerr := anypb.New(failed); aerr == nil {
		res.Result = a
	}
	return res
}

// errorMessage is err's message without the code connect.Error puts
// before it.
func errorMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// coded is err with the code it answers as.
func coded(code connect.Code, err error) error { return connect.NewError(code, err) }

func codedf(code connect.Code, format string, args ...any) error {
	return connect.NewError(code, fmt.Errorf(format, args...))
}

// errStopping answers a start the agent's own stop cut short: the VM, if
// it started, goes on booting, and the next run re-attaches it.
var errStopping = codedf(connect.CodeCanceled, "the agent is stopping")

// layerError is a start that failed after it came to the writable layer:
// removed says whether it removed the layer it made (ctrl then no longer
// counts a layer that is gone).
type layerError struct {
	err     error
	removed bool
}

func (e *layerError) Error() string { return e.err.Error() }
func (e *layerError) Unwrap() error { return e.err }

// networkError is a start that failed because the node cannot apply the
// Workspace's network policy (StartFailure.network_unenforceable).
type networkError struct{ err error }

func (e *networkError) Error() string { return e.err.Error() }
func (e *networkError) Unwrap() error { return e.err }

// readinessError is a start whose VM was launched and whose guest never
// became ready (StartFailure.not_ready).
type readinessError struct{ err error }

func (e *readinessError) Error() string { return e.err.Error() }
func (e *readinessError) Unwrap() error { return e.err }

// launch is one start in progress: what its steps found and made.
type launch struct {
	op *nodev1.StartExecution
	id string

	layerRef              blockfile.Ref
	layerPath, volumePath string
	kernel, initrd, root  string
	layerCreated          bool
	net                   netslot.Attachment
	x                     *execution
	// bootStart is when boot started the VM: its boot time ends when the
	// guest agent first answers.
	bootStart time.Time
}

// start runs the steps of a start: validate, claim the block files, fetch
// the artifacts, ready the provider, ensure the layer, attach the network,
// boot, wait for the agent. Each is idempotent: a start repeated after a
// failure or an agent restart finds what an earlier one did.
func (e *vmSet) start(ctx context.Context, op *nodev1.StartExecution) (*nodev1.ExecutionStatus, error) {
	if err := e.admit(op); err != nil {
		return nil, err
	}
	id := op.GetInstanceId()
	if x := e.runningExecution(id); x != nil {
		return e.answerRunning(ctx, x)
	}
	// The start's lines name its execution, after the operation's ids.
	ctx = telemetry.WithLogAttrs(ctx, slog.String("instance_id", id))
	l := &launch{op: op, id: id}
	if err := e.resolveBlockFiles(l); err != nil {
		return nil, err
	}
	if err := e.claimBlockFiles(l); err != nil {
		return nil, err
	}
	defer e.unclaim(id)
	if err := e.fetchArtifacts(ctx, l); err != nil {
		return nil, err
	}
	if err := e.prepareProvider(ctx, l); err != nil {
		return nil, err
	}
	// The layer, last before the boot: a start that fails before it leaves
	// no new layer behind, so the retry still reports layer_created.
	if err := e.ensureLayer(ctx, l); err != nil {
		return nil, &layerError{err: err}
	}
	err := e.attachNetwork(ctx, l)
	if err == nil {
		err = e.boot(ctx, l)
	}
	if err == nil {
		err = e.waitAgent(ctx, l)
	}
	if err != nil {
		if errors.Is(err, errStopping) {
			return nil, err
		}
		return nil, e.undo(ctx, l, err)
	}
	return e.status(l.x), nil
}

// admit checks the operation and whether this node takes a start now.
func (e *vmSet) admit(op *nodev1.StartExecution) error {
	if err := validateStart(op); err != nil {
		return coded(connect.CodeInvalidArgument, fmt.Errorf("StartExecution: %w", err))
	}
	if e.provider == nil {
		return codedf(connect.CodeUnimplemented, "this node cannot run executions: it has no VM provider")
	}
	if err := e.provider.Available(); err != nil {
		return codedf(connect.CodeUnimplemented, "this node cannot run executions: %v", err)
	}
	if why := e.a.host.refuseIfTight(); why != "" && !e.isRunning(op.GetInstanceId()) {
		// What already runs is not affected: a repeated start of a running
		// execution is still answered.
		return codedf(connect.CodeResourceExhausted, "StartExecution refused: %s", why)
	}
	return nil
}

// runningExecution is execution id when it runs; an ended one is started
// anew.
func (e *vmSet) runningExecution(id string) *execution {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.byID[id]; x != nil && x.state == running {
		return x
	}
	return nil
}

// resolveBlockFiles finds the layer's path and checks that the Volume's
// block file exists.
func (e *vmSet) resolveBlockFiles(l *launch) error {
	var err error
	if l.layerRef, err = e.a.resolveRef(l.op.GetLayer()); err != nil {
		return err
	}
	if l.layerPath, err = l.layerRef.Path(); err != nil {
		return coded(connect.CodeInvalidArgument, err)
	}
	v := l.op.GetVolume()
	if v == nil {
		return nil
	}
	volRef, err := e.a.resolveRef(v)
	if err != nil {
		return err
	}
	if l.volumePath, err = volRef.Path(); err != nil {
		return coded(connect.CodeInvalidArgument, err)
	}
	st, err := blockfile.Stat(l.volumePath)
	if err != nil {
		return codedf(errorCode(err), "Volume block file: %v", err)
	}
	if !st.Exists {
		return codedf(connect.CodeFailedPrecondition, "the Volume's block file %s does not exist in pool %s", v.GetObjectId(), v.GetStoragePool())
	}
	return nil
}

// claimBlockFiles reserves the layer and the Volume for this start.
func (e *vmSet) claimBlockFiles(l *launch) error {
	claim := execRecord{InstanceID: l.id, Layer: recordRef{l.op.GetLayer().GetStoragePool(), l.op.GetLayer().GetObjectId()}}
	if v := l.op.GetVolume(); v != nil {
		claim.Volume = &recordRef{v.GetStoragePool(), v.GetObjectId()}
	}
	if other := e.claim(claim); other != "" {
		return codedf(connect.CodeFailedPrecondition, "execution %s uses that block file now", other)
	}
	return nil
}

// fetchArtifacts gets the kernel, initramfs and template root, all at
// once, reporting progress while something is missing.
func (e *vmSet) fetchArtifacts(ctx context.Context, l *launch) error {
	arts := []*nodev1.Artifact{l.op.GetKernel(), l.op.GetInitrd(), l.op.GetTemplateRoot()}
	paths := make([]string, len(arts))
	errs := make([]error, len(arts))
	var wg sync.WaitGroup
	for i, a := range arts {
		wg.Go(func() { paths[i], errs[i] = e.a.artifacts.Get(ctx, a) })
	}
	fetched := make(chan struct{})
	go func() { wg.Wait(); close(fetched) }()
	e.reportDelivery(l.id, arts, fetched)
	for i, err := range errs {
		if err != nil {
			return codedf(connect.CodeOf(err), "artifact %s (%s): %v", arts[i].GetDigest(), arts[i].GetName(), err)
		}
	}
	l.kernel, l.initrd, l.root = paths[0], paths[1], paths[2]
	return nil
}

// preparer is a provider that readies itself for a platform before its
// first boot (QEMU's KVM probe).
type preparer interface {
	Prepare(ctx context.Context, kernel, initrd string) error
}

func (e *vmSet) prepareProvider(ctx context.Context, l *launch) error {
	p, ok := e.provider.(preparer)
	if !ok {
		return nil
	}
	if err := p.Prepare(ctx, l.kernel, l.initrd); err != nil {
		if ctx.Err() != nil {
			return errStopping
		}
		return codedf(connect.CodeUnavailable, "the VM provider: %v", err)
	}
	return nil
}

// ensureLayer makes the writable layer unless it exists.
func (e *vmSet) ensureLayer(ctx context.Context, l *launch) error {
	st, err := blockfile.Stat(l.layerPath)
	if err != nil {
		return codedf(errorCode(err), "layer block file: %v", err)
	}
	if st.Exists {
		// A layer ResizeWorkspaceWritableLayer grew is grown here, before
		// the guest mounts it.
		if _, err := growLayer(ctx, e.a.blocks, l.layerRef, st, l.op.GetLayerCapacityBytes(), e.a.log); err != nil {
			return codedf(errorCode(err), "grow the writable layer: %v", err)
		}
		return nil
	}
	if st, err = e.a.blocks.Ensure(ctx, l.layerRef, l.op.GetLayerCapacityBytes()); err != nil {
		return codedf(errorCode(err), "make the writable layer: %v", err)
	}
	l.layerCreated = true
	e.a.log.InfoContext(ctx, "writable layer created", "path", l.layerPath, "capacity_bytes", st.CapacityBytes)
	return nil
}

// attachNetwork asks the network for the execution's attachment under the
// Workspace's policy.
func (e *vmSet) attachNetwork(ctx context.Context, l *launch) error {
	if e.network == nil {
		return codedf(connect.CodeUnimplemented, "this node has no network attachment for executions")
	}
	att, err := e.network.Attach(ctx, l.id, netslot.Policy{Network: l.op.GetNetworkPolicy(), Egresses: l.op.GetEgresses(), Resolvers: l.op.GetResolvers()})
	switch {
	case netslot.IsUnenforceable(err):
		return &networkError{coded(connect.CodeUnimplemented, err)}
	case err != nil:
		return codedf(connect.CodeUnavailable, "attach the network: %v", err)
	}
	l.net = att
	return nil
}

// boot writes the execution's record and starts its VM.
func (e *vmSet) boot(ctx context.Context, l *launch) error {
	op, id := l.op, l.id
	runDir := filepath.Join(e.dir, id)
	e.mu.Lock()
	if old := e.byID[id]; old != nil && old.state == ended {
		// An earlier execution of the instance ended and was not reported
		// yet: this start answers for it, and its run directory is reused.
		delete(e.byID, id)
	}
	e.mu.Unlock()
	if err := os.RemoveAll(runDir); err != nil {
		return coded(connect.CodeInternal, err)
	}
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return coded(errorCode(err), err)
	}
	rec := execRecord{
		InstanceID: id, BootID: op.GetBootId(), Provider: e.provider.Name(), LayerCreated: l.layerCreated,
		Layer:     recordRef{StoragePool: op.GetLayer().GetStoragePool(), ObjectID: op.GetLayer().GetObjectId()},
		StartedAt: time.Now().UTC(),
	}
	if pol := op.GetNetworkPolicy(); pol != nil {
		b, err := protojson.Marshal(&nodev1.ApplyNetworkPolicy{NetworkPolicy: pol, Egresses: op.GetEgresses(), Resolvers: op.GetResolvers()})
		if err != nil {
			return coded(connect.CodeInternal, err)
		}
		rec.Network = b
	}
	spec := vm.Spec{
		RunDir: runDir, Kernel: l.kernel, Initrd: l.initrd,
		VCPUs: int(op.GetVcpus()), MemoryMiB: op.GetMemoryBytes() / mib,
		Disks:   []vm.Disk{{Role: vm.TemplateRoot, Path: l.root}, {Role: vm.WritableLayer, Path: l.layerPath}},
		Network: l.net, BootID: op.GetBootId(), Hostname: op.GetHostname(),
	}
	if v := op.GetVolume(); v != nil {
		rec.Volume = &recordRef{StoragePool: v.GetStoragePool(), ObjectID: v.GetObjectId()}
		rec.VolumeMountPath = filepath.Clean(op.GetVolumeMountPath())
		spec.Disks = append(spec.Disks, vm.Disk{Role: vm.Volume, Path: l.volumePath, MountPath: rec.VolumeMountPath})
	}
	if err := writeRecord(runDir, rec); err != nil {
		return codedf(errorCode(err), "write the execution record: %v", err)
	}
	l.x = &execution{id: id, runDir: runDir, rec: rec, state: booting, net: l.net}
	e.mu.Lock()
	e.byID[id] = l.x
	e.mu.Unlock()
	l.bootStart = time.Now()
	inst, err := e.provider.Start(ctx, spec)
	if err != nil {
		if ctx.Err() != nil {
			return errStopping
		}
		return coded(connect.CodeUnavailable, err)
	}
	e.mu.Lock()
	l.x.vm = inst
	l.x.rec.Accel = inst.Accel()
	e.mu.Unlock()
	if l.net != nil {
		l.net.Started(runDir)
	}
	// The record names the accelerator, which the provider chose at Start.
	if err := writeRecord(runDir, l.x.rec); err != nil {
		e.a.log.WarnContext(ctx, "cannot write the execution record", "err", err)
	}
	e.a.log.InfoContext(ctx, "execution booting", "provider", rec.Provider, "pid", inst.PID(), "accel", inst.Accel(), "vcpus", spec.VCPUs, "memory_mib", spec.MemoryMiB, "boot_id", rec.BootID)
	return nil
}

// waitAgent waits for the booting guest's agent; a VM that does not boot
// is killed.
func (e *vmSet) waitAgent(ctx context.Context, l *launch) error {
	x, start := l.x, time.Now()
	wctx, cancel := context.WithTimeout(ctx, bootTimeout)
	ping, err := x.vm.WaitAgent(wctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return errStopping
		}
		code := connect.CodeDeadlineExceeded
		select {
		case <-x.vm.Exited():
			code = connect.CodeUnavailable
		default:
		}
		e.mu.Lock()
		x.stopping = true
		e.mu.Unlock()
		if kerr := x.vm.Kill(); kerr != nil {
			e.a.log.ErrorContext(ctx, "cannot kill a VM that did not boot", "pid", x.vm.PID(), "err", kerr)
		}
		return &readinessError{codedf(code, "the execution did not boot: %v", err)}
	}
	if ping.GetBootId() != x.rec.BootID {
		e.a.log.WarnContext(ctx, "the guest answers with another boot_id", "got", ping.GetBootId(), "want", x.rec.BootID)
	}
	e.mu.Lock()
	x.state, x.responding = running, true
	e.watch(x)
	e.mu.Unlock()
	e.a.metrics.booted(time.Since(l.bootStart))
	e.a.log.InfoContext(ctx, "execution running", "boot_time", time.Since(start).Round(time.Millisecond))
	e.notify()
	return nil
}

// undo forgets a start that failed after the layer step: its execution,
// its run directory, its network and the layer it made.
func (e *vmSet) undo(ctx context.Context, l *launch, err error) error {
	if x := l.x; x != nil {
		e.mu.Lock()
		if e.byID[l.id] == x {
			delete(e.byID, l.id)
		}
		e.mu.Unlock()
		e.removeRunDir(x.runDir)
	}
	if l.net != nil {
		if rerr := l.net.Release(); rerr != nil {
			e.a.log.WarnContext(ctx, "cannot release the network of a failed start", "err", rerr)
		}
	}
	e.a.log.WarnContext(ctx, "execution did not start", "code", connect.CodeOf(err), "message", errorMessage(err))
	removed := false
	if l.layerCreated {
		if _, rerr := e.a.blocks.Remove(l.layerRef); rerr != nil {
			e.a.log.WarnContext(ctx, "cannot remove the layer this failed start made", "err", rerr)
		} else {
			removed = true
		}
	}
	return &layerError{err: err, removed: removed}
}

// reportDelivery sends the start's artifact progress about once a second
// until fetched is closed, starting only when something is missing: a
// start from cached artifacts reports nothing.
func (e *vmSet) reportDelivery(id string, arts []*nodev1.Artifact, fetched <-chan struct{}) {
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

// answerRunning answers StartExecution for an execution that runs
// already, once its guest agent answers (it may still be booting after a
// restart of the agent).
func (e *vmSet) answerRunning(ctx context.Context, x *execution) (*nodev1.ExecutionStatus, error) {
	e.mu.Lock()
	responding := x.responding
	e.mu.Unlock()
	if !responding {
		wctx, cancel := context.WithTimeout(ctx, bootTimeout)
		_, err := x.vm.WaitAgent(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, errStopping
			}
			code := connect.CodeDeadlineExceeded
			select {
			case <-x.vm.Exited():
				code = connect.CodeUnavailable
			default:
			}
			return nil, codedf(code, "the execution runs but its guest agent does not answer: %v", err)
		}
	}
	e.a.log.InfoContext(ctx, "execution runs already; answering its status", "instance_id", x.id)
	return e.status(x), nil
}

func (e *vmSet) status(x *execution) *nodev1.ExecutionStatus {
	st := &nodev1.ExecutionStatus{
		InstanceId:   x.id,
		Running:      true,
		LayerCreated: x.rec.LayerCreated,
		Accel:        x.rec.Accel,
		BootId:       x.rec.BootID,
	}
	e.mu.Lock()
	attached, applied := x.net != nil, x.rec.Network
	if x.state == running {
		// What the next observation would say: ctrl records it with the
		// start (ExecutionStatus.report).
		st.Report = runningReport(x)
	}
	e.mu.Unlock()
	if attached && len(applied) > 0 {
		var rec nodev1.ApplyNetworkPolicy
		if protojson.Unmarshal(applied, &rec) == nil {
			st.AppliedNetworkPolicyRevision = rec.GetNetworkPolicy().GetRevision()
		}
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
func (e *vmSet) claim(rec execRecord) string {
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

func (e *vmSet) unclaim(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.starting, id)
}

// stopExecution applies StopExecution. See execution.proto.
func (e *vmSet) stopExecution(ctx context.Context, op *nodev1.StopExecution) *nodev1.CommandResult {
	id := op.GetInstanceId()
	if err := validInstanceID(id); err != nil {
		return failure("", connect.CodeInvalidArgument, "StopExecution: "+err.Error())
	}
	ctx = telemetry.WithLogAttrs(ctx, slog.String("instance_id", id))
	e.mu.Lock()
	x := e.byID[id]
	if x == nil || x.state != running {
		e.mu.Unlock()
		return resultOf(&nodev1.StopResult{Durable: false, Message: "not running"})
	}
	x.stopping = true
	force := op.GetForce() || x.forced
	ctxStop, forceStop := context.WithCancel(ctx)
	defer forceStop()
	x.forceStop = forceStop
	e.mu.Unlock()
	x.cancel() // no more probes

	var res nodev1.StopResult
	if force {
		if err := x.vm.Kill(); err != nil {
			return failure("", connect.CodeInternal, "kill the VM: "+err.Error())
		}
		res.Message = "killed at once (force)"
	} else {
		timeout := defaultStopTimeout
		if s := op.GetTimeoutSeconds(); s > 0 {
			timeout = time.Duration(s) * time.Second
		}
		durable, msg, exited := shutdown(ctxStop, x.vm, timeout)
		if ctx.Err() != nil && !exited {
			// The agent stops: the guest powers off by itself, and the
			// next run reports how it ended.
			return failure("", connect.CodeCanceled, "the agent is stopping")
		}
		switch {
		case exited:
			res.Durable, res.Message = durable, msg
		default:
			if err := x.vm.Kill(); err != nil {
				return failure("", connect.CodeInternal, "kill the VM: "+err.Error())
			}
			res.Message = fmt.Sprintf("the guest did not power off within %s: killed", timeout)
			if ctxStop.Err() != nil {
				res.Message = "a forced stop came before the guest powered off: killed"
			}
			if msg != "" {
				res.Message += " (" + msg + ")"
			}
		}
	}
	e.mu.Lock()
	x.state, x.end, x.responding, x.probeErr = ended, nodev1.ExecutionEnd_EXECUTION_END_STOPPED, false, ""
	e.mu.Unlock()
	e.releaseNetwork(x)
	// Answered here: a restart must not report it again.
	if err := os.Remove(filepath.Join(x.runDir, recordFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		e.a.log.WarnContext(ctx, "cannot remove the execution record", "err", err)
	}
	e.a.log.InfoContext(ctx, "execution stopped", "durable", res.Durable, "message", res.Message)
	e.notify()
	return resultOf(&res)
}

// force makes the stop of execution id under way, or the next one,
// force: see commandLanes.enqueue. An execution not running has nothing
// to force.
func (e *vmSet) force(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.byID[id]
	if x == nil || x.state != running {
		return
	}
	x.forced = true
	if x.forceStop != nil {
		x.forceStop()
	}
}

// shutdown asks the guest agent to shut down, retrying while it cannot be
// reached, then waits for the VM to exit, all within timeout. exited says
// whether the VM is gone; durable and msg are the guest's answer.
func shutdown(ctx context.Context, inst vm.Instance, timeout time.Duration) (durable bool, msg string, exited bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	answered := false
	for !answered {
		res, err := vm.Agent(inst).Shutdown(ctx, connect.NewRequest(&guestv1.ShutdownRequest{}))
		if err == nil {
			durable, msg, answered = res.Msg.GetDurable(), res.Msg.GetMessage(), true
			break
		}
		msg = "the guest agent did not answer Shutdown: " + err.Error()
		t := time.NewTimer(500 * time.Millisecond)
		select {
		case <-inst.Exited():
			t.Stop()
			return false, msg, true
		case <-ctx.Done():
			t.Stop()
			return false, msg, false
		case <-t.C:
		}
	}
	select {
	case <-inst.Exited():
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

// applyNetworkPolicy puts a running execution's new policy revision in
// force: its attachment takes it for new flows, and the record keeps it for
// the next agent start. A policy the attachment cannot apply leaves the one
// in force.
func (e *vmSet) applyNetworkPolicy(ctx context.Context, op *nodev1.ApplyNetworkPolicy) *nodev1.CommandResult {
	id := op.GetInstanceId()
	if err := validInstanceID(id); err != nil {
		return failure("", connect.CodeInvalidArgument, "ApplyNetworkPolicy: "+err.Error())
	}
	e.mu.Lock()
	x := e.byID[id]
	var att netslot.Attachment
	if x != nil && x.state == running && !x.stopping {
		att = x.net
	}
	e.mu.Unlock()
	if att == nil {
		return failure("", connect.CodeFailedPrecondition, "ApplyNetworkPolicy: execution "+id+" does not run here")
	}
	pol := op.GetNetworkPolicy()
	b, err := protojson.Marshal(&nodev1.ApplyNetworkPolicy{NetworkPolicy: pol, Egresses: op.GetEgresses(), Resolvers: op.GetResolvers()})
	if err != nil {
		return failure("", connect.CodeInvalidArgument, "ApplyNetworkPolicy: "+err.Error())
	}
	if err := att.Apply(ctx, policyOf(op), time.Duration(op.GetDrainSeconds())*time.Second); err != nil {
		code := connect.CodeUnavailable
		if netslot.IsUnenforceable(err) {
			code = connect.CodeUnimplemented
		}
		return failure("", code, "apply the network policy: "+err.Error())
	}
	e.mu.Lock()
	x.rec.Network = b
	rec := x.rec
	e.mu.Unlock()
	if err := writeRecord(x.runDir, rec); err != nil {
		e.a.log.WarnContext(ctx, "cannot write the execution record", "instance_id", id, "err", err)
	}
	e.a.log.InfoContext(ctx, "network policy applied", "instance_id", id, "revision", pol.GetRevision(), "mode", netslot.Mode(pol), "drain_seconds", op.GetDrainSeconds())
	return resultOf(&nodev1.ApplyNetworkPolicyResult{AppliedRevision: pol.GetRevision(), DrainingRevision: att.Draining(),
		Egresses: appliedEgresses(op.GetEgresses(), att)})
}

// appliedEgresses are the Egresses att now forwards through (those of the
// policy it applied), with the revisions of each it still drains.
func appliedEgresses(applied []*nodev1.ResolvedEgress, att netslot.Attachment) []*nodev1.AppliedEgress {
	draining := map[string]uint64{}
	for _, d := range att.EgressDraining() {
		draining[d.EgressID] = d.Revision
	}
	out := make([]*nodev1.AppliedEgress, 0, len(applied))
	for _, e := range applied {
		out = append(out, &nodev1.AppliedEgress{EgressId: e.GetEgressId(), AppliedRevision: e.GetRevision(), DrainingRevision: draining[e.GetEgressId()]})
	}
	return out
}

// egressDraining is att's EgressDraining as an execution report says it.
func egressDraining(att netslot.Attachment) []*nodev1.EgressDraining {
	var out []*nodev1.EgressDraining
	for _, d := range att.EgressDraining() {
		out = append(out, &nodev1.EgressDraining{EgressId: d.EgressID, Revision: d.Revision})
	}
	return out
}

// policyOf is what an attachment enforces for op.
func policyOf(op *nodev1.ApplyNetworkPolicy) netslot.Policy {
	return netslot.Policy{Network: op.GetNetworkPolicy(), Egresses: op.GetEgresses(), Resolvers: op.GetResolvers()}
}
