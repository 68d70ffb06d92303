package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kibotos/kibotos/bench/internal/benchfleet"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/sim"
)

// grantEnv passes the enrollment grant to a fleet child (not in its
// arguments, which any user of the machine may list).
const grantEnv = "KIBOTOS_BENCH_FLEET_GRANT"

// simFleet is a row's simulated fleet, in this process or its own.
type simFleet interface {
	// cpu is the fleet's process's CPU time so far; 0 inline. An error
	// (the process gone) fails the row rather than show a wrong figure.
	cpu() (time.Duration, error)
	// sessions is how many of its nodes' sessions ctrl welcomed and over
	// how many connections (sim.Fleet.Established, Connections); a fleet
	// in a process of its own says so every sessionsEvery.
	sessions() (welcomed, connections int)
	// stop ends the fleet and waits for it.
	stop()
}

// sessionsEvery is how often a fleet child writes its sessions line: the
// progress lines, a second apart, show counts at most this old.
const sessionsEvery = 250 * time.Millisecond

// startFleet starts r's simulated fleet against ctrl's node endpoint,
// telling p of every StartExecution a node receives.
func startFleet(ctx context.Context, r row, endpoint, grant string, p *placements) (simFleet, error) {
	if r.fleetIn == "inline" {
		ctx, cancel := context.WithCancel(ctx)
		f, err := sim.Start(ctx, fleetConfig(endpoint, grant, r.nodes, p.observe))
		if err != nil {
			cancel()
			return nil, err
		}
		return inlineFleet{f, cancel}, nil
	}
	return startFleetProcess(ctx, r, endpoint, grant, p)
}

func fleetConfig(endpoint, grant string, nodes int, onCommand func(string, proto.Message)) sim.Config {
	return sim.Config{
		Endpoint: endpoint, Grant: grant, Nodes: nodes,
		SharedPool: sharedPool, SharedPoolDefault: true, OnCommand: onCommand, Logger: slog.New(slog.DiscardHandler),
	}
}

type inlineFleet struct {
	f      *sim.Fleet
	cancel context.CancelFunc
}

func (f inlineFleet) cpu() (time.Duration, error) { return 0, nil }

func (f inlineFleet) sessions() (int, int) { return f.f.Established(), f.f.Connections() }

func (f inlineFleet) stop() {
	f.cancel()
	f.f.Wait()
}

// processFleet is this program run again as the fleet (-fleet-child): it
// writes a line for every StartExecution its nodes receive to its stdout,
// and ends when its stdin closes.
type processFleet struct {
	cmd   *exec.Cmd
	stdin io.Closer
	// read is closed once its stdout ended.
	read chan struct{}
	// welcomed and connections are what its latest sessions line said.
	welcomed, connections atomic.Int64
}

func startFleetProcess(ctx context.Context, r row, endpoint, grant string, p *placements) (simFleet, error) {
	cmd := exec.CommandContext(ctx, r.self, "-fleet-child", "-fleet-nodes", strconv.Itoa(r.nodes), "-fleet-endpoint", endpoint)
	cmd.Env = append(os.Environ(), grantEnv+"="+grant)
	cmd.Stderr = os.Stderr
	// It dies with this process, however this one ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	f := &processFleet{cmd: cmd, stdin: stdin, read: make(chan struct{})}
	go func() {
		defer close(f.read)
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if ws, nodeID, at, ok := parseArrival(lines.Text()); ok {
				p.arrive(ws, nodeID, at)
			} else if welcomed, connections, ok := parseSessions(lines.Text()); ok {
				f.welcomed.Store(welcomed)
				f.connections.Store(connections)
			}
		}
	}()
	return f, nil
}

func (f *processFleet) cpu() (time.Duration, error) {
	return benchfleet.ProcessCPU(f.cmd.Process.Pid)
}

func (f *processFleet) sessions() (int, int) {
	return int(f.welcomed.Load()), int(f.connections.Load())
}

func (f *processFleet) stop() {
	_ = f.stdin.Close()
	<-f.read
	_ = f.cmd.Wait()
}

// An arrival line: the time (Unix nanoseconds) a StartExecution reached a
// node, its Workspace (the execution's hostname) and the node.
func arrivalLine(at time.Time, ws, nodeID string) string {
	return fmt.Sprintf("%d %s %s\n", at.UnixNano(), ws, nodeID)
}

func parseArrival(line string) (ws, nodeID string, at time.Time, ok bool) {
	fields := strings.Fields(line)
	if len(fields) != 3 {
		return "", "", time.Time{}, false
	}
	ns, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		return "", "", time.Time{}, false
	}
	return fields[1], fields[2], time.Unix(0, ns), true
}

// A sessions line: how many sessions ctrl welcomed, over how many
// connections.
func sessionsLine(welcomed, connections int) string {
	return fmt.Sprintf("sessions %d %d\n", welcomed, connections)
}

func parseSessions(line string) (welcomed, connections int64, ok bool) {
	fields := strings.Fields(line)
	if len(fields) != 3 || fields[0] != "sessions" {
		return 0, 0, false
	}
	welcomed, err1 := strconv.ParseInt(fields[1], 10, 64)
	connections, err2 := strconv.ParseInt(fields[2], 10, 64)
	return welcomed, connections, err1 == nil && err2 == nil
}

// runFleetChild is this program as a row's fleet: nodes simulated nodes
// against endpoint, each StartExecution written to stdout as it arrives
// (arrivalLine, the time taken on arrival), until stdin closes or an
// interrupt.
func runFleetChild(endpoint, grant string, nodes int) error {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var mu sync.Mutex
	f, err := sim.Start(ctx, fleetConfig(endpoint, grant, nodes, func(nodeID string, op proto.Message) {
		start, ok := op.(*nodev1.StartExecution)
		if !ok {
			return
		}
		line := arrivalLine(time.Now(), start.GetHostname(), nodeID)
		mu.Lock()
		defer mu.Unlock()
		_, _ = io.WriteString(os.Stdout, line)
	}))
	if err != nil {
		return err
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	tick := time.NewTicker(sessionsEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			mu.Lock()
			_, _ = io.WriteString(os.Stdout, sessionsLine(f.Established(), f.Connections()))
			mu.Unlock()
			continue
		case <-ctx.Done():
		}
		break
	}
	f.Wait()
	return nil
}
