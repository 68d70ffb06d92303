package commitpoint_test

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/failpoint"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

// The commit-point test (issue 16). For each command, a run without a
// crash lists the points ctrl meets and how often; then, for every hit of
// every point, a fresh run of the command SIGKILLs ctrl there, ctrl is
// started again on the same database, and the client sends the command
// again under its command_id until it is answered. Each run then checks:
//   - the command ended, exactly once (one command.ended in every
//     incarnation's trace), and succeeded;
//   - a replay answers what the first answer said (or, when the crash came
//     before any answer, what the first replay said);
//   - the node started the executions the command needs, no more, and
//     applied no operation twice;
//   - ctrl's records agree with the node: the block files in each pool
//     directory are exactly the Volumes and layers ctrl lists there, at
//     their capacities (each Volume where the Volume API says), and the
//     executions running are exactly the placements ctrl lists, which are
//     the AVAILABLE Workspaces'.
//
// A batched registration commit (fleet.batch-written, -committed) serves
// no one command: it falls inside a command's run when a node's
// observation is written meanwhile, which timing decides. The walk
// "reconnects" crashes ctrl at each of them for certain, with no command
// in flight (walkReconnects).
//
// Every point of failpoint.Points must have crashed ctrl at least once on
// each database. Each command walks on a system of its own (a database, a
// ctrl, a node), so the walks run in parallel.
func TestACrashAtEveryCommitPoint(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			crashes, walked := map[string]int{}, 0
			walks := map[string]func(*testing.T, *system){reconnects: func(t *testing.T, s *system) { s.walkReconnects(t) }}
			for _, sc := range scenarios {
				walks[sc.name] = func(t *testing.T, s *system) { s.walk(t, sc) }
			}
			t.Run("walks", func(t *testing.T) {
				for name, walk := range walks {
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						s := newSystem(t, b.DSN(t))
						walk(t, s)
						mu.Lock()
						defer mu.Unlock()
						walked++
						for _, h := range s.hits(t) {
							if h.crash {
								crashes[h.point]++
							}
						}
					})
				}
			})
			if walked < len(walks) {
				return // the walks that failed, or were skipped (no PostgreSQL), said so
			}
			for _, p := range failpoint.Points {
				if crashes[p] == 0 {
					t.Errorf("the walk never crashed ctrl at %s", p)
				}
			}
			t.Logf("crashes by point: %v", crashes)
		})
	}
}

// reconnects names the walk that crashes ctrl in the batched commit of a
// node's first observation after it reconnects.
const reconnects = "NodeReconnects"

// walkReconnects crashes ctrl at each point without a key
// (failpoint.Keyless) from its start: a ctrl armed so is started, the node
// connects to it again, and the node's first observation, which is always
// written (it ends SYNCING) and always in a batch, crashes it. Then a ctrl
// started without a crash must see the node READY again, with a running
// Workspace's execution reported, and the records must agree with the
// node.
func (s *system) walkReconnects(t *testing.T) {
	id := newWorkspace(t, s, reconnects)
	for _, point := range failpoint.Keyless {
		p := s.restartMayCrash(t, point+"@"+failpoint.FromStart+"#1")
		select {
		case <-p.exited:
		case <-time.After(2 * time.Minute):
			t.Fatalf("ctrl armed at %s did not crash within two minutes of its start", point)
		}
		if sig := p.killedBy(); sig != syscall.SIGKILL {
			t.Fatalf("ctrl armed at %s exited (signal %v) without its failpoint", point, sig)
		}
		if h := s.lastCrash(t); h.point != point || h.key != "" {
			t.Fatalf("ctrl crashed at %s %q, want %s", h.point, h.key, point)
		}
		t.Logf("ctrl crashed at %s, in its node's first batch", point)
		s.restart(t, "")
		s.c.WaitStatus(t, nodeID, operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY)
		s.agree(t, "a crash at "+point)
		if n := s.vms.startsOf(id); n != 1 {
			t.Errorf("after a crash at %s, the node started %d executions of %s, want 1", point, n, id)
		}
	}
}

// step is one crash of the walk: at the n-th hit of point.
type step struct {
	point string
	n     int
}

func (st step) commandID(sc scenario) string { return fmt.Sprintf("%s-%s-%d", sc.name, st.point, st.n) }

// arm is the KIBOTOS_FAILPOINT value that crashes at st in sc.
func (st step) arm(sc scenario) string {
	return fmt.Sprintf("%s@%s#%d", st.point, st.commandID(sc), st.n)
}

