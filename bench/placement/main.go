// Command placement measures how many Workspaces ctrl places per second,
// and how long a placement takes, with 1,000 and 10,000 SIMULATED nodes
// (internal/sim, a simulation for scale tests: the nodes run nothing), on
// SQLite and on PostgreSQL. It prints a table.
//
//	go run ./bench/placement -nodes 1000,10000 -workspaces 1000 -c 32 -postgres "$KIBOTOS_TEST_POSTGRES_DSN"
//
// scripts/bench.sh starts a throwaway PostgreSQL (fsync on) and runs it.
//
// Each row starts, in this process, a fresh ctrl (its three listeners on
// loopback, the command runner, default fleet timings: observations every
// 5 s, clock probes every 10 s, unless -observation-interval) on a fresh database, registers the
// simulation's placeholder platform and template, and starts N simulated
// nodes holding real control sessions over loopback HTTP/2 (50 sessions a
// connection). The nodes run in a process of their own (-fleet process:
// this program run again, which reports each StartExecution's arrival on
// a pipe), so that this process's CPU and heap are ctrl's and the
// callers'; -fleet inline runs them in this process instead, sharing
// ctrl's heap, collector and CPU figure, as every row before 2026-12-04
// afternoon did. Every node declares its own pool and one shared pool,
// "sim-shared", its default, as a deployment with shared storage would:
// every node reaches the pool of every layer, so placement may choose among
// all N. Once all N are READY (ListNodeRegistrations, every second; or
// -ready-timeout passed), the row creates -workspaces Workspaces through
// the public Connect API (2 CPUs, 4 GiB, no Volume unless -volume new: a
// new Volume each, the API's default, which the node makes before the
// start), under one of two loads
// (-load, each a row side by side):
//   - closed: c callers, each one at a time: CreateWorkspace, then wait for
//     the placement, then follow it until AVAILABLE, then the next. What it
//     measures is bounded by c over the latency; raise -c until it is not.
//   - open at R a second (open:R): CreateWorkspace calls start on a fixed
//     schedule, one every 1/R s, whatever ctrl's answers, each in its own
//     caller, so a slow ctrl meets a growing queue instead of a slower
//     caller; latencies are timed from the scheduled start (no coordinated
//     omission).
//
// -follow picks how a caller follows its Workspace: wait (WaitWorkspace,
// answered when the Workspace is AVAILABLE) or poll (GetWorkspace every
// 10 ms, which costs ctrl a read per caller every 10 ms); both in one run
// are rows side by side.
//
// Definitions:
//   - placement latency: from the CreateWorkspace call (open load: its
//     scheduled start) to the moment the
//     StartExecution operation for that Workspace reaches the simulated
//     node ctrl chose (the fleet's process reads the clock then). It covers admission (the command and the Workspace
//     committed), the command runner picking the command up, resolving the
//     template and Launch, the placement decision and its commit, and the
//     session delivering the operation. Observed in the simulated node, so
//     no polling is in it.
//   - create → AVAILABLE: from the CreateWorkspace call to the first
//     GetWorkspace that reads AVAILABLE; it adds the node's answer (at once
//     in the simulation), ctrl recording it, and (poll) up to 10 ms of
//     polling.
//   - placed: Workspaces whose StartExecution reached a node in the row's
//     time; AVAILABLE: those GetWorkspace read AVAILABLE in it.
//   - CPU each: this process's CPU time (ctrl and the callers; with
//     -fleet inline the simulated fleet too) while the callers ran, over
//     the Workspaces AVAILABLE; ctrl CPU each: CPU each less the callers'
//     share, as a CPU profile of the same time counts it (the callers'
//     goroutines, their HTTP client's among them, carry the profile label
//     bench=callers; the collector's background work is counted as
//     ctrl's, whoever allocated; the profile's sampling costs a little of
//     the time it measures); fleet CPU each: the fleet's process's, for
//     scale (not ctrl's cost); machine CPU each: every processor's busy
//     time (/proc/stat) over the Workspaces AVAILABLE: the benchmark's
//     processes, a PostgreSQL server on this machine, and anything else
//     running; times placements/s it is the cores the run kept busy (two
//     here: the machine's bound); GCs and heap: this process's garbage
//     collections while the callers ran, and its heap's size at their end;
//     goroutines and stacks: this process's goroutines at their end (with
//     the fleet in a process of its own, mostly ctrl's node sessions'; the
//     callers' have ended) and the memory their stacks held
//     (runtime.MemStats.StackInuse).
//   - placements/s: Workspaces AVAILABLE divided by the time from the first
//     CreateWorkspace call to the last AVAILABLE; under an open load at most
//     the offered rate.
//
// Percentiles are nearest-rank. A fleet not READY within -ready-timeout is
// reported with the nodes READY by then, and the row goes on under that
// load; a row whose creations do not finish within -timeout reports what it
// placed by then.
package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/google/pprof/profile"
	"google.golang.org/protobuf/proto"

	"github.com/kibotos/kibotos/bench/internal/benchfleet"
	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/sim"
)

