package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// The soak (issue 16): Workspaces on real VMs created, exec'd into,
// stopped, started and deleted in a loop while ctrl and the node agent
// are SIGKILLed at random and started again, on SQLite and on
// PostgreSQL. It counts what must never happen, each of which must be 0:
// commands lost (admitted, then not found), run twice (the node applied
// an operation or booted an instance twice, or an exec's effect is in the
// guest twice), stuck (not final once everything is quiet), and what is
// left after every Workspace was deleted: block files in the pool,
// QEMU processes and run directories of the node.
//
// Its defaults are CI's short variant (two Workspaces, two kills of each,
// about a minute and a half a database on a busy 2-core machine). The
// long form is the same test with the environment saying how long:
//
//	KIBOTOS_SOAK_DURATION=10m KIBOTOS_SOAK_WORKSPACES=4 go test -run TestSoak -v -timeout 0 ./test/e2e
//
// (scripts/soak.sh runs it on both databases). KIBOTOS_SOAK_SEED replays
// a run's schedule of kills; the seed is printed with the figures.
func TestSoak(t *testing.T) {
	set := soakSettingsFromEnv(t)
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			database := ""
			if db == "postgres" {
				database = storetest.PostgresDSN(t)
			}
			r := runSoak(t, startFleetOn(t, database), set)
			r.db = db
			t.Log("\n" + r.table())
			r.check(t)
		})
	}
}

// soakSettings are a soak's size; the zero duration is CI's short variant.
type soakSettings struct {
	workspaces int           // KIBOTOS_SOAK_WORKSPACES: Workspaces cycling at once
	duration   time.Duration // KIBOTOS_SOAK_DURATION: kills go on this long (0: until the minimum)
	kills      int           // KIBOTOS_SOAK_KILLS: at least this many kills of ctrl, and of the node
	seed       uint64        // KIBOTOS_SOAK_SEED: the schedule's random source
	// Kills come a random gap apart, in [minGap, maxGap).
	minGap, maxGap time.Duration
}

func soakSettingsFromEnv(t *testing.T) soakSettings {
	t.Helper()
	s := soakSettings{workspaces: 2, kills: 2, seed: rand.Uint64(), minGap: 3 * time.Second, maxGap: 8 * time.Second}
	for name, into := range map[string]func(string) error{
		"KIBOTOS_SOAK_WORKSPACES": func(v string) (err error) { s.workspaces, err = strconv.Atoi(v); return },
		"KIBOTOS_SOAK_KILLS":      func(v string) (err error) { s.kills, err = strconv.Atoi(v); return },
		"KIBOTOS_SOAK_DURATION":   func(v string) (err error) { s.duration, err = time.ParseDuration(v); return },
		"KIBOTOS_SOAK_SEED":       func(v string) (err error) { s.seed, err = strconv.ParseUint(v, 0, 64); return },
	} {
		if v := os.Getenv(name); v != "" {
			if err := into(v); err != nil {
				t.Fatalf("%s=%s: %v", name, v, err)
			}
		}
	}
	if s.duration > 0 {
		// The long form: fewer kills a minute, so work also runs between them.
		s.minGap, s.maxGap = 8*time.Second, 30*time.Second
	}
	return s
}

// soak is one run: the fleet (one ctrl, node "n1"), its clients, and the
// counts.
type soak struct {
	f         *fleet
	set       soakSettings
	rng       *rand.Rand // the kill schedule's; the main goroutine's only
	ws        ctrlv1connect.WorkspaceServiceClient
	processes ctrlv1connect.ProcessServiceClient
	done      atomic.Bool // the kills are over: workers finish their cycle
	logf      func(format string, args ...any)

	mu sync.Mutex
	r  soakReport
	// admitted are the long commands ctrl admitted: workspace_id and
	// command_id.
	admitted [][2]string
}