// walk runs sc once without a crash, then once with a crash at each hit
// of each point that run met.
func (s *system) walk(t *testing.T, sc scenario) {
	traceID := sc.name + "-trace"
	s.run(t, sc, traceID, step{}, "")
	plan := s.plan(t, traceID)
	t.Logf("%s meets %d hits of the points: %v", sc.name, len(plan), plan)
	if len(plan) == 0 {
		t.Fatalf("%s met no point", sc.name)
	}
	s.restart(t, plan[0].arm(sc))
	for i, st := range plan {
		next := ""
		if i+1 < len(plan) {
			next = plan[i+1].arm(sc)
		}
		s.run(t, sc, st.commandID(sc), st, next)
	}
}

// plan lists the hits the command traceID met: keyed points by their hits
// about it, the others by their hits from its first to its end.
func (s *system) plan(t *testing.T, traceID string) []step {
	t.Helper()
	counts := map[string]int{}
	in := false
	for _, h := range s.hits(t) {
		in = in || about(h.key, traceID)
		if !in || h.key != "" && !about(h.key, traceID) {
			continue
		}
		counts[h.point]++
		if h.point == failpoint.Ended && h.key == traceID {
			break
		}
	}
	var plan []step
	for _, p := range failpoint.Points {
		for n := 1; n <= counts[p]; n++ {
			plan = append(plan, step{p, n})
		}
	}
	return plan
}

// run runs sc's command id on a ctrl armed to crash at st (none when st
// is zero); after a crash, the ctrl started in its place is armed with
// next. Then it checks what the test says.
func (s *system) run(t *testing.T, sc scenario, id string, st step, next string) {
	t.Helper()
	began := time.Now()
	defer func() { t.Logf("%s: %s", id, time.Since(began).Round(time.Millisecond)) }()
	defer func() {
		if t.Failed() {
			s.dumpRecords(t, id)
		}
	}()
	var target string
	if sc.setup != nil {
		target = sc.setup(t, s, id+"-setup")
	}
	p := s.ctrl
	answers := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		m, err := sc.send(ctx, s, id, target)
		answers <- answer{m, err}
	}()
	first, crashed := s.await(t, sc, p, id, target, answers)
	switch {
	case crashed:
		if sig := p.killedBy(); sig != syscall.SIGKILL {
			t.Fatalf("%s: ctrl exited (signal %v) without its failpoint", id, sig)
		}
		if h := s.lastCrash(t); h.point != st.point || h.key != "" && !about(h.key, id) {
			t.Fatalf("%s: ctrl crashed at %s %s, want %s", id, h.point, h.key, st.point)
		}
		s.restart(t, next)
		if first == nil {
			a := <-answers // the call ends with ctrl's connection
			first = &a
		}
	case st.point != "":
		// The run met the point fewer times than the run without a crash
		// did (timing: a wake racing a step's end adds or saves a step).
		t.Logf("%s: ctrl did not meet %s a %d. time in this run", id, st.point, st.n)
		s.restart(t, next)
	}
	s.finish(t, sc, id, target, first)
}

// await waits until the command id is answered and done on ctrl p, or p
// died. It returns the first answer, if there was one before p died. The
// command's end (its state, read through the API) may show before p meets
// the point after that commit: the run is over only once the trace shows
// command.ended for id, the last point a command meets.
func (s *system) await(t *testing.T, sc scenario, p *ctrlProc, id, target string, answers <-chan answer) (*answer, bool) {
	t.Helper()
	var first *answer
	done := false
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-p.exited:
			return first, true
		case a := <-answers:
			first = &a
		case <-time.After(20 * time.Millisecond):
		}
		if first != nil && first.err != nil {
			// The call failed: with ctrl's death, or ctrl refused it.
			select {
			case <-p.exited:
				return first, true
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: %v", id, first.err)
			}
		}
		if first != nil && !done {
			if sc.target != nil {
				target = sc.target(first.msg)
			}
			done = sc.done(t, s, id, target)
		}
		if done && s.ended(t, id) > 0 {
			if s.crashedAbout(t, id) {
				<-p.exited
				return first, true
			}
			return first, false
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done after two minutes", id)
		}
	}
}

// ended counts the command.ended hits of id in every incarnation's trace.
func (s *system) ended(t *testing.T, id string) int {
	t.Helper()
	n := 0
	for _, h := range s.hits(t) {
		if h.point == failpoint.Ended && h.key == id {
			n++
		}
	}
	return n
}