// A Workspace asks for 2 CPUs and 4 GiB: 16 fit a simulated node's 32
// CPUs at the default overcommit (1x), so the first-fit placement spreads
// 1,000 Workspaces over 63 nodes, and no node reports more executions than
// a real host would run.
const (
	cpuMillis   = 2000
	memoryBytes = 4 << 30
)

const (
	sharedPool = "sim-shared"
	pollEvery  = 10 * time.Millisecond
	// stuckAfter is how long a caller waits for its Workspace's placement
	// before it asks whether the Workspace failed (so a run whose
	// creates fail ends with the failure rather than waiting for ever).
	stuckAfter = 5 * time.Second
)

// poolBytes is the shared pool's capacity for a run of n Workspaces: the
// simulated pool's default, or room for n writable layers and new Volumes
// when that is more (4 TiB holds 1,000 of them, not 2,000).
func poolBytes(n int) uint64 {
	return max(sim.DefaultPoolBytes, uint64(n)*(workspace.DefaultLayerCapacity+newVolumeBytes))
}

func main() {
	nodes := flag.String("nodes", "1000,10000", "simulated fleet sizes, comma-separated")
	workspaces := flag.Int("workspaces", 1000, "Workspaces created per row")
	conc := flag.Int("c", 32, "concurrent callers")
	timeout := flag.Duration("timeout", 5*time.Minute, "longest a row's creations may take")
	readyTimeout := flag.Duration("ready-timeout", 3*time.Minute, "longest to wait for a row's fleet to be READY; then the row goes on with the nodes READY by then")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of this process (ctrl and the callers, whose goroutines carry the label bench=callers: go tool pprof -tagignore bench=callers shows ctrl's alone; the simulated fleet too with -fleet inline) over each row's creations, its fleet's enrollment left out, to this file (each row overwrites the last)")
	memProfile := flag.String("memprofile", "", "write a heap profile of this process at the end of each row's creations, ctrl still up, to this file, and one at their start to this file with .base appended (each row overwrites the last): what is live after a collection, and with go tool pprof -sample_index=alloc_space -diff_base FILE.base FILE what the creations allocated")
	pg := flag.String("postgres", os.Getenv("KIBOTOS_TEST_POSTGRES_DSN"), "PostgreSQL server DSN (a database is created on it per row); empty skips PostgreSQL")
	observe := flag.Duration("observation-interval", 0, "ctrl's node observation interval (0: ctrl's default, 5 s); clock probes go at twice it")
	rounds := flag.Int("rounds", 1, "rounds; rows are interleaved in each round and the median round is shown")
	databases := flag.String("databases", "sqlite,postgres", "databases to run on, comma-separated (postgres needs -postgres)")
	loads := flag.String("load", "closed", "loads, comma-separated, each a row: closed (-c callers one creation at a time) or open:R (a creation started every 1/R s, R a second)")
	volume := flag.String("volume", "none", "each Workspace's Volume: none, or new (the API's default: a Volume of 64 MiB made with it, on the node, before its start)")
	follows := flag.String("follow", "wait", "how callers follow a Workspace to AVAILABLE, comma-separated: wait (WaitWorkspace) or poll (GetWorkspace every 10 ms); each is a row")
	fleetIn := flag.String("fleet", "process", "where the simulated fleet runs: process (this program run again as the fleet, so that CPU each is ctrl's and the callers' alone) or inline (in this process, sharing ctrl's heap and collector)")
	child := flag.Bool("fleet-child", false, "run as a row's simulated fleet (internal: -fleet process starts it)")
	childNodes := flag.Int("fleet-nodes", 0, "the fleet's size (with -fleet-child)")
	childEndpoint := flag.String("fleet-endpoint", "", "ctrl's node endpoint (with -fleet-child)")
	flag.Parse()
	if *child {
		if err := runFleetChild(*childEndpoint, os.Getenv(grantEnv), *childNodes); err != nil {
			fail(err)
		}
		return
	}
	if *fleetIn != "process" && *fleetIn != "inline" {
		fail(fmt.Errorf("-fleet %q: want process or inline", *fleetIn))
	}
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	var sizes []int
	for _, s := range strings.Split(*nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench/placement: -nodes %q: want positive integers\n", *nodes)
			os.Exit(2)
		}
		sizes = append(sizes, n)
	}
	var backends []string
	for _, db := range strings.Split(*databases, ",") {
		if db == "sqlite" || (db == "postgres" && *pg != "") {
			backends = append(backends, db)
		}
	}
	tmp, err := os.MkdirTemp("", "kibotos-bench-placement")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)

	// Rows are interleaved in each round, so that a shared machine's
	// noise falls on all of them alike.
	modes := strings.Split(*follows, ",")
	for _, m := range modes {
		if m != "wait" && m != "poll" {
			fail(fmt.Errorf("-follow %q: want wait or poll", m))
		}
	}
	var offered []load
	for _, l := range strings.Split(*loads, ",") {
		ld, err := parseLoad(strings.TrimSpace(l), *conc)
		if err != nil {
			fail(err)
		}
		offered = append(offered, ld)
	}
	volumeMode, ok := map[string]ctrlv1.WorkspaceVolumeMode{
		"none": ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE, "new": ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW,
	}[*volume]
	if !ok {
		fail(fmt.Errorf("-volume %q: want none or new", *volume))
	}
	rows := make([][]result, len(sizes)*len(backends)*len(modes)*len(offered))
	started := time.Now().UTC()
	for round := range *rounds {
		for i, n := range sizes {
			for j, db := range backends {
				for l, follow := range modes {
					for m, ld := range offered {
						progress("round %d: %s, %d simulated nodes, %s load, callers %s", round+1, db, n, ld, follow)
						r, err := runRow(row{db: db, pg: *pg, nodes: n, workspaces: *workspaces, load: ld, timeout: *timeout, readyTimeout: *readyTimeout, observe: *observe, dir: tmp, follow: follow,
							volume: volumeMode, fleetIn: *fleetIn, self: self, cpuProfile: *cpuProfile, memProfile: *memProfile})
						if err != nil {
							fail(fmt.Errorf("%s, %d nodes: %w", db, n, err))
						}
						k := ((i*len(backends)+j)*len(modes)+l)*len(offered) + m
						rows[k] = append(rows[k], r)
					}
				}
			}
		}
	}
	interval := fleet.DefaultConfig.ObservationInterval
	if *observe > 0 {
		interval = *observe
	}
	fmt.Printf("Workspace placements on SIMULATED nodes (internal/sim, fleet %s): %d Workspaces per row (Volume: %s), %d rounds (median round by placements/s shown), observations every %v, spread beyond %d nodes (at most %d a second), GOMAXPROCS %d, started %s\n",
		*fleetIn, *workspaces, *volume, *rounds, interval, int(fleet.DefaultMaxObservationRate*interval.Seconds()), fleet.DefaultMaxObservationRate, runtime.GOMAXPROCS(0), started.Format(time.RFC3339))
	print(rows)
}

