package commitpoint_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/failpoint"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/node/vm"
	"github.com/kibotos/kibotos/internal/node/vm/fake"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/testenv"
)

// nodeID is the one node of the system.
const nodeID = "node-a"

// Its two pools: "a" is its default, "b" where MoveVolume moves to.
var poolNames = []string{"a", "b"}

// lease is the command lease of the ctrl under test: a crash holding one
// costs the restart on PostgreSQL this long (on SQLite, nothing).
const lease = "2s"

// system is one ctrl process (restarted at every crash) on one database
// and state directory, with one node agent in this process that runs the
// fake VM provider and keeps real block files in two pool directories.
type system struct {
	dsn, stateDir string
	// addrs are the ctrl's three listeners, the same at every restart so
	// the node and the clients find it again.
	addrs [3]string
	// trace is where every ctrl incarnation appends its hits.
	trace string
	c     *testenv.Cluster
	ctrl  *ctrlProc
	vms   *countingProvider
	// nodeLog is the node agent's log, read for the operations it applied.
	nodeLog string
	pools   map[string]string // name → directory
}

// ctrlProc is one incarnation of `kibotos ctrl`.
type ctrlProc struct {
	cmd    *exec.Cmd
	stderr string
	exited chan struct{}
}

// newSystem registers a platform and template the fake provider "boots"
// with an in-process ctrl on the database and state directory, then runs
// the ctrl under test on them with a node enrolled.
func newSystem(t *testing.T, dsn string) *system {
	s := &system{
		dsn: dsn, stateDir: t.TempDir(), trace: filepath.Join(t.TempDir(), "trace"), pools: map[string]string{},
	}
	s.c = testenv.New(t, func(c *ctrl.Config) { c.StateDir, c.Database = s.stateDir, dsn })
	// The ctrl under test listens where this one did (on ports it chose),
	// with the keys this one made in the state directory: the clients
	// stay.
	for i, url := range []string{s.c.Ctrl.Client.WorkspaceEndpoint, s.c.Ctrl.Client.OperatorEndpoint, s.c.Ctrl.NodeEndpoint} {
		s.addrs[i] = strings.TrimPrefix(url, "http://")
	}
	// Template and platform files no VM boots; the fake provider reads
	// the template root as its list of guest paths.
	s.c.UnbootableCatalog(t)
	s.c.Ctrl.Close()
	s.restart(t, "")

	s.vms = &countingProvider{Provider: fake.New(), starts: map[string]int{}, running: map[string]vm.Instance{}}
	s.nodeLog = filepath.Join(t.TempDir(), "node.log")
	logFile, err := os.Create(s.nodeLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	var pools []node.Pool
	for i, name := range poolNames {
		s.pools[name] = t.TempDir()
		pools = append(pools, node.Pool{Name: name, Dir: s.pools[name], Default: i == 0})
	}
	s.c.StartNodeWith(t, nodeID, t.TempDir(), func(cfg *node.Config) {
		cfg.Provider = s.vms
		cfg.Logger = slog.New(slog.NewTextHandler(logFile, nil))
	}, pools...)
	for _, name := range poolNames {
		s.c.EnsureCapacity(t, name, testenv.DefaultPoolCapacity)
	}
	return s
}

// restart ends the running ctrl, if it still runs, and starts another,
// armed with crash (KIBOTOS_FAILPOINT; "" arms nothing), and waits until
// it serves. The node reconnects on its own; a command that needs it
// meanwhile waits for it.
func (s *system) restart(t *testing.T, crash string) {
	t.Helper()
	s.stopCtrl()
	s.ctrl = s.startCtrl(t, crash, false)
}

// restartMayCrash is restart for a ctrl that may meet its crash before it
// serves (armed at a point it meets on its own, FromStart): it waits until
// the ctrl serves or was killed, and returns it.
func (s *system) restartMayCrash(t *testing.T, crash string) *ctrlProc {
	t.Helper()
	s.stopCtrl()
	s.ctrl = s.startCtrl(t, crash, true)
	return s.ctrl
}

func (s *system) stopCtrl() {
	if s.ctrl != nil {
		_ = s.ctrl.cmd.Process.Signal(syscall.SIGTERM)
		<-s.ctrl.exited
	}
}

func (s *system) startCtrl(t *testing.T, crash string, mayCrash bool) *ctrlProc {
	t.Helper()
	cmd := exec.Command(kibotosBin, "ctrl", "--state-dir", s.stateDir, "--database", s.dsn,
		"--workspace-listen", s.addrs[0], "--operator-listen", s.addrs[1], "--node-listen", s.addrs[2])
	cmd.Env = append(os.Environ(), failpoint.EnvTrace+"="+s.trace, failpoint.EnvLease+"="+lease, failpoint.EnvCrash+"="+crash)
	stderr, err := os.CreateTemp(t.TempDir(), "ctrl-*.stderr")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &ctrlProc{cmd: cmd, stderr: stderr.Name(), exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		stderr.Close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() && s.ctrl == p {
			b, _ := os.ReadFile(p.stderr)
			t.Logf("the last ctrl's stderr:\n%s", tail(string(b), 60))
		}
	})
	// It serves once its Operator endpoint answers.
	testenv.WaitFor(t, "ctrl to serve", func() bool {
		if !p.running() {
			if mayCrash && p.killedBy() == syscall.SIGKILL {
				return true
			}
			b, _ := os.ReadFile(p.stderr)
			t.Fatalf("ctrl exited before it served:\n%s", tail(string(b), 40))
		}
		_, err := s.c.Nodes.ListNodeRegistrations(context.Background(), connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{}))
		return err == nil
	})
	return p
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// killedBy is the signal that ended p, or 0 when it exited otherwise.
func (p *ctrlProc) killedBy() syscall.Signal {
	<-p.exited
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

func (p *ctrlProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// hit is one line of the trace.
type hit struct {
	point, key string
	crash      bool
}

func (s *system) hits(t *testing.T) []hit {
	t.Helper()
	b, err := os.ReadFile(s.trace)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []hit
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		h := hit{point: f[0], key: f[1], crash: len(f) == 3 && f[2] == "crash"}
		if h.key == "-" {
			h.key = ""
		}
		out = append(out, h)
	}
	return out
}

// about is the failpoint package's rule: a hit is about a command when
// its key is the command_id or one of its operations.
func about(key, commandID string) bool {
	return key == commandID || strings.HasPrefix(key, commandID+"/")
}

// countingProvider is the fake VM provider, counting the executions it
// starts per Workspace (the VM's host name) and keeping them by instance
// (the run directory's name) to say which still run.
type countingProvider struct {
	*fake.Provider
	mu      sync.Mutex
	starts  map[string]int
	running map[string]vm.Instance
}

func (p *countingProvider) Start(ctx context.Context, spec vm.Spec) (vm.Instance, error) {
	x, err := p.Provider.Start(ctx, spec)
	if err == nil {
		p.mu.Lock()
		p.starts[spec.Hostname]++
		p.running[filepath.Base(spec.RunDir)] = x
		p.mu.Unlock()
	}
	return x, err
}

func (p *countingProvider) startsOf(workspaceID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts[workspaceID]
}

// instances are the instance ids of the executions running.
func (p *countingProvider) instances() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for id, x := range p.running {
		select {
		case <-x.Exited():
		default:
			out[id] = true
		}
	}
	return out
}

// answer is what one call of a command answered.
type answer struct {
	msg proto.Message
	err error
}

// dumpRecords logs what the database holds of the command id and of the
// node's operations not yet answered, read beside the ctrl still running:
// a run that stalls (a command not done in two minutes) says where.
func (s *system) dumpRecords(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.Open(ctx, s.dsn)
	if err != nil {
		t.Logf("records of %s: %v", id, err)
		return
	}
	defer st.Close()
	err = st.Tx(ctx, func(tx *store.Tx) error {
		c, err := tx.GetCommand(id, false)
		if err != nil {
			return fmt.Errorf("command %s: %w", id, err)
		}
		t.Logf("command %s: lease %q until %s, attempts %d, next attempt %s: %v", id, c.LeaseOwner,
			c.LeaseUntil.Format(time.RFC3339Nano), c.Attempts, c.NextAttemptAt.Format(time.RFC3339Nano), protojson.Format(c.Command))
		ops, err := tx.PendingNodeOperations(nodeID, 50)
		if err != nil {
			return err
		}
		for _, op := range ops {
			t.Logf("operation not answered: %v", protojson.Format(op))
		}
		return nil
	})
	if err != nil {
		t.Logf("records of %s: %v", id, err)
	}
}
