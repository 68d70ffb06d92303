package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// Run runs every store test against databases from b.
func Run(t *testing.T, b Backend) {
	tests := map[string]func(*testing.T, string){
		"MigrationsAreIdempotent":        testMigrationsAreIdempotent,
		"FailedTxWritesNothing":          testFailedTxWritesNothing,
		"CommandAdmittedOnce":            testCommandAdmittedOnce,
		"ClaimLeasesEachCommandOnce":     testClaimLeasesEachCommandOnce,
		"ActiveCommandOnTarget":          testActiveCommandOnTarget,
		"VolumesPageAndHideDeleted":      testVolumesPageAndHideDeleted,
		"WorkspacesAndExpiration":        testWorkspacesAndExpiration,
		"NodesAndCredentials":            testNodesAndCredentials,
		"ListsInByteOrder":               testListsInByteOrder,
		"GrantsBySecret":                 testGrantsBySecret,
		"GrantEnrollmentsInOrder":        testGrantEnrollmentsInOrder,
		"GrantEnrollmentsBackfilled":     testGrantEnrollmentsBackfilled,
		"SettingInitialisedOnce":         testSettingInitialisedOnce,
		"ConcurrentTransactionsSerial":   testConcurrentTransactionsSerial,
		"SnapshotReadsBesideAWrite":      testSnapshotReadsBesideAWrite,
		"CatalogPlatformKeysAndLaunches": testCatalogPlatformKeysAndLaunches,
		"CatalogTemplatesAndRevisions":   testCatalogTemplatesAndRevisions,
		"CatalogUploadsUnreferenced":     testCatalogUploadsUnreferenced,
		"LegacyCatalogReadAndCleared":    testLegacyCatalogReadAndCleared,
		"RowsRewrittenKeepTheirColumns":  testRowsRewrittenKeepTheirColumns,
		"CatalogReadsSeeEveryWrite":      testCatalogReadsSeeEveryWrite,
		"WorkspaceReadsSeeEveryWrite":    testWorkspaceReadsSeeEveryWrite,
		"WorkspaceAndRuntimeInOneRead":   testWorkspaceAndRuntimeInOneRead,
		"WritesLeftForLastCommit":        testWritesLeftForLastCommitWithTheRest,
		"CoalescedWritesCommitTogether":  testCoalescedWritesReadAndCommitTogether,
		"PartsRunUnderTheirCallersCtx":   testPartsRunUnderTheirCallersContext,
		"PrefetchedRowsReadAsWritten":    testPrefetchedRowsReadAsWritten,
		"KeptInsertsWrittenAtTheEnd":     testKeptInsertsWrittenAtTheEnd,
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.DSN(t))
		})
	}
}

var ctx = context.Background()

func mustTx(t *testing.T, s *store.Store, fn func(*store.Tx) error) {
	t.Helper()
	if err := s.Tx(ctx, fn); err != nil {
		t.Fatal(err)
	}
}

func testMigrationsAreIdempotent(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error { return tx.PutVolume(volume("vol-a", 1)) })
	s.Close()
	again := Open(t, dsn) // applies nothing twice, keeps the data
	mustTx(t, again, func(tx *store.Tx) error {
		_, err := tx.GetVolume("vol-a", false)
		return err
	})
}