func print(rows [][]result) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "database\tnodes\tload\tfollow\tREADY\tfleet up\tplaced\tAVAILABLE\tplacements/s\tplacement p50\tplacement p99\tAVAILABLE p50\tAVAILABLE p99\tnodes used\ttransactions each\tcommits each\tstatements each\tDB busy\tCPU each\tctrl CPU each\tfleet CPU each\tmachine CPU each\tGCs\theap\tgoroutines\tstacks\tall rounds (placements/s)\t")
	for _, rounds := range rows {
		sorted := slices.Clone(rounds)
		slices.SortFunc(sorted, func(a, b result) int { return cmp.Compare(a.perSecond, b.perSecond) })
		r := sorted[len(sorted)/2]
		all := make([]string, len(rounds))
		for i, x := range rounds {
			all[i] = fmt.Sprintf("%.1f", x.perSecond)
		}
		fleetCPU := "in CPU each"
		if r.fleetCPUEach >= 0 {
			fleetCPU = ms(r.fleetCPUEach)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%.1f s\t%d\t%d\t%.1f\t%s\t%s\t%s\t%s\t%d\t%.1f\t%.1f\t%.1f\t%.0f%%\t%s\t%s\t%s\t%s\t%d\t%d MiB\t%d\t%d MiB\t%s\t\n", r.db, r.nodes, r.load, r.follow, r.readyNodes, r.ready.Seconds(), r.placed, len(r.available), r.perSecond,
			ms(pct(r.placement, 50)), ms(pct(r.placement, 99)), ms(pct(r.available, 50)), ms(pct(r.available, 99)), r.nodesUsed, r.txsEach, r.commitsEach, r.statementsEach, 100*r.dbBusy, ms(r.cpuEach), ms(r.ctrlCPUEach), fleetCPU, ms(r.machineCPUEach), r.collections, r.heapMiB, r.goroutines, r.stacksMiB, strings.Join(all, " "))
	}
	tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// pct is the nearest-rank percentile p of sorted durations.
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted)+99)/100 - 1
	return sorted[max(i, 0)]
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/placement:", err)
	os.Exit(1)
}

