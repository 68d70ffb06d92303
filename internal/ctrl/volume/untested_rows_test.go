package volume_test

// Tests of the rows docs/spec-coverage/volumes.md left open: each quotes
// the sentence of the reference (or of the proto, where the reference has
// no text) it asserts. The rows that need a node acting on a Volume (it
// becomes AVAILABLE, grows, fails, its pool is declared lost) run on a
// real ctrl with a real node agent (block files in a temporary directory,
// no VM); the others on the Volume domain alone, as the package's other
// tests do.

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/labels"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
	"github.com/kibotos/kibotos/internal/testenv"
)

func cmdID(id string) *ctrlv1.CommandMetadata { return &ctrlv1.CommandMetadata{CommandId: id} }

// observe records r as what the holder of Volume id reported, through the
// Volume domain's Observed, as the fleet does when a node reports it.
func observe(t *testing.T, st *store.Store, vols *volume.Service, id string, r *nodev1.VolumeReport) {
	t.Helper()
	if err := st.Tx(ctx, func(tx *store.Tx) error { return vols.Observed(tx, id, r) }); err != nil {
		t.Fatal(err)
	}
}

// get reads Volume id through the domain, failing the test on an error.
func (e *env) get(t *testing.T, id string) *ctrlv1.Volume {
	t.Helper()
	res, err := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: id})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetVolume()
}

// cluster is a real ctrl on one database kind with one real node agent,
// node-a, reaching pool-a (its default, with a capacity) in a temporary
// directory: a Volume there is created, grown and removed as a file.
type cluster struct {
	t       *testing.T
	c       *testenv.Cluster
	node    *testenv.Node
	poolDir string
	// vols is a Volume domain on ctrl's store, only to record
	// observations (Observed) as a node's report would.
	vols *volume.Service
}

func newCluster(t *testing.T, b storetest.Backend) *cluster {
	t.Helper()
	c := testenv.New(t, testenv.FastFleet(), testenv.OnDatabase(b.DSN(t)))
	dir := t.TempDir()
	n := c.StartNodeWithPools(t, "node-a", "", node.Pool{Name: "pool-a", Dir: dir, Default: true})
	c.EnsureCapacity(t, "pool-a", 1<<40)
	st := c.Ctrl.Store()
	vols := volume.New(st, c.Ctrl.Fleet(), command.NewRunner(st, "observer", slog.Default()), volume.DefaultProfile)
	return &cluster{t: t, c: c, node: n, poolDir: dir, vols: vols}
}

// forEachCluster runs fn on a cluster on SQLite and on PostgreSQL.
func forEachCluster(t *testing.T, fn func(t *testing.T, k *cluster)) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, newCluster(t, b)) })
	}
}

func (k *cluster) volume(id string) *ctrlv1.Volume {
	k.t.Helper()
	res, err := k.c.Volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: id}))
	if err != nil {
		k.t.Fatal(err)
	}
	return res.Msg.GetVolume()
}

// waitVolume waits until Volume id reads state (a stored state, read
// through the API) and returns it.
func (k *cluster) waitVolume(id string, state ctrlv1.VolumeState) *ctrlv1.Volume {
	k.t.Helper()
	var v *ctrlv1.Volume
	waitFor(k.t, func() bool {
		v = k.volume(id)
		return v.GetState() == state
	})
	return v
}

// availableVolume creates a Volume of capacity under commandID, waits
// until the node made it AVAILABLE, and returns CreateVolume's response.
func (k *cluster) availableVolume(commandID string, capacity uint64) *ctrlv1.CreateVolumeResponse {
	k.t.Helper()
	res, err := k.c.Volumes.CreateVolume(ctx, connect.NewRequest(create(commandID, capacity)))
	if err != nil {
		k.t.Fatal(err)
	}
	k.waitVolume(res.Msg.GetVolume().GetVolumeId(), ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE)
	return res.Msg
}