func testFailedTxWritesNothing(t *testing.T, dsn string) {
	s := Open(t, dsn)
	boom := errors.New("boom")
	err := s.Tx(ctx, func(tx *store.Tx) error {
		if err := tx.PutVolume(volume("vol-a", 1)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Tx = %v, want boom", err)
	}
	mustTx(t, s, func(tx *store.Tx) error {
		if _, err := tx.GetVolume("vol-a", false); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after a failed transaction: %v, want not found", err)
		}
		return nil
	})
}

func command(id, target string, admitted time.Time) *store.CommandRow {
	return &store.CommandRow{
		Command: &storev1.Command{
			CommandId: id, Kind: "CreateVolume", TargetId: target,
			State:      storev1.CommandState_COMMAND_STATE_ADMITTED,
			AdmittedAt: timestamppb.New(admitted), UpdatedAt: timestamppb.New(admitted),
		},
		InputHash:     []byte("hash-" + id),
		NextAttemptAt: admitted,
	}
}

func testCommandAdmittedOnce(t *testing.T, dsn string) {
	s := Open(t, dsn)
	now := time.Now()
	mustTx(t, s, func(tx *store.Tx) error {
		ok, err := tx.InsertCommand(command("cmd-1", "vol-a", now))
		if err != nil || !ok {
			t.Fatalf("first insert: %v %v", ok, err)
		}
		dup := command("cmd-1", "vol-b", now)
		ok, err = tx.InsertCommand(dup)
		if err != nil || ok {
			t.Fatalf("second insert: %v %v, want not inserted", ok, err)
		}
		got, err := tx.GetCommand("cmd-1", true)
		if err != nil {
			return err
		}
		if got.GetTargetId() != "vol-a" || string(got.InputHash) != "hash-cmd-1" {
			t.Errorf("stored %v", got)
		}
		got.State = storev1.CommandState_COMMAND_STATE_SUCCEEDED
		got.Progress = "done"
		return tx.UpdateCommand(got)
	})
	mustTx(t, s, func(tx *store.Tx) error {
		got, err := tx.GetCommand("cmd-1", false)
		if err != nil {
			return err
		}
		if !got.Final() || got.GetProgress() != "done" {
			t.Errorf("after update: %v", got.Command)
		}
		if _, err := tx.GetCommand("nope", false); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("missing command: %v", err)
		}
		return nil
	})
}

func testClaimLeasesEachCommandOnce(t *testing.T, dsn string) {
	s := Open(t, dsn)
	now := time.Now()
	const n = 20
	mustTx(t, s, func(tx *store.Tx) error {
		for i := 0; i < n; i++ {
			if _, err := tx.InsertCommand(command(fmt.Sprintf("cmd-%02d", i), fmt.Sprintf("t-%d", i), now.Add(time.Duration(i)))); err != nil {
				return err
			}
		}
		return nil
	})
	var mu sync.Mutex
	claimed := map[string]string{}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(owner string) {
			defer wg.Done()
			for {
				var c *store.CommandRow
				err := s.Tx(ctx, func(tx *store.Tx) error {
					var err error
					c, err = tx.ClaimCommand(owner, now.Add(time.Second), now.Add(time.Hour))
					return err
				})
				if errors.Is(err, store.ErrNotFound) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if prev, dup := claimed[c.GetCommandId()]; dup {
					t.Errorf("%s claimed by %s and %s", c.GetCommandId(), prev, owner)
				}
				claimed[c.GetCommandId()] = owner
				mu.Unlock()
			}
		}(fmt.Sprintf("worker-%d", w))
	}
	wg.Wait()
	if len(claimed) != n {
		t.Errorf("claimed %d commands, want %d", len(claimed), n)
	}
	// Once the lease runs out another worker may take the command again.
	mustTx(t, s, func(tx *store.Tx) error {
		c, err := tx.ClaimCommand("late", now.Add(2*time.Hour), now.Add(3*time.Hour))
		if err != nil {
			return err
		}
		if c.Attempts != 2 || c.LeaseOwner != "late" {
			t.Errorf("re-claimed after lease: attempts %d owner %q", c.Attempts, c.LeaseOwner)
		}
		return nil
	})
}