type soakReport struct {
	db, seed                string
	workspaces              int
	cycles                  int // create … delete cycles finished
	admitted, execs         int
	ctrlKills, nodeKills    int
	lost, twice, stuck      int
	leftWorkspaces          int // not DELETED at the end
	blockFiles, qemus, runs int // left after everything was deleted
	failed                  map[string]int
	notes                   []string // what each non-zero count was
	took                    time.Duration
}

const soakNode = "n1"

// runSoak runs the soak on f (ctrl only, no node yet) and returns the
// counts.
func runSoak(t *testing.T, f *fleet, set soakSettings) *soakReport {
	start := time.Now()
	t.Logf("soak: seed %#x (KIBOTOS_SOAK_SEED replays its kills), %d Workspaces, kills ≥ %d each, duration %v", set.seed, set.workspaces, set.kills, set.duration)
	f.startNode(t, soakNode, "default="+t.TempDir()+",default")
	waitUntil(t, "node "+soakNode+" READY", time.Minute, func() bool { return nodeReady(f.cfg, soakNode) })
	givePoolCapacity(t, f.cfg, "default")
	f.buildPlatformAndTemplate(t)

	s := &soak{
		f: f, set: set, rng: rand.New(rand.NewPCG(set.seed, 0x50a4)),
		ws: f.workspaces(), processes: f.processes(), logf: t.Logf,
		r: soakReport{seed: fmt.Sprintf("%#x", set.seed), workspaces: set.workspaces, failed: map[string]int{}},
	}
	var wg sync.WaitGroup
	for i := range set.workspaces {
		wg.Go(func() { s.worker(i) })
	}
	s.kill(t, start)
	s.done.Store(true)
	wg.Wait()
	s.settle(t)
	s.r.took = time.Since(start).Round(time.Second)
	return &s.r
}

// kill SIGKILLs ctrl or the node agent a random gap apart and starts it
// again at once, until the duration passed and each was killed at least
// set.kills times. It runs on the test's goroutine (it may fail the test).
func (s *soak) kill(t *testing.T, start time.Time) {
	for time.Since(start) < s.set.duration || s.r.ctrlKills < s.set.kills || s.r.nodeKills < s.set.kills {
		gap := s.set.minGap + time.Duration(s.rng.Int64N(int64(s.set.maxGap-s.set.minGap)))
		time.Sleep(gap) // the fault schedule, not a wait for readiness
		ctrlTurn := s.rng.IntN(2) == 0
		if s.r.nodeKills >= s.set.kills && s.r.ctrlKills < s.set.kills {
			ctrlTurn = true
		} else if s.r.ctrlKills >= s.set.kills && s.r.nodeKills < s.set.kills {
			ctrlTurn = false
		}
		s.mu.Lock()
		if ctrlTurn {
			s.r.ctrlKills++
		} else {
			s.r.nodeKills++
		}
		s.mu.Unlock()
		if ctrlTurn {
			t.Logf("soak: %v: SIGKILL ctrl", time.Since(start).Round(time.Second))
			s.f.restartCtrl(t)
		} else {
			t.Logf("soak: %v: SIGKILL node agent", time.Since(start).Round(time.Second))
			s.f.restartNode(t, soakNode)
		}
	}
}

// worker takes Workspaces through cycles until the kills are over.
func (s *soak) worker(i int) {
	for cycle := 0; ; cycle++ {
		if s.cycle(fmt.Sprintf("soak-%x-w%d-c%d", s.set.seed, i, cycle)) {
			s.mu.Lock()
			s.r.cycles++
			s.mu.Unlock()
		}
		if s.done.Load() {
			return
		}
	}
}

