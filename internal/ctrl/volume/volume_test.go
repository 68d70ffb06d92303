package volume_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

const mib = 1 << 20

var ctx = context.Background()

type env struct {
	store *store.Store
	vols  *volume.Service
}

// newEnv is the Volume domain on a real database, with one registered (not
// connected) node declaring pool-a as its default, so admission resolves
// pools but no node can act yet.
func newEnv(t *testing.T, b storetest.Backend) *env {
	t.Helper()
	st := storetest.Open(t, b.DSN(t))
	runner := command.NewRunner(st, "test", slog.Default())
	f := fleet.New(st, runner, slog.Default(), fleet.DefaultConfig, fleet.Deps{})
	storetest.PutNodeWithPool(t, st, "node-a", "pool-a")
	return &env{store: st, vols: volume.New(st, f, runner, volume.DefaultProfile)}
}

func forEachBackend(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, newEnv(t, b)) })
	}
}

func create(id string, capacity uint64) *ctrlv1.CreateVolumeRequest {
	return &ctrlv1.CreateVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: id}, Spec: &ctrlv1.VolumeSpec{CapacityBytes: capacity}}
}

func TestCreateValidation(t *testing.T) {
	e := newEnv(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	for _, tc := range []struct {
		name  string
		req   *ctrlv1.CreateVolumeRequest
		code  connect.Code
		field string
	}{
		{"no command", &ctrlv1.CreateVolumeRequest{}, connect.CodeInvalidArgument, "command.command_id"},
		{"bad command id", &ctrlv1.CreateVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "a b"}}, connect.CodeInvalidArgument, "command.command_id"},
		{"half a MiB", create("c", 100*mib+mib/2), connect.CodeInvalidArgument, "spec.capacity_bytes"},
		{"too large", create("c", 17<<40), connect.CodeInvalidArgument, "spec.capacity_bytes"},
		{"bad pool name", &ctrlv1.CreateVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "c"}, Spec: &ctrlv1.VolumeSpec{StoragePool: "Pool A"}}, connect.CodeInvalidArgument, "spec.storage_pool"},
		{"undeclared pool", &ctrlv1.CreateVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "c"}, Spec: &ctrlv1.VolumeSpec{StoragePool: "pool-z"}}, connect.CodeNotFound, "spec.storage_pool"},
		{"bad label", &ctrlv1.CreateVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "c"}, Labels: map[string]string{"-x": "y"}}, connect.CodeInvalidArgument, `labels["-x"]`},
		{"NUL annotation", &ctrlv1.CreateVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "c"}, Annotations: map[string]string{"x": "a\x00b"}}, connect.CodeInvalidArgument, `annotations["x"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.vols.Create(ctx, tc.req)
			if connect.CodeOf(err) != tc.code || apierr.FieldOf(err) != tc.field {
				t.Errorf("err = %v (field %q), want %v naming %q", err, apierr.FieldOf(err), tc.code, tc.field)
			}
		})
	}
	// Nothing was admitted by any of them.
	res, err := e.vols.List(ctx, &ctrlv1.ListVolumesRequest{IncludeDeleted: true})
	if err != nil || len(res.GetVolumes()) != 0 {
		t.Errorf("volumes after bad input: %v %v", res, err)
	}
}

func TestCreateReplayConflictAndDefaults(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		first, err := e.vols.Create(ctx, create("c1", 0))
		if err != nil {
			t.Fatal(err)
		}
		v := first.GetVolume()
		if v.GetState() != ctrlv1.VolumeState_VOLUME_STATE_CREATING || v.GetSpec().GetStoragePool() != "pool-a" ||
			v.GetSpec().GetCapacityBytes() != volume.DefaultProfile.DefaultCapacity || v.GetLabelsRevision() != 1 {
			t.Errorf("created %v", v)
		}
		again, err := e.vols.Create(ctx, create("c1", 0))
		if err != nil || !proto.Equal(first, again) {
			t.Errorf("replay = %v, %v; want the same Volume", again, err)
		}
		if _, err := e.vols.Create(ctx, create("c1", 2<<30)); connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Errorf("same command, other capacity: %v", err)
		}
		list, err := e.vols.List(ctx, &ctrlv1.ListVolumesRequest{})
		if err != nil || len(list.GetVolumes()) != 1 {
			t.Errorf("one Volume expected: %v %v", list, err)
		}
	})
}

func TestCreateWaitsForANodeAndSaysSo(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		res, err := e.vols.Create(ctx, create("c1", 64*mib))
		if err != nil {
			t.Fatal(err)
		}
		// No runner runs here; drive one step by hand through a runner.
		runner := command.NewRunner(e.store, "stepper", slog.Default())
		f := fleet.New(e.store, runner, slog.Default(), fleet.DefaultConfig, fleet.Deps{})
		volume.New(e.store, f, runner, volume.DefaultProfile)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { runner.Run(runCtx); close(done) }()
		runner.Kick()
		waitFor(t, func() bool { return commandOf(t, e, "c1").GetState() == storev1.CommandState_COMMAND_STATE_WAITING })
		cancel()
		<-done
		c := commandOf(t, e, "c1")
		if c.GetWaitingFor() != `a connected node that reaches storage pool "pool-a"` {
			t.Errorf("waiting_for = %q", c.GetWaitingFor())
		}
		got, _ := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: res.GetVolume().GetVolumeId()})
		if got.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_CREATING {
			t.Errorf("a Volume no node created is %v", got.GetVolume().GetState())
		}
	})
}

func commandOf(t *testing.T, e *env, id string) *storev1.Command {
	t.Helper()
	var c *store.CommandRow
	if err := e.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		c, err = tx.GetCommand(id, false)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return c.Command
}

func TestLabelsCASAndRevisions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		v, err := e.vols.Create(ctx, create("c1", 0))
		if err != nil {
			t.Fatal(err)
		}
		id := v.GetVolume().GetVolumeId()
		update := func(cmd string, expected uint64, l map[string]string) (*ctrlv1.UpdateVolumeLabelsResponse, error) {
			return e.vols.UpdateLabels(ctx, &ctrlv1.UpdateVolumeLabelsRequest{
				Command: &ctrlv1.CommandMetadata{CommandId: cmd}, VolumeId: id, ExpectedLabelsRevision: expected, Labels: l,
			})
		}
		res, err := update("l1", 1, map[string]string{"app": "web"})
		if err != nil || res.GetVolume().GetLabelsRevision() != 2 || res.GetVolume().GetAnnotationsRevision() != 1 {
			t.Fatalf("first update: %v %v", res, err)
		}
		_, err = update("l2", 1, map[string]string{"app": "db"})
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("stale revision: %v, want failed_precondition", err)
		}
		got, _ := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: id})
		if got.GetVolume().GetLabels()["app"] != "web" || got.GetVolume().GetLabelsRevision() != 2 {
			t.Errorf("a stale write changed the Volume: %v", got.GetVolume())
		}
		res, err = update("l3", 2, map[string]string{"app": "web"})
		if err != nil || res.GetVolume().GetLabelsRevision() != 2 {
			t.Errorf("same content must not move the revision: %v %v", res, err)
		}
		sel, err := e.vols.List(ctx, &ctrlv1.ListVolumesRequest{LabelSelector: "app=web"})
		if err != nil || len(sel.GetVolumes()) != 1 {
			t.Errorf("selector app=web: %v %v", sel, err)
		}
		none, err := e.vols.List(ctx, &ctrlv1.ListVolumesRequest{LabelSelector: "app notin (web)"})
		if err != nil || len(none.GetVolumes()) != 0 {
			t.Errorf("selector app notin (web): %v %v", none, err)
		}
	})
}

func TestListPagesWithTokensBoundToTheFilter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		for i := 0; i < 5; i++ {
			req := create(fmt.Sprintf("c%d", i), 0)
			req.Labels = map[string]string{"n": fmt.Sprint(i % 2)}
			if _, err := e.vols.Create(ctx, req); err != nil {
				t.Fatal(err)
			}
		}
		var seen int
		token := ""
		for {
			res, err := e.vols.List(ctx, &ctrlv1.ListVolumesRequest{LabelSelector: "n=0", PageSize: 1, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			seen += len(res.GetVolumes())
			if token = res.GetNextPageToken(); token == "" {
				break
			}
			if _, err := e.vols.List(ctx, &ctrlv1.ListVolumesRequest{LabelSelector: "n=1", PageToken: token}); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("token with another filter: %v", err)
			}
		}
		if seen != 3 {
			t.Errorf("paged %d Volumes with n=0, want 3", seen)
		}
	})
}

func TestDeleteBeforeANodeActedCancelsTheCreation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		v, err := e.vols.Create(ctx, create("c1", 0))
		if err != nil {
			t.Fatal(err)
		}
		id := v.GetVolume().GetVolumeId()
		del, err := e.vols.Delete(ctx, &ctrlv1.DeleteVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "d1"}, VolumeId: id})
		if err != nil || del.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_DELETED {
			t.Fatalf("delete: %v %v", del, err)
		}
		if c := commandOf(t, e, "c1"); c.GetState() != storev1.CommandState_COMMAND_STATE_FAILED ||
			c.GetFailure().GetReason() != ctrlv1.FailureReason_FAILURE_REASON_CANCELLED {
			t.Errorf("creation after delete: %v", c)
		}
		if _, err := e.vols.Resize(ctx, &ctrlv1.ResizeVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "r1"}, VolumeId: id, CapacityBytes: 2 << 30}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("resize of a deleted Volume: %v", err)
		}
		if _, err := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: "vol-none"}); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("get unknown: %v", err)
		}
	})
}

func TestResizeOnlyGrowsAndWaitsForTheCreation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		v, err := e.vols.Create(ctx, create("c1", 0))
		if err != nil {
			t.Fatal(err)
		}
		id := v.GetVolume().GetVolumeId()
		resize := func(cmd string, c uint64) error {
			_, err := e.vols.Resize(ctx, &ctrlv1.ResizeVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: cmd}, VolumeId: id, CapacityBytes: c})
			return err
		}
		if err := resize("r0", 4<<30); connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("resize while creating: %v, want unavailable", err)
		}
		if err := resize("r1", 1<<30+mib/2); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("half a MiB: %v", err)
		}
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 4000 && !cond(); i++ {
		sleep()
	}
	if !cond() {
		t.Fatal("condition not reached")
	}
}

// A new Volume without a pool goes to the deployment's default pool: the
// one the first admitted node by node_id names as its default, found
// however many nodes come before it (they are read a page at a time); a
// named pool is one an admitted node declares, wherever it is.
func TestTheDefaultPoolIsTheFirstAdmittedNodesDefault(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		// node-a (pool-a, its default) is the env's. Forty nodes before it,
		// by node_id: one not admitted that names a default, then others
		// that name none; the last of them declares pool-x.
		if err := e.store.Tx(ctx, func(tx *store.Tx) error {
			for i := range 40 {
				n := &operatorv1.NodeRegistration{NodeId: fmt.Sprintf("node-0%02d", i), Admission: operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED}
				switch i {
				case 0:
					n.Admission = operatorv1.NodeAdmission_NODE_ADMISSION_UNSPECIFIED
					n.StoragePools = []*operatorv1.StoragePoolAttachment{{NodeId: n.NodeId, StoragePool: "pool-unadmitted", DefaultPool: true}}
				case 39:
					n.StoragePools = []*operatorv1.StoragePoolAttachment{{NodeId: n.NodeId, StoragePool: "pool-x"}}
				}
				if err := tx.PutNode(n); err != nil {
					return err
				}
			}
			return tx.SetStoragePoolCapacity("pool-x", 1<<40)
		}); err != nil {
			t.Fatal(err)
		}
		res, err := e.vols.Create(ctx, create("default-pool", 100*mib))
		if err != nil || res.GetVolume().GetSpec().GetStoragePool() != "pool-a" {
			t.Errorf("a Volume without a pool: %v, %v; want it in pool-a", res.GetVolume(), err)
		}
		named := create("named-pool", 100*mib)
		named.Spec.StoragePool = "pool-x"
		if _, err := e.vols.Create(ctx, named); err != nil {
			t.Errorf("a Volume in pool-x, which the 40th node declares: %v", err)
		}
		unadmitted := create("unadmitted-pool", 100*mib)
		unadmitted.Spec.StoragePool = "pool-unadmitted"
		if _, err := e.vols.Create(ctx, unadmitted); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("a Volume in a pool only a node not admitted declares: %v, want not_found", err)
		}
	})
}