func testActiveCommandOnTarget(t *testing.T, dsn string) {
	s := Open(t, dsn)
	now := time.Now()
	mustTx(t, s, func(tx *store.Tx) error {
		if _, err := tx.ActiveCommandOn("vol-a"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("no command yet: %v", err)
		}
		done := command("cmd-old", "vol-a", now)
		done.State = storev1.CommandState_COMMAND_STATE_SUCCEEDED
		if _, err := tx.InsertCommand(done); err != nil {
			return err
		}
		if _, err := tx.InsertCommand(command("cmd-new", "vol-a", now.Add(time.Second))); err != nil {
			return err
		}
		c, err := tx.ActiveCommandOn("vol-a")
		if err != nil || c.GetCommandId() != "cmd-new" {
			t.Errorf("ActiveCommandOn = %v, %v; want cmd-new", c, err)
		}
		next, ok, err := tx.NextDue()
		if err != nil || !ok || !next.Equal(time.Unix(0, now.Add(time.Second).UnixNano())) {
			t.Errorf("NextDue = %v %v %v", next, ok, err)
		}
		return nil
	})
}

func volume(id string, capacityMiB uint64) *ctrlv1.Volume {
	return &ctrlv1.Volume{
		VolumeId: id, State: ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE,
		Spec:   &ctrlv1.VolumeSpec{StoragePool: "pool-a", CapacityBytes: capacityMiB << 20},
		Labels: map[string]string{"app": id},
	}
}

func testVolumesPageAndHideDeleted(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		for i := 0; i < 5; i++ {
			v := volume(fmt.Sprintf("vol-%d", i), uint64(i+1))
			if i == 2 {
				v.State = ctrlv1.VolumeState_VOLUME_STATE_DELETED
			}
			if err := tx.PutVolume(v); err != nil {
				return err
			}
		}
		got, err := tx.GetVolume("vol-3", true)
		if err != nil {
			return err
		}
		if want := volume("vol-3", 4); !proto.Equal(got, want) {
			t.Errorf("GetVolume = %v, want %v", got, want)
		}
		page, err := tx.ListVolumes("", 2, false)
		if err != nil {
			return err
		}
		if ids(page) != "vol-0,vol-1" {
			t.Errorf("first page %s", ids(page))
		}
		page, err = tx.ListVolumes("vol-1", 10, false)
		if err != nil {
			return err
		}
		if ids(page) != "vol-3,vol-4" {
			t.Errorf("second page without deleted: %s", ids(page))
		}
		page, err = tx.ListVolumes("vol-1", 10, true)
		if err != nil {
			return err
		}
		if ids(page) != "vol-2,vol-3,vol-4" {
			t.Errorf("with deleted: %s", ids(page))
		}
		return nil
	})
}

func ids(vs []*ctrlv1.Volume) string {
	var s string
	for i, v := range vs {
		if i > 0 {
			s += ","
		}
		s += v.GetVolumeId()
	}
	return s
}

func testWorkspacesAndExpiration(t *testing.T, dsn string) {
	s := Open(t, dsn)
	now := time.Now()
	expiring := func(id string, at time.Time, state ctrlv1.WorkspaceState) *ctrlv1.Workspace {
		return &ctrlv1.Workspace{WorkspaceId: id, State: state, Expiration: &ctrlv1.WorkspaceExpiration{
			Policy:   &ctrlv1.WorkspaceExpirationPolicy{Action: ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP, Deadline: timestamppb.New(at)},
			Revision: 1,
		}}
	}
	mustTx(t, s, func(tx *store.Tx) error {
		for _, w := range []*ctrlv1.Workspace{
			expiring("ws-due", now.Add(-time.Minute), ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE),
			expiring("ws-later", now.Add(time.Hour), ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE),
			expiring("ws-gone", now.Add(-time.Minute), ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED),
			{WorkspaceId: "ws-none", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED},
		} {
			if err := tx.PutWorkspace(w); err != nil {
				return err
			}
		}
		due, err := tx.ExpiredWorkspaces(now.UnixNano(), 10)
		if err != nil {
			return err
		}
		if len(due) != 1 || due[0].GetWorkspaceId() != "ws-due" {
			t.Errorf("expired: %v", due)
		}
		all, err := tx.ListWorkspaces("", 10, false)
		if err != nil {
			return err
		}
		if len(all) != 3 {
			t.Errorf("undeleted workspaces: %d, want 3", len(all))
		}
		return nil
	})
}