type row struct {
	db, pg       string
	nodes        int
	workspaces   int
	load         load
	timeout      time.Duration
	readyTimeout time.Duration
	observe      time.Duration
	follow       string
	// volume is each Workspace's Volume binding mode (-volume).
	volume ctrlv1.WorkspaceVolumeMode
	dir    string
	// fleetIn is where the simulated fleet runs (-fleet), self this
	// program, which -fleet process runs again as the fleet.
	fleetIn, self string
	// cpuProfile and memProfile are -cpuprofile's and -memprofile's
	// files, "" for none.
	cpuProfile, memProfile string
}

type result struct {
	db, follow           string
	load                 load
	nodes                int
	placed               int // Workspaces whose StartExecution reached a node
	readyNodes           int // READY when the creations began
	ready                time.Duration
	perSecond            float64
	placement, available []time.Duration
	nodesUsed            int
	// txsEach and commitsEach are the store's transactions and database
	// commits while the callers ran, over the Workspaces AVAILABLE (the
	// fleet's own writes in that time included).
	txsEach, commitsEach float64
	// statementsEach are the statements those transactions ran
	// (store.Stats.Statements): SQLite's SAVEPOINTs, BEGIN and COMMIT
	// left out.
	statementsEach float64
	// dbBusy is the share of the callers' time the store's transactions
	// held a connection (store.Stats.Held over wall time: on SQLite, one
	// connection, how busy the database was); cpuEach is this process's
	// CPU time (getrusage: ctrl and the callers, and the simulated fleet
	// when it runs inline) over the Workspaces AVAILABLE, fleetCPUEach the
	// fleet's process's (-1 when it runs inline).
	dbBusy       float64
	cpuEach      time.Duration
	fleetCPUEach time.Duration
	// machineCPUEach is the machine's busy CPU time over the Workspaces
	// AVAILABLE (benchfleet.MachineCPU).
	machineCPUEach time.Duration
	// ctrlCPUEach is cpuEach less the callers' share of a CPU profile of
	// the same time (samples labelled bench=callers).
	ctrlCPUEach time.Duration
	// collections are this process's garbage collections while the
	// callers ran, heapMiB its heap's size (runtime.MemStats.HeapSys) then.
	collections uint32
	heapMiB     uint64
	// goroutines and stacksMiB are this process's goroutines at the end
	// of the creations and what their stacks held.
	goroutines int
	stacksMiB  uint64
}

