// Command admission measures how many CreateVolume commands ctrl admits per
// second, and their latency, on SQLite and on PostgreSQL, side by side in
// one run. Each admission is the real path: validation, the command row and
// the Volume record in one transaction, durably committed. It prints a table.
//
//	go run ./bench/admission -n 2000 -c 16 -postgres "$KIBOTOS_TEST_POSTGRES_DSN"
//
// scripts/bench.sh starts a throwaway PostgreSQL (fsync on) and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/kibotos/kibotos/bench/internal/benchdb"
	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/api"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/dataplane"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/telemetry"
)

func main() {
	n := flag.Int("n", 2000, "commands per row and round")
	rounds := flag.Int("rounds", 3, "rounds; rows are interleaved in each round and the median round is shown")
	conc := flag.Int("c", 16, "concurrent callers")
	pg := flag.String("postgres", os.Getenv("KIBOTOS_TEST_POSTGRES_DSN"), "PostgreSQL server DSN (a database is created on it); empty skips PostgreSQL")
	// The connect rows' requests carry no logger of their own, so
	// admission logs them with slog's default: quiet it, as the domain
	// rows' context logger is.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	prefills := flag.String("volumes", "0", "Volumes already in the pool before a row's admissions, comma-separated: each is a row")
	paths := flag.String("paths", "domain,connect", "paths to admit through, comma-separated: domain, connect")
	flag.Parse()
	ctx := context.Background()

	type row struct {
		db, path string
		volumes  int
		rounds   []result
	}
	var rows []*row
	backends := []struct{ name, dsn string }{{"sqlite", "sqlite"}}
	if *pg != "" {
		backends = append(backends, struct{ name, dsn string }{"postgres", *pg})
	}
	for _, b := range backends {
		for _, path := range strings.Split(*paths, ",") {
			for _, v := range strings.Split(*prefills, ",") {
				volumes, err := strconv.Atoi(v)
				if err != nil {
					panic(fmt.Sprintf("-volumes %q: %v", v, err))
				}
				rows = append(rows, &row{db: b.name, path: path, volumes: volumes})
			}
		}
	}
	for round := 0; round < *rounds; round++ {
		for _, r := range rows {
			dsn := r.db
			if r.db == "postgres" { // a fresh database per row and round
				var err error
				if dsn, err = benchdb.Postgres(*pg, "kibotos_bench"); err != nil {
					panic(err)
				}
			}
			res, err := run(ctx, dsn, r.path, r.volumes, *n, *conc)
			if err != nil {
				fmt.Fprintln(os.Stderr, r.db, r.path, err)
				os.Exit(1)
			}
			r.rounds = append(r.rounds, res)
		}
	}
	fmt.Printf("CreateVolume admissions: %d per row and round, %d concurrent callers, %d rounds (median round shown), GOMAXPROCS %d\n",
		*n, *conc, *rounds, runtime.GOMAXPROCS(0))
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "database\tpath\tVolumes before\tcommands/s\tp50\tp99\tall rounds (commands/s)\t")
	for _, r := range rows {
		sorted := slices.Clone(r.rounds)
		slices.SortFunc(sorted, func(a, b result) int { return int(a.perSecond - b.perSecond) })
		med := sorted[len(sorted)/2]
		var all string
		for i, x := range r.rounds {
			if i > 0 {
				all += " "
			}
			all += fmt.Sprintf("%.0f", x.perSecond)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%s\t%s\t%s\t\n", r.db, r.path, r.volumes, med.perSecond, med.p50.Round(10*time.Microsecond), med.p99.Round(10*time.Microsecond), all)
	}
	tw.Flush()
}

func sqliteDSN() string {
	dir, err := os.MkdirTemp("", "kibotos-bench")
	if err != nil {
		panic(err)
	}
	return "sqlite:" + filepath.Join(dir, "bench-"+fmt.Sprint(time.Now().UnixNano())+".db")
}

type result struct {
	perSecond float64
	p50, p99  time.Duration
}

// run admits n CreateVolume commands with conc callers, through the domain
// directly or through Connect over HTTP on an in-process server, into a
// pool that holds volumes Volumes already.
func run(ctx context.Context, dsn, path string, volumes, n, conc int) (result, error) {
	if dsn == "sqlite" {
		dsn = sqliteDSN() // a fresh file per row
	}
	st, err := store.Open(ctx, dsn)
	if err != nil {
		return result{}, err
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Admission logs each command it admits with the context's logger:
	// this one, as ctrl gives its own (not slog's default, to stderr).
	ctx = telemetry.WithLogger(ctx, log)
	runner := command.NewRunner(st, "bench", log) // not run: admissions only
	f := fleet.New(st, runner, log, fleet.DefaultConfig, fleet.Deps{})
	vols := volume.New(st, f, runner, volume.DefaultProfile)
	if err := st.Tx(ctx, func(tx *store.Tx) error {
		if err := tx.PutNode(&operatorv1.NodeRegistration{NodeId: "bench", Admission: operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED,
			StoragePools: []*operatorv1.StoragePoolAttachment{{NodeId: "bench", StoragePool: "default", DefaultPool: true, Available: true}}}); err != nil {
			return err
		}
		// A pool takes no new Volumes until it has a capacity: room for every round's.
		if err := tx.SetStoragePoolCapacity("default", 1<<62); err != nil {
			return err
		}
		for i := 0; i < volumes; i++ {
			if err := tx.PutVolume(&ctrlv1.Volume{VolumeId: fmt.Sprintf("vol-before-%d", i), State: ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE,
				Spec: &ctrlv1.VolumeSpec{StoragePool: "default", CapacityBytes: 1 << 30}}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return result{}, err
	}
	create := func(ctx context.Context, req *ctrlv1.CreateVolumeRequest) error {
		_, err := vols.Create(ctx, req)
		return err
	}
	if path == "connect" {
		ws := workspace.New(st, f, vols, runner)
		srv := httptest.NewServer(api.NewWorkspaceHandler(&api.Backend{Volumes: vols, Fleet: f, Workspaces: ws, Processes: dataplane.NewProcesses(st, ws, f, nil)}))
		defer srv.Close()
		transport := &http.Transport{MaxIdleConnsPerHost: conc}
		defer transport.CloseIdleConnections()
		client := ctrlv1connect.NewVolumeServiceClient(&http.Client{Transport: transport}, srv.URL)
		create = func(ctx context.Context, req *ctrlv1.CreateVolumeRequest) error {
			_, err := client.CreateVolume(ctx, connect.NewRequest(req))
			return err
		}
	}
	latencies := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t0 := time.Now()
				err := create(ctx, &ctrlv1.CreateVolumeRequest{
					Command: &ctrlv1.CommandMetadata{CommandId: fmt.Sprintf("bench-%s-%d", path, i)},
					Spec:    &ctrlv1.VolumeSpec{CapacityBytes: 1 << 30},
					Labels:  map[string]string{"bench": "admission"},
				})
				latencies[i] = time.Since(t0)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		return result{}, err
	}
	slices.Sort(latencies)
	return result{
		perSecond: float64(n) / elapsed.Seconds(),
		p50:       latencies[n/2],
		p99:       latencies[n*99/100],
	}, nil
}