func testNodesAndCredentials(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		n := &operatorv1.NodeRegistration{NodeId: "node-a", Incarnation: 1}
		if err := tx.PutNode(n); err != nil {
			return err
		}
		if err := tx.SetNodeCredential("node-a", "hash-1"); err != nil {
			return err
		}
		n.Incarnation = 2
		if err := tx.PutNode(n); err != nil { // keeps the credential
			return err
		}
		hash, err := tx.NodeCredential("node-a")
		if err != nil || hash != "hash-1" {
			t.Errorf("credential = %q, %v", hash, err)
		}
		got, err := tx.GetNode("node-a", true)
		if err != nil || got.GetIncarnation() != 2 {
			t.Errorf("node = %v, %v", got, err)
		}
		if _, err := tx.NodeCredential("node-b"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown node credential: %v", err)
		}
		list, err := tx.ListNodes("", 10)
		if err != nil || len(list) != 1 {
			t.Errorf("ListNodes = %v, %v", list, err)
		}
		return nil
	})
}

// Lists are ordered, and paged, by the bytes of their ids, whatever the
// database's locale (PostgreSQL's tests run in ICU's en-US, where "a"
// sorts before "B").
func testListsInByteOrder(t *testing.T, dsn string) {
	s := Open(t, dsn)
	ids := []string{"B", "Z", "a", "a-b", "aa", "b"}
	mustTx(t, s, func(tx *store.Tx) error {
		for _, id := range []string{"aa", "b", "Z", "a", "B", "a-b"} {
			if err := tx.PutNode(&operatorv1.NodeRegistration{NodeId: id}); err != nil {
				return err
			}
		}
		var got []string
		after := ""
		for {
			page, err := tx.ListNodes(after, 2)
			if err != nil {
				return err
			}
			for _, n := range page {
				got = append(got, n.GetNodeId())
			}
			if len(page) < 2 {
				break
			}
			after = page[len(page)-1].GetNodeId()
		}
		if !slices.Equal(got, ids) {
			t.Errorf("nodes listed in pages of 2: %q, want byte order %q", got, ids)
		}
		return nil
	})
}

func testGrantsBySecret(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		g := &operatorv1.EnrollmentGrant{GrantId: "grant-1", State: operatorv1.EnrollmentGrantState_ENROLLMENT_GRANT_STATE_ACTIVE}
		if err := tx.PutGrant(g, "secret-hash"); err != nil {
			return err
		}
		got, err := tx.GrantBySecretHash("secret-hash", true)
		if err != nil || got.GetGrantId() != "grant-1" {
			t.Errorf("by secret: %v %v", got, err)
		}
		if _, err := tx.GrantBySecretHash("other", false); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown secret: %v", err)
		}
		list, err := tx.ListGrants("", 10)
		if err != nil || len(list) != 1 {
			t.Errorf("ListGrants = %v %v", list, err)
		}
		return nil
	})
}

