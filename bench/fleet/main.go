// Command fleet measures what an idle fleet costs ctrl: the CPU and the
// database time ctrl spends keeping 1,000 or 10,000 SIMULATED nodes
// (internal/sim: the nodes run nothing) connected, observed and clock-probed
// while no Workspace is created, on SQLite and on PostgreSQL. It prints a
// table.
//
//	go run ./bench/fleet -nodes 1000,10000 -window 60s -postgres "$KIBOTOS_TEST_POSTGRES_DSN"
//
// Each row starts a fresh ctrl in this process (default fleet timings:
// observations every 5 s, clock probes every 10 s, both spread beyond 2,500
// nodes so that at most 500 observations a second arrive: at 10,000 nodes
// every 20 s and 40 s; a session already open learns its new interval
// with its next clock probe, so let -settle cover one) on a fresh database and
// the simulated fleet as a separate `kibotos sim` process (built once from
// this module), so that this process's CPU time is ctrl's alone. Once every
// node is READY and -settle has passed, it reads, over -window:
//
//   - ctrl cores: this process's user+system CPU time (getrusage) over the
//     window's wall time;
//   - DB busy: the time ctrl's transactions held a database connection
//     (store.Stats) over the wall time. On SQLite, one connection that every
//     transaction takes in turn, it is the share of time the database was
//     busy and unavailable to anything else; on PostgreSQL it sums the
//     connections;
//   - transactions/s and the mean transaction time;
//   - sim cores: the simulated fleet's CPU, for scale (not ctrl's cost).
//
// -cpuprofile writes a CPU profile of ctrl over the last row's window.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/kibotos/kibotos/bench/internal/benchfleet"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/sim"
	"github.com/kibotos/kibotos/internal/store"
)

func main() {
	nodes := flag.String("nodes", "1000,10000", "simulated fleet sizes, comma-separated")
	window := flag.Duration("window", time.Minute, "how long each row is measured")
	settle := flag.Duration("settle", 15*time.Second, "how long after the fleet is READY the window begins (first observations and clock probes written)")
	readyTimeout := flag.Duration("ready-timeout", 5*time.Minute, "longest to wait for a row's fleet to be READY")
	pg := flag.String("postgres", os.Getenv("KIBOTOS_TEST_POSTGRES_DSN"), "PostgreSQL server DSN (a database is created on it per row); empty skips PostgreSQL")
	databases := flag.String("databases", "sqlite,postgres", "databases to run on, comma-separated (postgres needs -postgres)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of ctrl over the last row's window to this file")
	ramp := flag.Duration("ramp", 0, "start the simulated nodes evenly over this long (kibotos sim --ramp), so that the instants they report at spread as a real fleet's do; 0 starts them all at once")
	flag.Parse()
	var sizes []int
	for _, s := range strings.Split(*nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fail(fmt.Errorf("-nodes %q: want positive integers", *nodes))
		}
		sizes = append(sizes, n)
	}
	tmp, err := os.MkdirTemp("", "kibotos-bench-fleet")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "kibotos")
	progress("building kibotos (the simulated fleet runs as its own process)")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/kibotos/kibotos/cmd/kibotos").CombinedOutput(); err != nil {
		fail(fmt.Errorf("go build: %v\n%s", err, out))
	}
	var rows []result
	started := time.Now().UTC()
	for _, n := range sizes {
		for _, db := range strings.Split(*databases, ",") {
			if db == "postgres" && *pg == "" {
				continue
			}
			progress("%s, %d simulated nodes", db, n)
			r, err := runRow(row{db: db, pg: *pg, nodes: n, window: *window, settle: *settle, ramp: *ramp, readyTimeout: *readyTimeout, dir: tmp, bin: bin, profile: *cpuProfile})
			if err != nil {
				fail(fmt.Errorf("%s, %d nodes: %w", db, n, err))
			}
			rows = append(rows, r)
		}
	}
	fmt.Printf("Idle fleet of SIMULATED nodes (internal/sim, its own process, nodes started over %v): %v windows after %v settling, observations every 5 s and clock probes every 10 s, spread beyond %d nodes (at most %d observations a second), GOMAXPROCS %d, started %s\n",
		*ramp, *window, *settle, int(fleet.DefaultMaxObservationRate*fleet.DefaultConfig.ObservationInterval.Seconds()), fleet.DefaultMaxObservationRate, runtime.GOMAXPROCS(0), started.Format(time.RFC3339))
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "database\tnodes\tREADY\tctrl cores\tDB busy\ttransactions/s\tmean transaction\tsim cores\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.1f%%\t%.1f\t%.2f ms\t%.3f\t\n", r.db, r.nodes, r.ready, r.ctrlCores, 100*r.dbBusy, r.txPerSecond, r.meanTx.Seconds()*1000, r.simCores)
	}
	tw.Flush()
}