// cycle creates a Workspace with a new Volume, execs into it, stops,
// starts, execs again, reads back what the execs wrote and deletes it. A
// step that fails deletes the Workspace. It says whether every step
// succeeded.
func (s *soak) cycle(prefix string) bool {
	var id string
	ok := s.long(prefix+"-create", "create", func(ctx context.Context, cmd *ctrlv1.CommandMetadata) (*ctrlv1.WorkspaceCommand, error) {
		res, err := s.ws.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{Command: cmd, Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{MemoryBytes: 256 << 20, WritableLayerCapacityBytes: 64 << 20},
			Volume: &ctrlv1.WorkspaceVolumeBinding{
				Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW, MountPath: "/data",
				NewVolume: &ctrlv1.VolumeSpec{CapacityBytes: 32 << 20},
			},
		}}))
		if err != nil {
			return nil, err
		}
		id = res.Msg.GetWorkspace().GetWorkspaceId()
		return res.Msg.GetCommand(), nil
	})
	if id == "" {
		return false
	}
	ok = ok && s.exec(id, prefix+"-exec1", "echo "+prefix+"-exec1 >> /data/soak.log && sync") != nil
	ok = ok && s.long(prefix+"-stop", "stop", func(ctx context.Context, cmd *ctrlv1.CommandMetadata) (*ctrlv1.WorkspaceCommand, error) {
		return commandOf(s.ws.StopWorkspace(ctx, connect.NewRequest(&ctrlv1.StopWorkspaceRequest{Command: cmd, WorkspaceId: id})))
	})
	ok = ok && s.long(prefix+"-start", "start", func(ctx context.Context, cmd *ctrlv1.CommandMetadata) (*ctrlv1.WorkspaceCommand, error) {
		return commandOf(s.ws.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd, WorkspaceId: id})))
	})
	ok = ok && s.exec(id, prefix+"-exec2", "echo "+prefix+"-exec2 >> /data/soak.log && sync") != nil
	if ok {
		if out := s.exec(id, prefix+"-read", "cat /data/soak.log"); out == nil {
			ok = false
		} else {
			s.checkExecsRanOnce(id, *out, prefix+"-exec1", prefix+"-exec2")
		}
	}
	deleted := s.long(prefix+"-delete", "delete", func(ctx context.Context, cmd *ctrlv1.CommandMetadata) (*ctrlv1.WorkspaceCommand, error) {
		return commandOf(s.ws.DeleteWorkspace(ctx, connect.NewRequest(&ctrlv1.DeleteWorkspaceRequest{Command: cmd, WorkspaceId: id})))
	})
	return ok && deleted
}

// commandOf is the command a lifecycle call answered.
func commandOf[T any](res *connect.Response[T], err error) (*ctrlv1.WorkspaceCommand, error) {
	if err != nil {
		return nil, err
	}
	return any(res.Msg).(interface {
		GetCommand() *ctrlv1.WorkspaceCommand
	}).GetCommand(), nil
}

// checkExecsRanOnce: each exec's line is in the Volume exactly once.
func (s *soak) checkExecsRanOnce(id, log string, execs ...string) {
	lines := strings.Fields(log)
	for _, e := range execs {
		switch n := slicesCount(lines, e); {
		case n == 0:
			s.note(&s.r.lost, "exec %s of %s answered exit 0 and left no line in the Volume: %q", e, id, log)
		case n > 1:
			s.note(&s.r.twice, "exec %s of %s ran %d times: %q", e, id, n, log)
		}
	}
}

func slicesCount(lines []string, s string) int {
	n := 0
	for _, l := range lines {
		if l == s {
			n++
		}
	}
	return n
}

// note counts one occurrence of something that must not happen.
func (s *soak) note(count *int, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*count++
	s.r.notes = append(s.r.notes, fmt.Sprintf(format, args...))
}

func (s *soak) failed(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.r.failed[what]++
}

// Bounds: a client retries what it did not hear back about for
// retryFor; a command not final soakStuckAfter after admission is given
// up by its worker (settle decides whether it is stuck).
const (
	retryFor       = 3 * time.Minute
	soakStuckAfter = 5 * time.Minute
)