func testSettingInitialisedOnce(t *testing.T, dsn string) {
	s := Open(t, dsn)
	var wg sync.WaitGroup
	values := make([][]byte, 4)
	for i := range values {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := s.Tx(ctx, func(tx *store.Tx) error {
				v, err := tx.InitSetting("key", []byte(fmt.Sprint(i)))
				values[i] = v
				return err
			}); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	for _, v := range values[1:] {
		if string(v) != string(values[0]) {
			t.Errorf("replicas disagree on the setting: %q", values)
		}
	}
}

// Read-modify-write in concurrent transactions loses no update, on both
// databases (row locks on PostgreSQL, one writer on SQLite).
func testConcurrentTransactionsSerial(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error { return tx.PutVolume(volume("vol-c", 0)) })
	const n = 40
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Tx(ctx, func(tx *store.Tx) error {
				v, err := tx.GetVolume("vol-c", true)
				if err != nil {
					return err
				}
				v.LabelsRevision++
				return tx.PutVolume(v)
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	mustTx(t, s, func(tx *store.Tx) error {
		v, err := tx.GetVolume("vol-c", false)
		if err == nil && v.GetLabelsRevision() != n {
			t.Errorf("labels_revision = %d after %d increments", v.GetLabelsRevision(), n)
		}
		return err
	})
}

// A Snapshot does not wait for a write transaction in progress (on SQLite
// it reads through its own connection, not the writer's): it reads what
// committed before it, not the open transaction's writes, and afterwards
// reads those once committed. A write inside a Snapshot fails and leaves
// nothing.
func testSnapshotReadsBesideAWrite(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error { return tx.PutVolume(volume("vol-a", 1)) })
	capacity := func() (uint64, error) {
		var got uint64
		err := s.Snapshot(ctx, func(tx *store.Tx) error {
			v, err := tx.GetVolume("vol-a", false)
			got = v.GetSpec().GetCapacityBytes()
			return err
		})
		return got, err
	}

	written, release := make(chan struct{}), make(chan struct{})
	writer := make(chan error, 1)
	go func() {
		writer <- s.Tx(ctx, func(tx *store.Tx) error {
			if err := tx.PutVolume(volume("vol-a", 2)); err != nil {
				return err
			}
			close(written)
			<-release
			return nil
		})
	}()
	<-written
	type read struct {
		bytes uint64
		err   error
	}
	beside := make(chan read, 1)
	go func() {
		got, err := capacity()
		beside <- read{got, err}
	}()
	var r read
	select {
	case r = <-beside:
	case <-time.After(time.Minute):
		t.Fatal("a Snapshot waited a minute for a write transaction to end")
	}
	close(release)
	got, err := r.bytes, r.err
	if err != nil {
		t.Fatalf("Snapshot while a write is open: %v", err)
	}
	if got != 1<<20 {
		t.Fatalf("Snapshot while a write is open read %d bytes, want the committed %d", got, 1<<20)
	}
	if err := <-writer; err != nil {
		t.Fatal(err)
	}
	if got, err := capacity(); err != nil || got != 2<<20 {
		t.Fatalf("Snapshot after the commit read %d bytes (%v), want %d", got, err, 2<<20)
	}

	err = s.Snapshot(ctx, func(tx *store.Tx) error { return tx.PutVolume(volume("vol-b", 1)) })
	if err == nil {
		t.Fatal("a write inside a Snapshot succeeded")
	}
	mustTx(t, s, func(tx *store.Tx) error {
		if _, err := tx.GetVolume("vol-b", false); !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("the Snapshot's write left vol-b: %v", err)
		}
		return nil
	})
}