// placements is what the simulated nodes saw: when each Workspace's
// StartExecution arrived, and where.
type placements struct {
	mu      sync.Mutex
	arrived map[string]chan struct{} // Workspace id → closed on arrival
	at      map[string]time.Time
	node    map[string]string
	created map[string]time.Time // Workspace id → when its CreateWorkspace was called
}

func (p *placements) channel(ws string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := p.arrived[ws]
	if ch == nil {
		ch = make(chan struct{})
		p.arrived[ws] = ch
	}
	return ch
}

// observe is an inline fleet's OnCommand hook.
func (p *placements) observe(nodeID string, op proto.Message) {
	if start, ok := op.(*nodev1.StartExecution); ok {
		p.arrive(start.GetHostname(), nodeID, time.Now()) // the hostname is the Workspace id
	}
}

// arrive records that Workspace ws's StartExecution reached nodeID at at.
func (p *placements) arrive(ws, nodeID string, at time.Time) {
	ch := p.channel(ws)
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, seen := p.at[ws]; !seen {
		p.at[ws], p.node[ws] = at, nodeID
		close(ch)
	}
}

func runRow(r row) (result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := filepath.Join(r.dir, fmt.Sprintf("%s-%d-%d", r.db, r.nodes, time.Now().UnixNano()))
	var fc *fleet.Config
	if r.observe > 0 {
		c := fleet.DefaultConfig
		c.ObservationInterval, c.ClockProbeInterval = r.observe, 2*r.observe
		fc = &c
	}
	srv, err := benchfleet.Ctrl(ctx, r.db, r.pg, "kibotos_bench_placement", dir, fc)
	if err != nil {
		return result{}, err
	}
	defer srv.Close()
	if err := os.MkdirAll(filepath.Join(dir, "catalog"), 0o700); err != nil {
		return result{}, err
	}
	if err := sim.RegisterCatalog(ctx, srv.Catalog(), filepath.Join(dir, "catalog")); err != nil {
		return result{}, err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: r.load.callers + 4}}
	op := connect.WithInterceptors(auth.Bearer(srv.Client.OperatorToken))
	grant, err := sim.CreateGrant(ctx, operatorv1connect.NewEnrollmentServiceClient(hc, srv.Client.OperatorEndpoint, op), time.Hour)
	if err != nil {
		return result{}, err
	}
	p := &placements{arrived: map[string]chan struct{}{}, at: map[string]time.Time{}, node: map[string]string{}, created: map[string]time.Time{}}
	t0 := time.Now()
	fl, err := startFleet(ctx, r, srv.NodeEndpoint, grant, p)
	if err != nil {
		return result{}, err
	}
	defer fl.stop()
	nodes := operatorv1connect.NewNodeRegistrationServiceClient(hc, srv.Client.OperatorEndpoint, op)
	ready, err := benchfleet.WaitReady(ctx, nodes, r.nodes, r.readyTimeout, func(ready int) {
		welcomed, _ := fl.sessions()
		progress("  %d of %d nodes READY, %d sessions welcomed", ready, r.nodes, welcomed)
	})
	if err != nil {
		return result{}, err
	}
	res := result{db: r.db, follow: r.follow, load: r.load, nodes: r.nodes, readyNodes: ready, ready: time.Since(t0)}
	_, connections := fl.sessions()
	progress("  %d of %d nodes READY after %.1f s over %d connections", ready, r.nodes, res.ready.Seconds(), connections)
	if err := sim.EnsurePoolCapacity(ctx, nodes, sharedPool, poolBytes(r.workspaces)); err != nil {
		return result{}, err
	}

	// The callers' client is their own: its connections, dialled by the
	// callers' labelled goroutines, carry their label (create).
	callers := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: r.load.callers + 4}}
	defer callers.CloseIdleConnections()
	ws := ctrlv1connect.NewWorkspaceServiceClient(callers, srv.Client.WorkspaceEndpoint, connect.WithInterceptors(auth.Bearer(srv.Client.Token)))
	fleet0, err := fl.cpu()
	if err != nil {
		return result{}, err
	}
	if r.memProfile != "" {
		if err := writeHeapProfile(r.memProfile + ".base"); err != nil {
			return result{}, err
		}
	}
	// Read after the profile's collection, which the GCs column leaves out.
	var mem0, mem1 runtime.MemStats
	runtime.ReadMemStats(&mem0)
	stopProfile, err := startCPUProfile(r.cpuProfile)
	if err != nil {
		return result{}, err
	}
	machine0, err := benchfleet.MachineCPU()
	if err != nil {
		return result{}, err
	}
	st0, cpu0, t1 := srv.Store().Stats(), benchfleet.SelfCPU(), time.Now()
	res, err = create(ctx, r, ws, p, res)
	prof, profErr := stopProfile()
	runtime.ReadMemStats(&mem1)
	res.collections, res.heapMiB = mem1.NumGC-mem0.NumGC, mem1.HeapSys>>20
	res.goroutines, res.stacksMiB = runtime.NumGoroutine(), mem1.StackInuse>>20
	res.fleetCPUEach = -1
	fleet1, cpuErr := fl.cpu()
	machine1, machineErr := benchfleet.MachineCPU()
	cpuErr = cmp.Or(cpuErr, machineErr)
	if n := len(res.available); n > 0 && cpuErr == nil {
		st1, cpu1, wall := srv.Store().Stats(), benchfleet.SelfCPU(), time.Since(t1)
		if r.fleetIn == "process" {
			res.fleetCPUEach = (fleet1 - fleet0) / time.Duration(n)
		}
		res.txsEach = float64(st1.Transactions-st0.Transactions) / float64(n)
		res.commitsEach = float64(st1.Commits-st0.Commits) / float64(n)
		res.statementsEach = float64(st1.Statements-st0.Statements) / float64(n)
		res.dbBusy = float64(st1.Held-st0.Held) / float64(wall)
		res.cpuEach = (cpu1 - cpu0) / time.Duration(n)
		res.machineCPUEach = (machine1 - machine0) / time.Duration(n)
		share, err := ctrlShare(prof)
		profErr = cmp.Or(profErr, err)
		res.ctrlCPUEach = time.Duration(float64(res.cpuEach) * share)
	}
	err = cmp.Or(err, cpuErr, profErr)
	if err == nil && r.memProfile != "" {
		err = writeHeapProfile(r.memProfile)
	}
	return res, err
}