// retry calls fn until it answers, as a client does that did not hear back
// (ctrl or the node agent killed under the call): with the same
// command_id, while the error is one a retry may cure. what names the call
// in the log.
func (s *soak) retry(what string, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(retryFor)
	for tries := 1; ; tries++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := fn(ctx)
		cancel()
		if err == nil {
			return nil
		}
		switch connect.CodeOf(err) {
		case connect.CodeInvalidArgument:
			// connect-go's own word for a response stream cut mid-message
			// (ctrl killed while it streamed), not an answer of ctrl's.
			if !strings.Contains(err.Error(), "protocol error: incomplete envelope") {
				break
			}
			fallthrough
		case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnknown, connect.CodeInternal, connect.CodeCanceled, connect.CodeAborted:
			if tries == 1 || tries%25 == 0 {
				s.logf("%s: try %d: %v; retrying", what, tries, err)
			}
			if time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
				continue
			}
		}
		s.logf("%s: try %d: %v; giving up", what, tries, err)
		return err
	}
}

// long admits a long command under commandID (retrying the call) and
// waits until it is final. It says whether it succeeded.
func (s *soak) long(commandID, kind string, admit func(context.Context, *ctrlv1.CommandMetadata) (*ctrlv1.WorkspaceCommand, error)) bool {
	var c *ctrlv1.WorkspaceCommand
	err := s.retry(commandID, func(ctx context.Context) (err error) {
		c, err = admit(ctx, &ctrlv1.CommandMetadata{CommandId: commandID})
		return err
	})
	if err != nil {
		s.failed(kind + " refused: " + connect.CodeOf(err).String())
		return false
	}
	s.mu.Lock()
	s.r.admitted++
	s.admitted = append(s.admitted, [2]string{c.GetWorkspaceId(), commandID})
	s.mu.Unlock()
	final, err := s.waitFinal(c.GetWorkspaceId(), commandID, soakStuckAfter)
	s.logf("%s of %s: %v %v", commandID, c.GetWorkspaceId(), final.GetState(), err)
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound:
		s.note(&s.r.lost, "%s %s of %s: admitted, then %v", kind, commandID, c.GetWorkspaceId(), err)
		return false
	case err != nil:
		return false // not final: settle counts it
	case final.GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED:
		f := final.GetFailure()
		s.failed(fmt.Sprintf("%s failed: %v %v: %s", kind, f.GetStage(), f.GetReason(), f.GetMessage()))
		return false
	}
	return true
}

// waitFinal polls the command until SUCCEEDED or FAILED, for at most
// bound; ctrl being away meanwhile is waited out.
func (s *soak) waitFinal(workspaceID, commandID string, bound time.Duration) (*ctrlv1.WorkspaceCommand, error) {
	deadline := time.Now().Add(bound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := s.ws.GetWorkspaceCommand(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{WorkspaceId: workspaceID, CommandId: commandID}))
		cancel()
		if connect.CodeOf(err) == connect.CodeNotFound {
			return nil, err
		}
		var c *ctrlv1.WorkspaceCommand
		if err == nil {
			c = res.Msg.GetCommand()
		}
		if c.GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED || c.GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not final after %v (last: %v, %v)", bound, c, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// exec runs script in the Workspace under commandID, retrying (a replay
// streams the same process again) until its exit arrives. It returns the
// output of an exit 0, nil otherwise.
func (s *soak) exec(id, commandID, script string) *string {
	var out strings.Builder
	var exit *ctrlv1.ProcessExitStatus
	err := s.retry(commandID, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		stream, err := s.processes.ExecProcess(ctx, connect.NewRequest(&ctrlv1.ExecProcessRequest{
			Command: &ctrlv1.CommandMetadata{CommandId: commandID}, WorkspaceId: id, Spec: &ctrlv1.ProcessSpec{Argv: []string{"sh", "-c", script}},
		}))
		if err != nil {
			return err
		}
		defer stream.Close()
		out.Reset()
		for stream.Receive() {
			out.Write(stream.Msg().GetOutput().GetData())
			if e := stream.Msg().GetExit(); e != nil {
				exit = e
				return nil
			}
		}
		if stream.Err() == nil {
			return connect.NewError(connect.CodeUnavailable, errors.New("the stream ended without an exit"))
		}
		return stream.Err()
	})
	s.mu.Lock()
	s.r.execs++
	s.mu.Unlock()
	s.logf("%s of %s: exit %v %v", commandID, id, exit, err)
	switch {
	case connect.CodeOf(err) == connect.CodeAlreadyExists:
		// Its own command_id, the same input: ctrl forgot the start.
		s.note(&s.r.lost, "exec %s of %s: a retry with its own command_id answered %v", commandID, id, err)
	case err != nil:
		s.failed("exec: " + connect.CodeOf(err).String())
	case exit.GetExitCode() != 0:
		s.failed(fmt.Sprintf("exec exited %d", exit.GetExitCode()))
	default:
		o := out.String()
		return &o
	}
	return nil
}