// testRowsRewrittenKeepTheirColumns writes Workspaces and runtimes that a
// transaction read or wrote before (which the store may rewrite without
// their indexed columns), changing what those columns hold or not, and
// checks every read that goes through them: expiration, the undeleted
// list, a node's executions, a pool's reservation.
func testRowsRewrittenKeepTheirColumns(t *testing.T, dsn string) {
	s := Open(t, dsn)
	now := time.Now()
	due := &ctrlv1.WorkspaceExpiration{Policy: &ctrlv1.WorkspaceExpirationPolicy{
		Action: ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP, Deadline: timestamppb.New(now.Add(-time.Minute))}}
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.PutNewWorkspace(&ctrlv1.Workspace{WorkspaceId: "ws-a", State: ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, Expiration: due}); err != nil {
			return err
		}
		return tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: "ws-a", NodeId: "node-1", LayerPool: "pool-1", LayerCapacityBytes: 1 << 20})
	})
	expired := func(tx *store.Tx) []string {
		ws, err := tx.ExpiredWorkspaces(now.UnixNano(), 10)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, w := range ws {
			out = append(out, w.GetWorkspaceId()+"/"+w.GetLabels()["v"])
		}
		return out
	}
	on := func(tx *store.Tx, node string) []string {
		rs, err := tx.NodeExecutions(node)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%s/%d", r.GetWorkspaceId(), r.GetStarts()))
		}
		return out
	}
	reserved := func(tx *store.Tx, pool string) uint64 {
		n, err := tx.StoragePoolReserved(pool)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	mustTx(t, s, func(tx *store.Tx) error {
		// The body alone changes: the row keeps its place in every index.
		w, err := tx.GetWorkspace("ws-a", true)
		if err != nil {
			return err
		}
		w.Labels = map[string]string{"v": "1"}
		if err := tx.PutWorkspace(w); err != nil {
			return err
		}
		if got := expired(tx); !slices.Equal(got, []string{"ws-a/1"}) {
			t.Errorf("expired after a body change: %v", got)
		}
		// Then, in the same transaction, the deadline moves out.
		w.Expiration = &ctrlv1.WorkspaceExpiration{Policy: &ctrlv1.WorkspaceExpirationPolicy{
			Action: ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP, Deadline: timestamppb.New(now.Add(time.Hour))}}
		if err := tx.PutWorkspace(w); err != nil {
			return err
		}
		if got := expired(tx); len(got) != 0 {
			t.Errorf("expired after the deadline moved out: %v", got)
		}
		rt, err := tx.GetRuntime("ws-a", true)
		if err != nil {
			return err
		}
		rt.Starts, rt.LayerCapacityBytes = 1, 2<<20
		if err := tx.PutRuntime(rt); err != nil {
			return err
		}
		if got := on(tx, "node-1"); !slices.Equal(got, []string{"ws-a/1"}) {
			t.Errorf("node-1 after a body change: %v", got)
		}
		if got := reserved(tx, "pool-1"); got != 2<<20 {
			t.Errorf("pool-1 reserves %d after the layer grew, want %d", got, 2<<20)
		}
		rt.Starts, rt.NodeId, rt.LayerPool = 2, "node-2", "pool-2"
		if err := tx.PutRuntime(rt); err != nil {
			return err
		}
		if got := on(tx, "node-1"); len(got) != 0 {
			t.Errorf("node-1 after the execution moved: %v", got)
		}
		if got := on(tx, "node-2"); !slices.Equal(got, []string{"ws-a/2"}) {
			t.Errorf("node-2 after the execution moved: %v", got)
		}
		if one, two := reserved(tx, "pool-1"), reserved(tx, "pool-2"); one != 0 || two != 2<<20 {
			t.Errorf("pools reserve %d and %d after the layer moved, want 0 and %d", one, two, 2<<20)
		}
		// Indexed values that swap places are a change too.
		if err := tx.PutRuntime(&storev1.WorkspaceRuntime{WorkspaceId: "ws-b", LayerPool: "node-3"}); err != nil {
			return err
		}
		swapped, err := tx.GetRuntime("ws-b", true)
		if err != nil {
			return err
		}
		swapped.NodeId, swapped.LayerPool, swapped.Starts = "node-3", "", 1
		if err := tx.PutRuntime(swapped); err != nil {
			return err
		}
		if got := on(tx, "node-3"); !slices.Equal(got, []string{"ws-b/1"}) {
			t.Errorf("node-3 after its name moved from the pool column to the node's: %v", got)
		}
		return nil
	})
	mustTx(t, s, func(tx *store.Tx) error {
		// Deleted, in a transaction that read it first: the undeleted list
		// drops it.
		w, err := tx.GetWorkspace("ws-a", false)
		if err != nil {
			return err
		}
		w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED
		if err := tx.PutWorkspace(w); err != nil {
			return err
		}
		all, err := tx.ListWorkspaces("", 10, false)
		if err != nil {
			return err
		}
		if len(all) != 0 {
			t.Errorf("undeleted Workspaces after a delete: %d", len(all))
		}
		return nil
	})
}