func (k *cluster) resize(commandID, id string, capacity uint64) (*ctrlv1.ResizeVolumeResponse, error) {
	res, err := k.c.Volumes.ResizeVolume(ctx, connect.NewRequest(&ctrlv1.ResizeVolumeRequest{Command: cmdID(commandID), VolumeId: id, CapacityBytes: capacity}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// stopNode stops node-a and waits until ctrl reads it UNAVAILABLE: from
// then on a command on pool-a waits for a node instead of being sent to
// node-a. It returns the registration read then.
func (k *cluster) stopNode() *operatorv1.NodeRegistration {
	k.t.Helper()
	k.node.Stop(k.t)
	return k.c.WaitStatus(k.t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
}

// bind asks CreateWorkspace for a Workspace bound to Volume id.
func (k *cluster) bind(commandID, id string) (*ctrlv1.CreateWorkspaceResponse, error) {
	res, err := k.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: cmdID(commandID),
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 * mib},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: id},
		},
	}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// P10: "The historical result of the original CreateVolume keeps the value
// that creation returned." S2: every mutation carries CommandMetadata
// "with the replay rules of WorkspaceService": "A replay with the same
// command_id and the same input answers the recorded result, even after
// the work finished ... The same command_id with different input is
// already_exists." Here for CreateVolume after a grow, and ResizeVolume.
func TestReplaysAfterAGrowAnswerWhatTheirAdmissionReturned(t *testing.T) {
	forEachCluster(t, func(t *testing.T, k *cluster) {
		created := k.availableVolume("c1", 64*mib)
		id := created.GetVolume().GetVolumeId()
		resized, err := k.resize("r1", id, 128*mib)
		if err != nil {
			t.Fatal(err)
		}
		if v := k.waitVolume(id, ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE); v.GetSpec().GetCapacityBytes() != 128*mib {
			t.Fatalf("grown Volume: %v, want 128 MiB", v)
		}

		// P10: CreateVolume's replay still answers 64 MiB, as admitted.
		again, err := k.c.Volumes.CreateVolume(ctx, connect.NewRequest(create("c1", 64*mib)))
		if err != nil || !proto.Equal(again.Msg, created) {
			t.Errorf("CreateVolume replay after the grow: %v %v, want the original result %v", again, err, created)
		}
		if got := again.Msg.GetVolume().GetSpec().GetCapacityBytes(); got != 64*mib {
			t.Errorf("CreateVolume replay answers capacity %d, want the 64 MiB creation returned", got)
		}

		// S2: ResizeVolume's replay answers its admission's result and
		// grows nothing again; other input under r1 is already_exists.
		if again, err := k.resize("r1", id, 128*mib); err != nil || !proto.Equal(again, resized) {
			t.Errorf("ResizeVolume replay: %v %v, want the recorded result %v", again, err, resized)
		}
		if _, err := k.resize("r1", id, 256*mib); connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Errorf("r1 with another capacity: %v, want already_exists", err)
		}
		if v := k.volume(id); v.GetState() != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE || v.GetSpec().GetCapacityBytes() != 128*mib {
			t.Errorf("the Volume after a replay and a conflict: %v, want AVAILABLE at 128 MiB (nothing admitted)", v)
		}
	})
}

// V3: "It is diagnostic: state is changed only by commands, and no
// admission reads the observation." V5: "GetVolume and ListVolumes return
// it; command responses do not." Here a DAMAGED observation of an
// AVAILABLE Volume, which a resize is then admitted for and grows.
func TestAnObservationNeitherStopsAResizeNorIsInItsResponse(t *testing.T) {
	forEachCluster(t, func(t *testing.T, k *cluster) {
		id := k.availableVolume("c1", 64*mib).GetVolume().GetVolumeId()
		before := k.volume(id)
		observe(t, k.c.Ctrl.Store(), k.vols, id, &nodev1.VolumeReport{Damaged: true, Message: "no ext4 superblock"})
		observed := k.volume(id)
		if observed.GetObservation().GetCondition() != ctrlv1.VolumeCondition_VOLUME_CONDITION_DAMAGED {
			t.Fatalf("observation not recorded: %v", observed)
		}
		withoutObs := proto.Clone(observed).(*ctrlv1.Volume)
		withoutObs.Observation = nil
		if !proto.Equal(withoutObs, before) {
			t.Errorf("an observation changed more than itself: %v, before %v", observed, before)
		}

		res, err := k.resize("r1", id, 128*mib)
		if err != nil {
			t.Fatalf("resize of a Volume observed DAMAGED: %v, want admitted (no admission reads the observation)", err)
		}
		if res.GetVolume().GetObservation() != nil || res.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_RESIZING {
			t.Errorf("ResizeVolume's response: %v, want RESIZING without the observation", res.GetVolume())
		}
		list, err := k.c.Volumes.ListVolumes(ctx, connect.NewRequest(&ctrlv1.ListVolumesRequest{}))
		if err != nil || len(list.Msg.GetVolumes()) != 1 || !proto.Equal(list.Msg.GetVolumes()[0].GetObservation(), observed.GetObservation()) {
			t.Errorf("ListVolumes: %v %v, want the Volume with its observation", list, err)
		}
		grown := k.waitVolume(id, ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE)
		if grown.GetSpec().GetCapacityBytes() != 128*mib || !proto.Equal(grown.GetObservation(), observed.GetObservation()) {
			t.Errorf("after the grow: %v, want 128 MiB and the observation as recorded", grown)
		}
	})
}