// startCPUProfile starts a CPU profile of the row's creations (ctrl
// CPU each is read from it), and answers what stops it and answers the
// profile; it is also written to path unless that is "".
func startCPUProfile(path string) (stop func() ([]byte, error), err error) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, err
	}
	return func() ([]byte, error) {
		pprof.StopCPUProfile()
		if path == "" {
			return buf.Bytes(), nil
		}
		return buf.Bytes(), os.WriteFile(path, buf.Bytes(), 0o644)
	}, nil
}

// ctrlShare is the share of a CPU profile's CPU time not spent in
// goroutines labelled bench=callers.
func ctrlShare(raw []byte) (float64, error) {
	p, err := profile.ParseData(raw)
	if err != nil {
		return 0, fmt.Errorf("the row's CPU profile: %w", err)
	}
	cpu := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			cpu = i
		}
	}
	if cpu < 0 {
		return 0, errors.New("the row's CPU profile has no cpu samples")
	}
	var all, callers int64
	for _, s := range p.Sample {
		all += s.Value[cpu]
		if slices.Contains(s.Label["bench"], "callers") {
			callers += s.Value[cpu]
		}
	}
	if all == 0 {
		return 1, nil
	}
	return float64(all-callers) / float64(all), nil
}

// writeHeapProfile writes what this process holds live, after a
// collection, to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// create runs the callers and collects their timings.
func create(ctx context.Context, r row, ws ctrlv1connect.WorkspaceServiceClient, p *placements, res result) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var mu sync.Mutex
	var firstErr error
	var last time.Time
	// one creates Workspace i, timed from t0; false ends its caller.
	one := func(i int, t0 time.Time) bool {
		available, err := createOne(ctx, ws, p, i, t0, r.follow, r.volume)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			// A call cut by the row's deadline ends the row: ctrl may
			// answer deadline_exceeded just before ctx says so.
			if firstErr == nil && ctx.Err() == nil && connect.CodeOf(err) != connect.CodeDeadlineExceeded {
				firstErr = err
			}
			cancel()
			return false
		}
		res.available = append(res.available, available)
		last = time.Now()
		return true
	}
	start := time.Now()
	// The callers' goroutines, and those their HTTP client starts, carry
	// a label: a CPU profile tells ctrl's CPU from theirs (ctrl CPU each).
	pprof.Do(ctx, pprof.Labels("bench", "callers"), func(ctx context.Context) {
		if r.load.rate > 0 {
			openLoad(ctx, r.workspaces, r.load.rate, start, one)
		} else {
			closedLoad(ctx, r.workspaces, r.load.callers, one)
		}
	})
	if firstErr != nil {
		return res, firstErr
	}
	if len(res.available) > 0 {
		res.perSecond = float64(len(res.available)) / last.Sub(start).Seconds()
	}
	// Placements are timed for every Workspace whose StartExecution reached
	// a node, AVAILABLE by the deadline or not.
	used := map[string]bool{}
	p.mu.Lock()
	for id, t0 := range p.created {
		if at, ok := p.at[id]; ok {
			res.placement = append(res.placement, at.Sub(t0))
			used[p.node[id]] = true
		}
	}
	p.mu.Unlock()
	res.placed, res.nodesUsed = len(res.placement), len(used)
	slices.Sort(res.placement)
	slices.Sort(res.available)
	progress("  %d placed, %d AVAILABLE, %.1f/s, on %d nodes", res.placed, len(res.available), res.perSecond, res.nodesUsed)
	return res, nil
}