// Bounds of the end, once the kills are over and ctrl and the node run:
// every command is final, and what deletion removes is gone.
const (
	soakSettleFor = 3 * time.Minute
	soakQuietFor  = 2 * time.Minute
)

// settle counts, once no more kills come: the commands not final (stuck),
// the Workspaces not deleted, what the node applied or booted twice, and
// what is left of the deleted Workspaces once the node is quiet.
func (s *soak) settle(t *testing.T) {
	for _, c := range s.admitted {
		if _, err := s.waitFinal(c[0], c[1], soakSettleFor); connect.CodeOf(err) == connect.CodeNotFound {
			s.note(&s.r.lost, "command %s of %s: %v", c[1], c[0], err)
		} else if err != nil {
			s.note(&s.r.stuck, "command %s of %s: %v", c[1], c[0], err)
		}
	}
	for _, w := range s.listWorkspaces(t) {
		if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED {
			s.note(&s.r.leftWorkspaces, "Workspace %s is %v", w.GetWorkspaceId(), w.GetState())
		}
	}
	s.checkNodeRanEachOnce(t)

	n := s.f.nodes[soakNode]
	var files, qemus, runs []string
	deadline := time.Now().Add(soakQuietFor)
	for {
		files, qemus, runs = s.leftBlockFiles(t, n.pools), leftQEMUs(n.stateDir), leftRunDirs(n.stateDir)
		if len(files)+len(qemus)+len(runs) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, f := range files {
		s.note(&s.r.blockFiles, "block file left: %s", f)
	}
	for _, q := range qemus {
		s.note(&s.r.qemus, "QEMU left: %s", q)
	}
	for _, r := range runs {
		s.note(&s.r.runs, "run directory left: %s", r)
	}
}

func (s *soak) listWorkspaces(t *testing.T) []*ctrlv1.Workspace {
	t.Helper()
	var all []*ctrlv1.Workspace
	token := ""
	for {
		res, err := s.ws.ListWorkspaces(context.Background(), connect.NewRequest(&ctrlv1.ListWorkspacesRequest{PageSize: 1000, PageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, res.Msg.GetWorkspaces()...)
		if token = res.Msg.GetNextPageToken(); token == "" {
			return all
		}
	}
}

// leftBlockFiles are the files in the pools' directories that no Volume
// or writable layer ctrl lists in that pool accounts for.
func (s *soak) leftBlockFiles(t *testing.T, pools []string) []string {
	t.Helper()
	var left []string
	for _, p := range pools {
		name, dir, _ := strings.Cut(p, "=")
		dir = strings.TrimSuffix(dir, ",default")
		known := map[string]bool{}
		res, err := s.f.operator().ListStoragePoolObjects(context.Background(), connect.NewRequest(&operatorv1.ListStoragePoolObjectsRequest{StoragePool: name, PageSize: 1000}))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range res.Msg.GetObjects() {
			known[filepath.Join("volumes", o.GetVolumeId()+".img")] = o.GetVolumeId() != ""
			known[filepath.Join("layers", o.GetWorkspaceId()+".img")] = o.GetVolumeId() == ""
		}
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if rel, _ := filepath.Rel(dir, path); !known[rel] {
					left = append(left, path)
				}
			}
			return nil
		})
	}
	return left
}