// T3: RESIZING "is not AVAILABLE: ... no new binding is admitted until the
// change commits".
func TestABindingWaitsUntilTheResizeCommits(t *testing.T) {
	forEachCluster(t, func(t *testing.T, k *cluster) {
		k.c.EnsureTemplate(t) // a create is admitted and waits for a platform: nothing boots
		id := k.availableVolume("c1", 64*mib).GetVolume().GetVolumeId()
		k.stopNode()
		if _, err := k.resize("r1", id, 128*mib); err != nil {
			t.Fatal(err)
		}
		if v := k.volume(id); v.GetState() != ctrlv1.VolumeState_VOLUME_STATE_RESIZING {
			t.Fatalf("a Volume whose grow waits for a node: %v, want RESIZING", v)
		}
		_, err := k.bind("bind", id)
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || apierr.DetailOf(err).GetObservedVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_RESIZING {
			t.Errorf("binding a RESIZING Volume: %v, want failed_precondition observing it RESIZING", err)
		}
		if v := k.volume(id); v.GetBoundWorkspaceId() != "" {
			t.Errorf("a refused binding bound the Volume to %s", v.GetBoundWorkspaceId())
		}
		if ws, err := k.c.Workspaces.ListWorkspaces(ctx, connect.NewRequest(&ctrlv1.ListWorkspacesRequest{})); err != nil || len(ws.Msg.GetWorkspaces()) != 0 {
			t.Errorf("Workspaces after the refused binding: %v %v, want none", ws, err)
		}

		// The node back, the change commits; then the same binding is admitted.
		k.c.StartNodeWithPools(t, "node-a", k.node.StateDir, node.Pool{Name: "pool-a", Dir: k.poolDir, Default: true})
		if v := k.waitVolume(id, ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE); v.GetSpec().GetCapacityBytes() != 128*mib {
			t.Fatalf("the committed grow: %v, want 128 MiB", v)
		}
		ws, err := k.bind("bind", id)
		if err != nil {
			t.Fatalf("binding once the grow committed: %v", err)
		}
		if got := k.volume(id).GetBoundWorkspaceId(); got != ws.GetWorkspace().GetWorkspaceId() {
			t.Errorf("bound_workspace_id = %q, want %s", got, ws.GetWorkspace().GetWorkspaceId())
		}
	})
}