// closedLoad runs n creations by callers, each one at a time.
func closedLoad(ctx context.Context, n, callers int, one func(i int, t0 time.Time) bool) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil || !one(i, time.Now()) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// openLoad starts creation i at start + i/rate, each in its own goroutine,
// whether or not the earlier ones have ended, and waits for them all.
// Creations whose time passed while this one slept start together, with
// their own scheduled times.
func openLoad(ctx context.Context, n int, rate float64, start time.Time, one func(i int, t0 time.Time) bool) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range n {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return
			}
		}
		wg.Go(func() { one(i, at) })
	}
}

// load is how a row offers its creations: callers one at a time (closed,
// rate 0) or rate a second on a schedule (open).
type load struct {
	callers int
	rate    float64
}

func parseLoad(s string, callers int) (load, error) {
	if s == "closed" {
		if callers < 1 {
			return load{}, fmt.Errorf("-c %d: want at least one caller", callers)
		}
		return load{callers: callers}, nil
	}
	r, ok := strings.CutPrefix(s, "open:")
	rate, err := strconv.ParseFloat(r, 64)
	if !ok || err != nil || rate <= 0 {
		return load{}, fmt.Errorf("-load %q: want closed or open:R, R a positive rate a second", s)
	}
	// The HTTP client keeps as many idle connections as a second's calls.
	return load{callers: int(rate), rate: rate}, nil
}