type row struct {
	db, pg, dir, bin, profile string
	nodes                     int
	window, settle, ramp      time.Duration
	readyTimeout              time.Duration
}

type result struct {
	db                  string
	nodes, ready        int
	ctrlCores, simCores float64
	dbBusy, txPerSecond float64
	meanTx              time.Duration
}

func runRow(r row) (result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := filepath.Join(r.dir, fmt.Sprintf("%s-%d-%d", r.db, r.nodes, time.Now().UnixNano()))
	srv, err := benchfleet.Ctrl(ctx, r.db, r.pg, "kibotos_bench_fleet", dir, nil)
	if err != nil {
		return result{}, err
	}
	defer srv.Close()
	op := connect.WithInterceptors(auth.Bearer(srv.Client.OperatorToken))
	grant, err := sim.CreateGrant(ctx, operatorv1connect.NewEnrollmentServiceClient(http.DefaultClient, srv.Client.OperatorEndpoint, op), time.Hour)
	if err != nil {
		return result{}, err
	}
	simProc := exec.CommandContext(ctx, r.bin, "sim", "--nodes", strconv.Itoa(r.nodes), "--ctrl", srv.NodeEndpoint, "--enrollment-grant", grant, "--ramp", r.ramp.String())
	simProc.Env = append(os.Environ(), "KIBOTOS_HOME="+filepath.Join(dir, "sim"))
	if err := simProc.Start(); err != nil {
		return result{}, err
	}
	defer func() {
		_ = simProc.Process.Signal(os.Interrupt)
		_ = simProc.Wait()
	}()
	nodes := operatorv1connect.NewNodeRegistrationServiceClient(http.DefaultClient, srv.Client.OperatorEndpoint, op)
	ready, err := benchfleet.WaitReady(ctx, nodes, r.nodes, r.readyTimeout, func(ready int) { progress("  %d of %d nodes READY", ready, r.nodes) })
	if err != nil {
		return result{}, err
	}
	progress("  %d of %d nodes READY; settling %v, then measuring %v", ready, r.nodes, r.settle, r.window)
	time.Sleep(r.settle)
	if r.profile != "" {
		f, err := os.Create(r.profile)
		if err != nil {
			return result{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return result{}, err
		}
		defer pprof.StopCPUProfile()
	}
	res := result{db: r.db, nodes: r.nodes, ready: ready}
	cpu0, sim0, st0, t0 := benchfleet.SelfCPU(), processCPU(simProc.Process.Pid), srv.Store().Stats(), time.Now()
	time.Sleep(r.window)
	cpu1, sim1, st1, wall := benchfleet.SelfCPU(), processCPU(simProc.Process.Pid), srv.Store().Stats(), time.Since(t0)
	res.ctrlCores = (cpu1 - cpu0).Seconds() / wall.Seconds()
	res.simCores = (sim1 - sim0).Seconds() / wall.Seconds()
	res.dbBusy, res.txPerSecond, res.meanTx = busy(st0, st1, wall)
	return res, nil
}

// busy derives the database's busy share, transactions a second and mean
// transaction time between two readings wall apart.
func busy(a, b store.Stats, wall time.Duration) (float64, float64, time.Duration) {
	txs := b.Transactions - a.Transactions
	held := b.Held - a.Held
	mean := time.Duration(0)
	if txs > 0 {
		mean = held / time.Duration(txs)
	}
	return held.Seconds() / wall.Seconds(), float64(txs) / wall.Seconds(), mean
}

// processCPU is another process's user and system CPU time, from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func processCPU(pid int) time.Duration {
	d, err := benchfleet.ProcessCPU(pid)
	if err != nil {
		fail(err)
	}
	return d
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/fleet:", err)
	os.Exit(1)
}
