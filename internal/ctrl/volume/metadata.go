package volume

import (
	"context"
	"maps"

	"google.golang.org/protobuf/proto"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/labels"
	"github.com/kibotos/kibotos/internal/store"
)

// metadataChange is one labels or annotations replacement.
type metadataChange struct {
	kind     string
	volumeID string
	expected uint64
	values   map[string]string
	validate func(prefix string, m map[string]string) error
	field    string
	// slot picks the map and revision the change replaces.
	slot func(vol *ctrlv1.Volume) (*map[string]string, *uint64)
}

// UpdateLabels replaces all labels; CAS on labels_revision.
func (v *Service) UpdateLabels(ctx context.Context, req *ctrlv1.UpdateVolumeLabelsRequest) (*ctrlv1.UpdateVolumeLabelsResponse, error) {
	vol, err := v.replaceMetadata(ctx, req.GetCommand(), req, metadataChange{
		kind: "UpdateVolumeLabels", volumeID: req.GetVolumeId(), expected: req.GetExpectedLabelsRevision(),
		values: req.GetLabels(), validate: labels.ValidateLabels, field: "expected_labels_revision",
		slot: func(vol *ctrlv1.Volume) (*map[string]string, *uint64) { return &vol.Labels, &vol.LabelsRevision },
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.UpdateVolumeLabelsResponse{Volume: vol}, nil
}

// UpdateAnnotations replaces all annotations; CAS on annotations_revision.
func (v *Service) UpdateAnnotations(ctx context.Context, req *ctrlv1.UpdateVolumeAnnotationsRequest) (*ctrlv1.UpdateVolumeAnnotationsResponse, error) {
	vol, err := v.replaceMetadata(ctx, req.GetCommand(), req, metadataChange{
		kind: "UpdateVolumeAnnotations", volumeID: req.GetVolumeId(), expected: req.GetExpectedAnnotationsRevision(),
		values: req.GetAnnotations(), validate: labels.ValidateAnnotations, field: "expected_annotations_revision",
		slot: func(vol *ctrlv1.Volume) (*map[string]string, *uint64) {
			return &vol.Annotations, &vol.AnnotationsRevision
		},
	})
	if err != nil {
		return nil, err
	}
	return &ctrlv1.UpdateVolumeAnnotationsResponse{Volume: vol}, nil
}

// replaceMetadata admits a labels or annotations replacement: a stale
// revision is failed_precondition and writes nothing; the same content
// leaves the revision as it is.
func (v *Service) replaceMetadata(ctx context.Context, meta *ctrlv1.CommandMetadata, req proto.Message, ch metadataChange) (*ctrlv1.Volume, error) {
	if err := command.ValidateID("command.command_id", meta); err != nil {
		return nil, err
	}
	if err := ch.validate(fieldOf(ch.kind), ch.values); err != nil {
		return nil, err
	}
	var vol *ctrlv1.Volume
	err := command.Do(ctx, v.store, func(tx *store.Tx) error {
		out, err := command.Admit(tx, v.now(), meta.GetCommandId(), ch.kind, req, func() (command.Effect, error) {
			cur, err := get(tx, ch.volumeID, true)
			if err != nil {
				return command.Effect{}, err
			}
			switch cur.GetState() {
			case ctrlv1.VolumeState_VOLUME_STATE_DELETED, ctrlv1.VolumeState_VOLUME_STATE_LOST:
				return command.Effect{}, precondition(cur, "volume %s is %s: its metadata can only be read", cur.GetVolumeId(), cur.GetState())
			}
			values, revision := ch.slot(cur)
			if ch.expected != *revision {
				return command.Effect{}, precondition(cur, "%s %d is stale: the volume is at %d", ch.field, ch.expected, *revision)
			}
			if !maps.Equal(*values, ch.values) {
				*values = ch.values
				*revision++
				cur.UpdatedAt = timestamppb.New(v.now())
				if err := tx.PutVolume(cur); err != nil {
					return command.Effect{}, err
				}
			}
			return command.Effect{Target: cur.GetVolumeId(), Result: withoutObservation(cur)}, nil
		})
		if err == nil {
			vol = out.(*ctrlv1.Volume)
		}
		return err
	})
	return vol, err
}

func fieldOf(kind string) string {
	if kind == "UpdateVolumeLabels" {
		return "labels"
	}
	return "annotations"
}