func (l load) String() string {
	if l.rate > 0 {
		return fmt.Sprintf("open %g/s", l.rate)
	}
	return fmt.Sprintf("closed %d", l.callers)
}

// awaitPlacement waits until placed is closed (the simulated node was
// told of Workspace id's start), and fails when the Workspace FAILED
// instead, asked after every stuckAfter without a placement.
func awaitPlacement(ctx context.Context, ws ctrlv1connect.WorkspaceServiceClient, placed chan struct{}, id string) error {
	for {
		select {
		case <-placed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(stuckAfter):
		}
		got, err := ws.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
		if err != nil {
			return fmt.Errorf("get %s: %w", id, err)
		}
		if w := got.Msg.GetWorkspace(); w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED {
			return fmt.Errorf("Workspace %s FAILED before it was placed: %v", id, w.GetFailure())
		}
	}
}

// newVolumeBytes is each new Volume's size (-volume new); the shared pool
// is sized for the run's layers and Volumes (poolBytes).
const newVolumeBytes = 64 << 20

// volumeBinding binds a Workspace of the benchmark to a Volume by mode.
func volumeBinding(mode ctrlv1.WorkspaceVolumeMode) *ctrlv1.WorkspaceVolumeBinding {
	b := &ctrlv1.WorkspaceVolumeBinding{Mode: mode}
	if mode == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW {
		b.NewVolume = &ctrlv1.VolumeSpec{CapacityBytes: newVolumeBytes}
	}
	return b
}

// createOne creates Workspace i and times it, from t0, to its placement
// and to AVAILABLE.
func createOne(ctx context.Context, ws ctrlv1connect.WorkspaceServiceClient, p *placements, i int, t0 time.Time, follow string, volume ctrlv1.WorkspaceVolumeMode) (available time.Duration, err error) {
	created, err := ws.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: fmt.Sprintf("bench-placement-%d", i)},
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: cpuMillis, MemoryBytes: memoryBytes},
			Volume:    volumeBinding(volume),
		},
	}))
	if err != nil {
		return 0, fmt.Errorf("create: %w", err)
	}
	id := created.Msg.GetWorkspace().GetWorkspaceId()
	p.mu.Lock()
	p.created[id] = t0
	p.mu.Unlock()
	if err := awaitPlacement(ctx, ws, p.channel(id), id); err != nil {
		return 0, err
	}
	if follow == "wait" {
		return waitAvailable(ctx, ws, id, t0)
	}
	for {
		got, err := ws.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
		if err != nil {
			return 0, fmt.Errorf("get %s: %w", id, err)
		}
		switch w := got.Msg.GetWorkspace(); w.GetState() {
		case ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE:
			return time.Since(t0), nil
		case ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED:
			return 0, fmt.Errorf("Workspace %s FAILED: %v", id, w.GetFailure())
		}
		select {
		case <-time.After(pollEvery):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// waitAvailable follows Workspace id with WaitWorkspace until AVAILABLE.
func waitAvailable(ctx context.Context, ws ctrlv1connect.WorkspaceServiceClient, id string, t0 time.Time) (time.Duration, error) {
	for {
		got, err := ws.WaitWorkspace(ctx, connect.NewRequest(&ctrlv1.WaitWorkspaceRequest{
			WorkspaceId: id, States: []ctrlv1.WorkspaceState{ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED},
		}))
		if err != nil {
			return 0, fmt.Errorf("wait for %s: %w", id, err)
		}
		switch w := got.Msg.GetWorkspace(); w.GetState() {
		case ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE:
			return time.Since(t0), nil
		case ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED:
			return 0, fmt.Errorf("Workspace %s FAILED: %v", id, w.GetFailure())
		}
	}
}

// waitReady waits until n registrations read READY, or timeout passed,
// and answers how many do.