// endUnheard says whether the command id, final through the API, may have
// ended unheard: the last crash was at a point without a key (an
// observation batch), which can come after the command's final commit
// and before its worker met command.ended. No later ctrl runs a final
// command, so the trace then never shows its end. (Batches share their
// commit with the command steps around them, which made this common.)
func (s *system) endUnheard(t *testing.T, sc scenario, id string) bool {
	t.Helper()
	if !sc.final {
		return false
	}
	in, keyless := false, false
	for _, h := range s.hits(t) {
		in = in || about(h.key, id)
		if in && h.crash {
			keyless = h.key == ""
		}
	}
	return keyless
}

// crashedAbout says whether a ctrl crashed at a hit about id, or at a
// point without a key after id's first hit.
func (s *system) crashedAbout(t *testing.T, id string) bool {
	t.Helper()
	in := false
	for _, h := range s.hits(t) {
		in = in || about(h.key, id)
		if in && h.crash && (h.key == "" || about(h.key, id)) {
			return true
		}
	}
	return false
}

// finish replays the command until ctrl answers it, waits for its end,
// replays it again and checks the run.
func (s *system) finish(t *testing.T, sc scenario, id, target string, first *answer) {
	t.Helper()
	replay := s.replay(t, sc, id, target)
	if sc.target != nil {
		target = sc.target(replay)
	}
	// The command's target may show its end before the command's last
	// step committed (a move settles, then removes its source copy): the
	// trace's command.ended is the end.
	waitLong(t, id+" done", func() bool { return sc.done(t, s, id, target) && (s.ended(t, id) > 0 || s.endUnheard(t, sc, id)) })
	again := s.replay(t, sc, id, target)
	want := replay
	if first != nil && first.err == nil {
		want = first.msg
	}
	if !proto.Equal(again, want) {
		t.Errorf("%s: a replay answered\n%v\nwant (the first answer)\n%v", id, again, want)
	}
	if ended := s.ended(t, id); ended > 1 || ended == 0 && !s.endUnheard(t, sc, id) {
		t.Errorf("%s ended %d times, want once", id, ended)
	}
	if sc.starts >= 0 {
		if n := s.vms.startsOf(target); n != sc.starts {
			t.Errorf("%s: the node started %d executions of %s, want %d", id, n, target, sc.starts)
		}
	}
	s.agree(t, id)
	if sc.cleanup != nil {
		sc.cleanup(t, s, id+"-cleanup", target)
	}
}

// replay sends the command again until ctrl answers it (a MoveVolume
// waits for its move), for two minutes at most.
func (s *system) replay(t *testing.T, sc scenario, id, target string) proto.Message {
	t.Helper()
	var last error
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		m, err := sc.send(ctx, s, id, target)
		cancel()
		if err == nil {
			return m
		}
		last = err
	}
	t.Fatalf("%s: no replay answered within two minutes: %v", id, last)
	return nil
}

// waitLong is testenv.WaitFor with room for a command's retry (30 s).
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after two minutes waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *system) lastCrash(t *testing.T) hit {
	t.Helper()
	hits := s.hits(t)
	for i := len(hits) - 1; i >= 0; i-- {
		if hits[i].crash {
			return hits[i]
		}
	}
	t.Fatal("ctrl was killed and its trace names no crash")
	return hit{}
}