// T7, T8 (and VolumeService): LOST: "Its data is gone and never replaced
// with an empty Volume: the Volume can be read and deleted, and every other
// operation fails as failed_precondition."
func TestALostVolumeCanOnlyBeReadAndDeleted(t *testing.T) {
	forEachCluster(t, func(t *testing.T, k *cluster) {
		k.c.EnsureTemplate(t)
		req := create("c1", 64*mib)
		req.Labels, req.Annotations = map[string]string{"app": "db"}, map[string]string{"note": "x"}
		res, err := k.c.Volumes.CreateVolume(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		id := res.Msg.GetVolume().GetVolumeId()
		k.waitVolume(id, ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE)
		reg := k.stopNode()
		if _, err := k.c.Nodes.IsolateNode(ctx, connect.NewRequest(&operatorv1.IsolateNodeRequest{Command: cmdID("isolate"), NodeId: "node-a", Incarnation: reg.GetIncarnation()})); err != nil {
			t.Fatal(err)
		}
		if _, err := k.c.Nodes.DeclareStoragePoolLost(ctx, connect.NewRequest(&operatorv1.DeclareStoragePoolLostRequest{Command: cmdID("lost"), StoragePool: "pool-a"})); err != nil {
			t.Fatal(err)
		}
		lost := k.volume(id)
		if lost.GetState() != ctrlv1.VolumeState_VOLUME_STATE_LOST {
			t.Fatalf("Volume of the lost pool: %v, want LOST", lost)
		}

		// Read: GetVolume above; ListVolumes too.
		if list, err := k.c.Volumes.ListVolumes(ctx, connect.NewRequest(&ctrlv1.ListVolumesRequest{})); err != nil ||
			len(list.Msg.GetVolumes()) != 1 || !proto.Equal(list.Msg.GetVolumes()[0], lost) {
			t.Errorf("ListVolumes: %v %v, want the LOST Volume", list, err)
		}

		// T8: every other operation is failed_precondition, with
		// FAILURE_REASON_VOLUME_LOST (designed here: the one reason each
		// refusal of a LOST Volume gives).
		for name, call := range map[string]func() error{
			"ResizeVolume": func() error { _, err := k.resize("resize", id, 128*mib); return err },
			"UpdateVolumeLabels": func() error {
				_, err := k.c.Volumes.UpdateVolumeLabels(ctx, connect.NewRequest(&ctrlv1.UpdateVolumeLabelsRequest{
					Command: cmdID("labels"), VolumeId: id, ExpectedLabelsRevision: 1, Labels: map[string]string{"app": "web"},
				}))
				return err
			},
			"UpdateVolumeAnnotations": func() error {
				_, err := k.c.Volumes.UpdateVolumeAnnotations(ctx, connect.NewRequest(&ctrlv1.UpdateVolumeAnnotationsRequest{
					Command: cmdID("annotations"), VolumeId: id, ExpectedAnnotationsRevision: 1, Annotations: map[string]string{"note": "y"},
				}))
				return err
			},
			"ExportVolume": func() error {
				_, err := k.c.Volumes.ExportVolume(ctx, connect.NewRequest(&ctrlv1.ExportVolumeRequest{Command: cmdID("export"), VolumeId: id}))
				return err
			},
			"CreateWorkspace binding it": func() error { _, err := k.bind("bind", id); return err },
		} {
			if err := call(); connect.CodeOf(err) != connect.CodeFailedPrecondition || apierr.DetailOf(err).GetReason() != ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST {
				t.Errorf("%s of a LOST Volume: %v (%v), want failed_precondition, VOLUME_LOST", name, err, apierr.DetailOf(err))
			}
		}
		if after := k.volume(id); !proto.Equal(after, lost) {
			t.Errorf("the refused operations changed the LOST Volume: %v, was %v", after, lost)
		}

		// T7: deleted, at once: nothing is left to remove.
		del, err := k.c.Volumes.DeleteVolume(ctx, connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: cmdID("delete"), VolumeId: id}))
		if err != nil || del.Msg.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_DELETED {
			t.Fatalf("DeleteVolume of a LOST Volume: %v %v, want DELETED", del, err)
		}
		if got := k.volume(id); got.GetState() != ctrlv1.VolumeState_VOLUME_STATE_DELETED ||
			!maps.Equal(got.GetLabels(), req.Labels) || !maps.Equal(got.GetAnnotations(), req.Annotations) {
			t.Errorf("the deleted Volume: %v, want DELETED with its labels and annotations", got)
		}
	})
}

// V18: "failure is present while state is FAILED." (proto) Here a
// removal and a creation the node fails: each leaves its Volume FAILED
// with the failure of its command.
func TestAFailedCommandLeavesTheVolumeFailedWithItsFailure(t *testing.T) {
	forEachCluster(t, func(t *testing.T, k *cluster) {
		wantFailure := func(v *ctrlv1.Volume, stage ctrlv1.FailureStage, commandID string) {
			t.Helper()
			if f := v.GetFailure(); f == nil || f.GetStage() != stage || f.GetCommandId() != commandID || f.GetFailedAt() == nil || f.GetMessage() == "" {
				t.Errorf("failure of the FAILED Volume: %v, want one at %v of command %s, with failed_at and a message", f, stage, commandID)
			}
		}

		// A removal: a non-empty directory where the block file was.
		removed := k.availableVolume("c1", 64*mib).GetVolume().GetVolumeId()
		if f := k.volume(removed).GetFailure(); f != nil {
			t.Errorf("an AVAILABLE Volume carries a failure: %v", f)
		}
		file := k.node.PoolFile(removed)
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(file, "busy"), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := k.c.Volumes.DeleteVolume(ctx, connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: cmdID("d1"), VolumeId: removed})); err != nil {
			t.Fatal(err)
		}
		wantFailure(k.waitVolume(removed, ctrlv1.VolumeState_VOLUME_STATE_FAILED), ctrlv1.FailureStage_FAILURE_STAGE_OBSERVING_CLEANUP, "d1")

		// A creation: a file where the pool's volumes directory goes, so
		// that the node cannot create any block file (for root too).
		dir := filepath.Join(k.poolDir, "volumes")
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir, []byte("not a directory"), 0o600); err != nil {
			t.Fatal(err)
		}
		res, err := k.c.Volumes.CreateVolume(ctx, connect.NewRequest(create("c2", 64*mib)))
		if err != nil {
			t.Fatal(err)
		}
		if f := res.Msg.GetVolume().GetFailure(); f != nil {
			t.Errorf("a CREATING Volume carries a failure: %v", f)
		}
		wantFailure(k.waitVolume(res.Msg.GetVolume().GetVolumeId(), ctrlv1.VolumeState_VOLUME_STATE_FAILED), ctrlv1.FailureStage_FAILURE_STAGE_CREATING_VOLUME, "c2")
	})
}

