// Package benchfleet is what the fleet benchmarks share: a fresh ctrl per
// row, and waiting for a simulated fleet to come up, counted through the
// operator API.
package benchfleet

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/procfs"

	"github.com/kibotos/kibotos/bench/internal/benchdb"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
)

// WaitReady polls ListNodeRegistrations every second until n nodes are
// READY or timeout passed, telling progress each time the count moved, and
// returns how many are READY.
func WaitReady(ctx context.Context, nodes operatorv1connect.NodeRegistrationServiceClient, n int, timeout time.Duration, progress func(ready int)) (int, error) {
	deadline := time.Now().Add(timeout)
	last := -1
	for {
		ready, err := CountReady(ctx, nodes)
		if err != nil {
			return 0, err
		}
		if ready >= n || time.Now().After(deadline) {
			return ready, nil
		}
		if ready != last {
			progress(ready)
			last = ready
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// CountReady counts the READY nodes, a page of 1,000 at a time.
func CountReady(ctx context.Context, nodes operatorv1connect.NodeRegistrationServiceClient) (int, error) {
	count, token := 0, ""
	for {
		res, err := nodes.ListNodeRegistrations(ctx, connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{
			PageSize: 1000, PageToken: token,
			Statuses: []operatorv1.NodeRegistrationStatus{operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY},
		}))
		if err != nil {
			return 0, err
		}
		count += len(res.Msg.GetRegistrations())
		if token = res.Msg.GetNextPageToken(); token == "" {
			return count, nil
		}
	}
}

// Ctrl starts a fresh ctrl in this process for one benchmark row: its
// three listeners on loopback, its state in dir, logs discarded, on a new
// SQLite file (db "sqlite") or a new database on the PostgreSQL server pg
// (db "postgres", named prefix_<nanoseconds>). fc, when set, is its fleet
// timing.
func Ctrl(ctx context.Context, db, pg, prefix, dir string, fc *fleet.Config) (*ctrl.Server, error) {
	cfg := ctrl.Config{
		WorkspaceListen: "127.0.0.1:0", OperatorListen: "127.0.0.1:0", NodeListen: "127.0.0.1:0",
		StateDir: filepath.Join(dir, "ctrl"), Logger: slog.New(slog.DiscardHandler),
	}
	if fc != nil {
		cfg.Fleet = *fc
	}
	if db == "postgres" {
		dsn, err := benchdb.Postgres(pg, prefix)
		if err != nil {
			return nil, err
		}
		cfg.Database = dsn
	}
	return ctrl.Start(ctx, cfg)
}

// SelfCPU is this process's user and system CPU time so far (getrusage).
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err) // RUSAGE_SELF with a valid pointer cannot fail
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcessCPU is process pid's user and system CPU time so far, from
// /proc/<pid>/stat (in clock ticks of 10 ms).
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after it
	// start past its closing parenthesis.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name", pid, len(fields))
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// MachineCPU is the CPU time every processor of this machine spent busy
// so far (user, system, interrupts, steal: all but idle and iowait), from
// /proc/stat, read with Prometheus' procfs. Its difference over a run
// holds what no process of the benchmark counts: a PostgreSQL server's
// backends on the same machine, and anything else running there.
func MachineCPU() (time.Duration, error) {
	st, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	s, err := st.Stat()
	if err != nil {
		return 0, err
	}
	c := s.CPUTotal
	busy := c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	return time.Duration(busy * float64(time.Second)), nil
}