// agree checks that ctrl's records agree with the node: block files and
// executions; and that the node applied no operation twice.
func (s *system) agree(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	waitLong(t, "the pools to keep no copies", func() bool {
		for _, name := range poolNames {
			res, err := s.c.Nodes.GetStoragePool(ctx, connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: name}))
			if err != nil || res.Msg.GetPool().GetCleanupCount() != 0 {
				return false
			}
		}
		return true
	})
	// The pools' objects are exactly the block files, at their
	// capacities; the Volume API places each Volume where they do.
	files, want := s.blockFiles(t), map[string]int64{}
	for _, name := range poolNames {
		for _, o := range s.objects(t, name) {
			if o.GetKind() == operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_VOLUME {
				want[filepath.Join(s.pools[name], "volumes", o.GetVolumeId()+".img")] = int64(o.GetCapacityBytes())
			} else {
				want[filepath.Join(s.pools[name], "layers", o.GetWorkspaceId()+".img")] = int64(o.GetCapacityBytes())
			}
		}
	}
	if !maps.Equal(files, want) {
		t.Errorf("after %s, the pools hold the block files %v; ctrl lists %v", id, files, want)
	}
	for _, v := range s.volumes(t) {
		path := filepath.Join(s.pools[v.GetSpec().GetStoragePool()], "volumes", v.GetVolumeId()+".img")
		if size, ok := files[path]; v.GetState() != ctrlv1.VolumeState_VOLUME_STATE_DELETED && (!ok || size != int64(v.GetSpec().GetCapacityBytes())) {
			t.Errorf("after %s, volume %s (%s, %d bytes in pool %s) has the block file %v (%d bytes)", id, v.GetVolumeId(), v.GetState(),
				v.GetSpec().GetCapacityBytes(), v.GetSpec().GetStoragePool(), ok, size)
		}
	}
	// The executions running are exactly the ones ctrl places, and those
	// are the AVAILABLE Workspaces'.
	instances, placed := map[string]bool{}, map[string]bool{}
	res, err := s.c.Nodes.ListWorkspacePlacements(ctx, connect.NewRequest(&operatorv1.ListWorkspacePlacementsRequest{
		Filter: &operatorv1.ListWorkspacePlacementsRequest_NodeId{NodeId: nodeID}, PageSize: 1000,
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Msg.GetWorkspacePlacements() {
		instances[p.GetInstanceId()], placed[p.GetWorkspaceId()] = true, true
	}
	if running := s.vms.instances(); !maps.Equal(running, instances) {
		t.Errorf("after %s, the node runs %v; ctrl places %v", id, slices.Sorted(maps.Keys(running)), slices.Sorted(maps.Keys(instances)))
	}
	available := map[string]bool{}
	for _, w := range s.workspaces(t) {
		if w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE {
			available[w.GetWorkspaceId()] = true
		}
	}
	if !maps.Equal(available, placed) {
		t.Errorf("after %s, the Workspaces %v are AVAILABLE; ctrl places %v", id, slices.Sorted(maps.Keys(available)), slices.Sorted(maps.Keys(placed)))
	}
	for op, n := range testenv.AppliedOperations(t, s.nodeLog) {
		if n > 1 {
			t.Errorf("after %s, the node applied operation %s %d times", id, op, n)
		}
	}
}

// blockFiles are the files in the pool directories, with their sizes. The
// node's writability probe (a file it makes and removes at once, now and
// then) is not one.
func (s *system) blockFiles(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, dir := range s.pools {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), writableProbe) {
				return err
			}
			info, err := d.Info()
			if err == nil {
				out[path] = info.Size()
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// writableProbe begins the name of the node's writability probe
// (hostinfo.Writable).
const writableProbe = ".kibotos-probe-"

func (s *system) volumes(t *testing.T) []*ctrlv1.Volume {
	t.Helper()
	return pages(t, func(token string) ([]*ctrlv1.Volume, string, error) {
		res, err := s.c.Volumes.ListVolumes(context.Background(), connect.NewRequest(&ctrlv1.ListVolumesRequest{PageSize: 1000, PageToken: token}))
		if err != nil {
			return nil, "", err
		}
		return res.Msg.GetVolumes(), res.Msg.GetNextPageToken(), nil
	})
}

func (s *system) workspaces(t *testing.T) []*ctrlv1.Workspace {
	t.Helper()
	return pages(t, func(token string) ([]*ctrlv1.Workspace, string, error) {
		res, err := s.c.Workspaces.ListWorkspaces(context.Background(), connect.NewRequest(&ctrlv1.ListWorkspacesRequest{PageSize: 1000, PageToken: token}))
		if err != nil {
			return nil, "", err
		}
		return res.Msg.GetWorkspaces(), res.Msg.GetNextPageToken(), nil
	})
}

func (s *system) objects(t *testing.T, pool string) []*operatorv1.StoragePoolObject {
	t.Helper()
	return pages(t, func(token string) ([]*operatorv1.StoragePoolObject, string, error) {
		res, err := s.c.Nodes.ListStoragePoolObjects(context.Background(), connect.NewRequest(&operatorv1.ListStoragePoolObjectsRequest{
			StoragePool: pool, PageSize: 1000, PageToken: token,
		}))
		if err != nil {
			return nil, "", err
		}
		return res.Msg.GetObjects(), res.Msg.GetNextPageToken(), nil
	})
}

// pages reads every page of a list.
func pages[T any](t *testing.T, page func(token string) ([]T, string, error)) []T {
	t.Helper()
	var out []T
	token := ""
	for {
		items, next, err := page(token)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, items...)
		if token = next; token == "" {
			return out
		}
	}
}