// V9: volume_id, created_at and updated_at have no text in the reference;
// ctrl assigns them: a new id per Volume, created_at = updated_at at
// admission, and updated_at moves with each change of the Volume (here its
// labels) while created_at stays.
func TestVolumeIDAndTimestampsAreAssignedByCtrl(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		start := time.Now()
		first, err := e.vols.Create(ctx, create("c1", 0))
		if err != nil {
			t.Fatal(err)
		}
		end := time.Now()
		v := first.GetVolume()
		if !strings.HasPrefix(v.GetVolumeId(), "vol-") {
			t.Errorf("volume_id = %q, want one ctrl assigned", v.GetVolumeId())
		}
		created := v.GetCreatedAt().AsTime()
		if created.Before(start) || created.After(end) || !proto.Equal(v.GetCreatedAt(), v.GetUpdatedAt()) {
			t.Errorf("created_at %v, updated_at %v: want both the admission time, within [%v, %v]", created, v.GetUpdatedAt().AsTime(), start, end)
		}
		second, err := e.vols.Create(ctx, create("c2", 0))
		if err != nil || second.GetVolume().GetVolumeId() == v.GetVolumeId() {
			t.Errorf("a second Volume: %v %v, want its own volume_id", second, err)
		}
		if got := e.get(t, v.GetVolumeId()); !proto.Equal(got.GetCreatedAt(), v.GetCreatedAt()) || !proto.Equal(got.GetUpdatedAt(), v.GetUpdatedAt()) {
			t.Errorf("read back: created_at %v updated_at %v, want as admitted", got.GetCreatedAt(), got.GetUpdatedAt())
		}

		beforeChange := time.Now()
		if _, err := e.vols.UpdateLabels(ctx, &ctrlv1.UpdateVolumeLabelsRequest{
			Command: cmdID("l1"), VolumeId: v.GetVolumeId(), ExpectedLabelsRevision: 1, Labels: map[string]string{"a": "1"},
		}); err != nil {
			t.Fatal(err)
		}
		changed := e.get(t, v.GetVolumeId())
		if !proto.Equal(changed.GetCreatedAt(), v.GetCreatedAt()) {
			t.Errorf("created_at moved with a change: %v, was %v", changed.GetCreatedAt(), v.GetCreatedAt())
		}
		if changed.GetUpdatedAt().AsTime().Before(beforeChange) {
			t.Errorf("updated_at %v after a change made at or after %v, want it stamped by the change", changed.GetUpdatedAt().AsTime(), beforeChange)
		}
	})
}