// leftQEMUs are the QEMU processes whose command line names the node's
// state directory, where its run directories are.
func leftQEMUs(stateDir string) []string {
	out, _ := exec.Command("pgrep", "-a", "-f", "qemu-system.*"+stateDir).Output()
	var left []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			left = append(left, l)
		}
	}
	return left
}

// leftRunDirs are the node's execution run directories.
func leftRunDirs(stateDir string) []string {
	dirs, _ := filepath.Glob(filepath.Join(stateDir, "executions", "*"))
	return dirs
}

var (
	bootingLine  = regexp.MustCompile(`msg="execution booting".* instance_id=(\S+)`)
	notBootLine  = regexp.MustCompile(`msg="execution did not start".* instance_id=(\S+)`)
	instanceAttr = regexp.MustCompile(`instance_id=(\S+)`)
)

// checkNodeRanEachOnce reads what the node logged over all its runs: no
// operation applied twice (the node answers a repeat from its record),
// and no instance booted again after a boot that did not fail.
func (s *soak) checkNodeRanEachOnce(t *testing.T) {
	applied := map[string]int{}
	boots := map[string]int{}
	for _, path := range s.f.nodes[soakNode].stderrs {
		for op, n := range appliedOperations(t, path) {
			applied[op] += n
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if bootingLine.MatchString(line) {
				boots[instanceAttr.FindStringSubmatch(line)[1]]++
			} else if notBootLine.MatchString(line) {
				boots[instanceAttr.FindStringSubmatch(line)[1]]--
			}
		}
	}
	for _, op := range slices.Sorted(maps.Keys(applied)) {
		if applied[op] > 1 {
			s.note(&s.r.twice, "the node applied operation %s %d times", op, applied[op])
		}
	}
	for _, id := range slices.Sorted(maps.Keys(boots)) {
		if boots[id] > 1 {
			s.note(&s.r.twice, "the node booted instance %s %d times without a failed boot between", id, boots[id])
		}
	}
}

// table prints the counts.
func (r *soakReport) table() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "database\t%s\nseed\t%s\nWorkspaces\t%d\ncycles finished\t%d\nlong commands admitted\t%d\nexecs\t%d\nctrl kills\t%d\nnode agent kills\t%d\n",
		r.db, r.seed, r.workspaces, r.cycles, r.admitted, r.execs, r.ctrlKills, r.nodeKills)
	fmt.Fprintf(w, "commands lost\t%d\nrun twice\t%d\nstuck\t%d\nWorkspaces not deleted\t%d\nleaked block files\t%d\nleaked QEMU processes\t%d\nleaked run directories\t%d\ntook\t%v\n",
		r.lost, r.twice, r.stuck, r.leftWorkspaces, r.blockFiles, r.qemus, r.runs, r.took)
	for _, k := range slices.Sorted(maps.Keys(r.failed)) {
		fmt.Fprintf(w, "failed (%s)\t%d\n", k, r.failed[k])
	}
	w.Flush()
	for _, n := range r.notes {
		b.WriteString("  " + n + "\n")
	}
	return b.String()
}

// check fails the test on any count that must be 0.
func (r *soakReport) check(t *testing.T) {
	t.Helper()
	for what, n := range map[string]int{
		"commands lost": r.lost, "run twice": r.twice, "stuck": r.stuck, "Workspaces not deleted": r.leftWorkspaces,
		"leaked block files": r.blockFiles, "leaked QEMU processes": r.qemus, "leaked run directories": r.runs,
	} {
		if n != 0 {
			t.Errorf("%s: %d, want 0 (seed %s)", what, n, r.seed)
		}
	}
	if r.cycles == 0 {
		t.Errorf("no cycle finished (seed %s): %v", r.seed, r.failed)
	}
}
