package volume_test

import (
	"slices"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// UpdateVolumeAnnotations replaces all annotations, CAS on
// annotations_revision: a change moves it by one (labels_revision stays),
// a stale token writes nothing, the same content keeps it, and a replay
// answers the recorded result.
func TestAnnotationsCASAndRevisions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		req := create("c1", 0)
		req.Annotations = map[string]string{"x": "1", "y": "2"}
		v, err := e.vols.Create(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		id := v.GetVolume().GetVolumeId()
		update := func(cmd string, expected uint64, a map[string]string) (*ctrlv1.UpdateVolumeAnnotationsResponse, error) {
			return e.vols.UpdateAnnotations(ctx, &ctrlv1.UpdateVolumeAnnotationsRequest{
				Command: &ctrlv1.CommandMetadata{CommandId: cmd}, VolumeId: id, ExpectedAnnotationsRevision: expected, Annotations: a,
			})
		}
		res, err := update("a1", 1, map[string]string{"x": "9"})
		if err != nil || res.GetVolume().GetAnnotationsRevision() != 2 || res.GetVolume().GetLabelsRevision() != 1 ||
			len(res.GetVolume().GetAnnotations()) != 1 || res.GetVolume().GetAnnotations()["x"] != "9" {
			t.Fatalf("first update: %v %v, want {x:9} at revision 2, labels at 1", res.GetVolume(), err)
		}
		if _, err := update("a2", 1, map[string]string{"x": "0"}); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("stale revision: %v, want failed_precondition", err)
		}
		if got, _ := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: id}); got.GetVolume().GetAnnotations()["x"] != "9" {
			t.Errorf("a stale write changed the Volume: %v", got.GetVolume())
		}
		if same, err := update("a3", 2, map[string]string{"x": "9"}); err != nil || same.GetVolume().GetAnnotationsRevision() != 2 {
			t.Errorf("same content must not move the revision: %v %v", same.GetVolume(), err)
		}
		if replay, err := update("a1", 1, map[string]string{"x": "9"}); err != nil || replay.GetVolume().GetAnnotationsRevision() != 2 {
			t.Errorf("replay of a1: %v %v, want its recorded result", replay.GetVolume(), err)
		}
	})
}

// A deleted Volume stays readable as DELETED with its labels and
// annotations; ListVolumes leaves it out unless include_deleted asks for
// it, and lists in volume_id order.
func TestDeletedVolumesStayReadableAndAreListedOnRequest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		var ids []string
		for _, c := range []string{"c1", "c2", "c3"} {
			req := create(c, 0)
			req.Labels, req.Annotations = map[string]string{"team": "a"}, map[string]string{"note": c}
			v, err := e.vols.Create(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, v.GetVolume().GetVolumeId())
		}
		gone := ids[1]
		if _, err := e.vols.Delete(ctx, &ctrlv1.DeleteVolumeRequest{Command: &ctrlv1.CommandMetadata{CommandId: "d1"}, VolumeId: gone}); err != nil {
			t.Fatal(err)
		}
		got, err := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: gone})
		if err != nil || got.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_DELETED ||
			got.GetVolume().GetLabels()["team"] != "a" || got.GetVolume().GetAnnotations()["note"] != "c2" {
			t.Errorf("the deleted Volume: %v %v, want DELETED with its labels and annotations", got.GetVolume(), err)
		}
		listed := func(includeDeleted bool) []string {
			res, err := e.vols.List(ctx, &ctrlv1.ListVolumesRequest{IncludeDeleted: includeDeleted})
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, v := range res.GetVolumes() {
				out = append(out, v.GetVolumeId())
			}
			return out
		}
		all := slices.Clone(ids)
		slices.Sort(all)
		if got := listed(true); !slices.Equal(got, all) {
			t.Errorf("with include_deleted: %v, want %v (volume_id order)", got, all)
		}
		live := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id == gone })
		if got := listed(false); !slices.Equal(got, live) {
			t.Errorf("without include_deleted: %v, want %v", got, live)
		}
	})
}

// Every Volume mutation is a command: without a command_id it is
// invalid_argument naming command.command_id.
func TestEveryVolumeMutationNeedsACommandID(t *testing.T) {
	e := newEnv(t, storetest.Backend{Name: "sqlite", DSN: storetest.SQLiteDSN})
	v, err := e.vols.Create(ctx, create("c1", 0))
	if err != nil {
		t.Fatal(err)
	}
	id := v.GetVolume().GetVolumeId()
	for name, call := range map[string]func() error{
		"CreateVolume": func() error { _, err := e.vols.Create(ctx, &ctrlv1.CreateVolumeRequest{}); return err },
		"ResizeVolume": func() error {
			_, err := e.vols.Resize(ctx, &ctrlv1.ResizeVolumeRequest{VolumeId: id, CapacityBytes: 2 << 30})
			return err
		},
		"DeleteVolume": func() error { _, err := e.vols.Delete(ctx, &ctrlv1.DeleteVolumeRequest{VolumeId: id}); return err },
		"UpdateVolumeLabels": func() error {
			_, err := e.vols.UpdateLabels(ctx, &ctrlv1.UpdateVolumeLabelsRequest{VolumeId: id, ExpectedLabelsRevision: 1})
			return err
		},
		"UpdateVolumeAnnotations": func() error {
			_, err := e.vols.UpdateAnnotations(ctx, &ctrlv1.UpdateVolumeAnnotationsRequest{VolumeId: id, ExpectedAnnotationsRevision: 1})
			return err
		},
	} {
		if err := call(); connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "command.command_id" {
			t.Errorf("%s without a command_id: %v (field %q), want invalid_argument naming command.command_id", name, err, apierr.FieldOf(err))
		}
	}
	if got, _ := e.vols.Get(ctx, &ctrlv1.GetVolumeRequest{VolumeId: id}); got.GetVolume().GetState() != ctrlv1.VolumeState_VOLUME_STATE_CREATING {
		t.Errorf("the refused mutations changed the Volume: %v", got.GetVolume())
	}
}