// V11: "labels and annotations have the same meaning, rules, and limits as
// on Workspace." A bad map sent to UpdateVolumeLabels or
// UpdateVolumeAnnotations is invalid_argument naming the entry (or the
// map, for a limit), with the limits Workspace has (labels.MaxLabels,
// labels.MaxAnnotationsBytes), and writes nothing.
func TestMetadataUpdatesValidateAsOnWorkspace(t *testing.T) {
	e := newEnv(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	v, err := e.vols.Create(ctx, create("c1", 0))
	if err != nil {
		t.Fatal(err)
	}
	id := v.GetVolume().GetVolumeId()
	setLabels := func(cmd string, l map[string]string) error {
		_, err := e.vols.UpdateLabels(ctx, &ctrlv1.UpdateVolumeLabelsRequest{Command: cmdID(cmd), VolumeId: id, ExpectedLabelsRevision: 1, Labels: l})
		return err
	}
	setAnnotations := func(cmd string, a map[string]string) error {
		_, err := e.vols.UpdateAnnotations(ctx, &ctrlv1.UpdateVolumeAnnotationsRequest{Command: cmdID(cmd), VolumeId: id, ExpectedAnnotationsRevision: 1, Annotations: a})
		return err
	}
	manyLabels := map[string]string{}
	for i := range labels.MaxLabels + 1 {
		manyLabels[fmt.Sprintf("k%d", i)] = "v"
	}
	bigAnnotation := map[string]string{"big": strings.Repeat("x", labels.MaxAnnotationsBytes)}
	for _, tc := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"label key", func() error { return setLabels("l1", map[string]string{"-x": "y"}) }, `labels["-x"]`},
		{"label value", func() error { return setLabels("l2", map[string]string{"x": "a b"}) }, `labels["x"]`},
		{"label value too long", func() error { return setLabels("l3", map[string]string{"x": strings.Repeat("v", 64)}) }, `labels["x"]`},
		{"too many labels", func() error { return setLabels("l4", manyLabels) }, "labels"},
		{"annotation key", func() error { return setAnnotations("a1", map[string]string{"a/b/c": "y"}) }, `annotations["a/b/c"]`},
		{"NUL annotation", func() error { return setAnnotations("a2", map[string]string{"x": "a\x00b"}) }, `annotations["x"]`},
		{"annotations too large", func() error { return setAnnotations("a3", bigAnnotation) }, "annotations"},
	} {
		if err := tc.call(); connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != tc.field {
			t.Errorf("%s: %v (field %q), want invalid_argument naming %s", tc.name, err, apierr.FieldOf(err), tc.field)
		}
	}
	if got := e.get(t, id); got.GetLabelsRevision() != 1 || got.GetAnnotationsRevision() != 1 || len(got.GetLabels())+len(got.GetAnnotations()) != 0 {
		t.Errorf("the refused updates wrote: %v", got)
	}
	// At the limits, the same maps are taken.
	delete(manyLabels, "k0")
	if err := setLabels("l5", manyLabels); err != nil {
		t.Errorf("%d labels: %v, want accepted", labels.MaxLabels, err)
	}
	if err := setAnnotations("a4", map[string]string{"big": strings.Repeat("x", labels.MaxAnnotationsBytes-len("big"))}); err != nil {
		t.Errorf("annotations of %d bytes: %v, want accepted", labels.MaxAnnotationsBytes, err)
	}
}

// V3: "It is diagnostic: state is changed only by commands, and no
// admission reads the observation." V16: used_bytes "Not measured yet:
// always 0" (proto). An observation changes neither state, updated_at nor
// a revision; a DAMAGED one refuses no admission.
func TestAnObservationChangesNothingButItself(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		v, err := e.vols.Create(ctx, create("c1", 64*mib))
		if err != nil {
			t.Fatal(err)
		}
		id := v.GetVolume().GetVolumeId()
		before := e.get(t, id)
		observe(t, e.store, e.vols, id, &nodev1.VolumeReport{CapacityBytes: 64 * mib})
		healthy := e.get(t, id)
		if o := healthy.GetObservation(); o.GetCondition() != ctrlv1.VolumeCondition_VOLUME_CONDITION_HEALTHY || o.GetCapacityBytes() != 64*mib || o.GetUsedBytes() != 0 {
			t.Errorf("observation %v, want HEALTHY, 64 MiB, used_bytes 0", o)
		}
		rest := proto.Clone(healthy).(*ctrlv1.Volume)
		rest.Observation = nil
		if !proto.Equal(rest, before) {
			t.Errorf("an observation changed the Volume: %v, before %v", healthy, before)
		}

		observe(t, e.store, e.vols, id, &nodev1.VolumeReport{Damaged: true, Message: "unreadable"})
		damaged := e.get(t, id)
		if damaged.GetObservation().GetCondition() != ctrlv1.VolumeCondition_VOLUME_CONDITION_DAMAGED || damaged.GetObservation().GetUsedBytes() != 0 ||
			damaged.GetState() != before.GetState() || !proto.Equal(damaged.GetUpdatedAt(), before.GetUpdatedAt()) {
			t.Errorf("DAMAGED observation: %v, want it recorded, used_bytes 0, state and updated_at as before", damaged)
		}
		if _, err := e.vols.UpdateLabels(ctx, &ctrlv1.UpdateVolumeLabelsRequest{Command: cmdID("l1"), VolumeId: id, ExpectedLabelsRevision: 1, Labels: map[string]string{"a": "1"}}); err != nil {
			t.Errorf("UpdateVolumeLabels of a Volume observed DAMAGED: %v, want admitted", err)
		}
		if del, err := e.vols.Delete(ctx, &ctrlv1.DeleteVolumeRequest{Command: cmdID("d1"), VolumeId: id}); err != nil || del.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_DELETED {
			t.Errorf("DeleteVolume of a Volume observed DAMAGED: %v %v, want admitted", del, err)
		}
	})
}

// V5: "GetVolume and ListVolumes return it; command responses do not."
// Here UpdateVolumeLabels, UpdateVolumeAnnotations and DeleteVolume
// (ResizeVolume: TestAnObservationNeitherStopsAResizeNorIsInItsResponse).
func TestCommandResponsesCarryNoObservation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		v, err := e.vols.Create(ctx, create("c1", 64*mib))
		if err != nil {
			t.Fatal(err)
		}
		id := v.GetVolume().GetVolumeId()
		observe(t, e.store, e.vols, id, &nodev1.VolumeReport{CapacityBytes: 64 * mib})
		if e.get(t, id).GetObservation() == nil {
			t.Fatal("GetVolume without the observation")
		}
		list, err := e.vols.List(ctx, &ctrlv1.ListVolumesRequest{})
		if err != nil || len(list.GetVolumes()) != 1 || list.GetVolumes()[0].GetObservation() == nil {
			t.Errorf("ListVolumes: %v %v, want the Volume with its observation", list, err)
		}
		labelsRes, err := e.vols.UpdateLabels(ctx, &ctrlv1.UpdateVolumeLabelsRequest{Command: cmdID("l1"), VolumeId: id, ExpectedLabelsRevision: 1, Labels: map[string]string{"a": "1"}})
		if err != nil || labelsRes.GetVolume().GetLabelsRevision() != 2 || labelsRes.GetVolume().GetObservation() != nil {
			t.Errorf("UpdateVolumeLabels: %v %v, want the change without the observation", labelsRes, err)
		}
		annRes, err := e.vols.UpdateAnnotations(ctx, &ctrlv1.UpdateVolumeAnnotationsRequest{Command: cmdID("a1"), VolumeId: id, ExpectedAnnotationsRevision: 1, Annotations: map[string]string{"n": "1"}})
		if err != nil || annRes.GetVolume().GetAnnotationsRevision() != 2 || annRes.GetVolume().GetObservation() != nil {
			t.Errorf("UpdateVolumeAnnotations: %v %v, want the change without the observation", annRes, err)
		}
		del, err := e.vols.Delete(ctx, &ctrlv1.DeleteVolumeRequest{Command: cmdID("d1"), VolumeId: id})
		if err != nil || del.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_DELETED || del.GetVolume().GetObservation() != nil {
			t.Errorf("DeleteVolume: %v %v, want DELETED without the observation", del, err)
		}
	})
}

// S2: every mutation carries CommandMetadata "with the replay rules of
// WorkspaceService": "A replay with the same command_id and the same input
// answers the recorded result, even after the work finished ... The same
// command_id with different input is already_exists." Here DeleteVolume
// and UpdateVolumeLabels (ResizeVolume:
// TestReplaysAfterAGrowAnswerWhatTheirAdmissionReturned).
func TestDeleteAndLabelsReplayTheirResultAndConflictOnOtherInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		a, err := e.vols.Create(ctx, create("c1", 0))
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.vols.Create(ctx, create("c2", 0))
		if err != nil {
			t.Fatal(err)
		}
		idA, idB := a.GetVolume().GetVolumeId(), b.GetVolume().GetVolumeId()

		del := func(id string) (*ctrlv1.DeleteVolumeResponse, error) {
			return e.vols.Delete(ctx, &ctrlv1.DeleteVolumeRequest{Command: cmdID("d1"), VolumeId: id})
		}
		first, err := del(idA)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := del(idA); err != nil || !proto.Equal(again, first) {
			t.Errorf("DeleteVolume replay: %v %v, want %v", again, err, first)
		}
		if _, err := del(idB); connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Errorf("d1 for another Volume: %v, want already_exists", err)
		}
		if got := e.get(t, idB); got.GetState() != ctrlv1.VolumeState_VOLUME_STATE_CREATING {
			t.Errorf("the Volume of the conflicting delete: %v, want it untouched (CREATING)", got)
		}

		setLabels := func(cmd string, expected uint64, l map[string]string) (*ctrlv1.UpdateVolumeLabelsResponse, error) {
			return e.vols.UpdateLabels(ctx, &ctrlv1.UpdateVolumeLabelsRequest{Command: cmdID(cmd), VolumeId: idB, ExpectedLabelsRevision: expected, Labels: l})
		}
		l1, err := setLabels("l1", 1, map[string]string{"app": "web"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := setLabels("l2", 2, map[string]string{"app": "db"}); err != nil {
			t.Fatal(err)
		}
		// The replay answers l1's result though the labels changed since.
		if again, err := setLabels("l1", 1, map[string]string{"app": "web"}); err != nil || !proto.Equal(again, l1) {
			t.Errorf("UpdateVolumeLabels replay: %v %v, want %v", again, err, l1)
		}
		if _, err := setLabels("l1", 1, map[string]string{"app": "other"}); connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Errorf("l1 with other labels: %v, want already_exists", err)
		}
		if got := e.get(t, idB); got.GetLabels()["app"] != "db" || got.GetLabelsRevision() != 3 {
			t.Errorf("labels after the replay and the conflict: %v rev %d, want app=db at 3", got.GetLabels(), got.GetLabelsRevision())
		}
	})
}

// S11: "the page token is bound to the filter": include_deleted is part
// of it.
func TestAPageTokenIsBoundToIncludeDeleted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		var ids []string
		for i := range 3 {
			v, err := e.vols.Create(ctx, create(fmt.Sprintf("c%d", i), 0))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, v.GetVolume().GetVolumeId())
		}
		if _, err := e.vols.Delete(ctx, &ctrlv1.DeleteVolumeRequest{Command: cmdID("d1"), VolumeId: ids[0]}); err != nil {
			t.Fatal(err)
		}
		for _, deleted := range []bool{false, true} {
			res, err := e.vols.List(ctx, &ctrlv1.ListVolumesRequest{PageSize: 1, IncludeDeleted: deleted})
			if err != nil || res.GetNextPageToken() == "" {
				t.Fatalf("first page (include_deleted=%v): %v %v, want a next page", deleted, res, err)
			}
			token := res.GetNextPageToken()
			if _, err := e.vols.List(ctx, &ctrlv1.ListVolumesRequest{PageSize: 1, PageToken: token, IncludeDeleted: !deleted}); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("a token of include_deleted=%v sent with include_deleted=%v: %v, want invalid_argument", deleted, !deleted, err)
			}
			if _, err := e.vols.List(ctx, &ctrlv1.ListVolumesRequest{PageSize: 1, PageToken: token, IncludeDeleted: deleted}); err != nil {
				t.Errorf("the token with its own filter (include_deleted=%v): %v", deleted, err)
			}
		}
	})
}

// S18: "UpdateVolumeLabels replaces all labels; CAS on labels_revision."
// A key left out of the new map is removed.
func TestUpdateVolumeLabelsReplacesAllLabels(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		req := create("c1", 0)
		req.Labels = map[string]string{"app": "web", "tier": "front"}
		v, err := e.vols.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		id := v.GetVolume().GetVolumeId()
		for i, want := range []map[string]string{{"app": "web"}, {"team": "a", "env": "dev"}, {}} {
			res, err := e.vols.UpdateLabels(ctx, &ctrlv1.UpdateVolumeLabelsRequest{
				Command: cmdID(fmt.Sprintf("l%d", i)), VolumeId: id, ExpectedLabelsRevision: uint64(i + 1), Labels: want,
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := res.GetVolume().GetLabels(); !maps.Equal(got, want) {
				t.Errorf("update %d answers labels %v, want exactly %v", i, got, want)
			}
			if got := e.get(t, id); !maps.Equal(got.GetLabels(), want) || got.GetLabelsRevision() != uint64(i+2) {
				t.Errorf("after update %d: labels %v at %d, want exactly %v at %d", i, got.GetLabels(), got.GetLabelsRevision(), want, i+2)
			}
		}
	})
}
