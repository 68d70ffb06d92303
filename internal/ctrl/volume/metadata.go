package volume

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/record"
	"github.com/kibotos/kibotos/internal/store"
)

// metadataUpdate fills what labels and annotations updates share.
func (v *Service) metadataUpdate(u record.MetadataUpdate[*ctrlv1.Volume]) record.MetadataUpdate[*ctrlv1.Volume] {
	u.Load = func(tx *store.Tx, id string) (*ctrlv1.Volume, error) { return get(tx, id, true) }
	u.Check = func(vol *ctrlv1.Volume) error {
		switch vol.GetState() {
		case ctrlv1.VolumeState_VOLUME_STATE_LOST:
			return lostVolume(vol)
		case ctrlv1.VolumeState_VOLUME_STATE_DELETED:
			return precondition(vol, "volume %s is %s: its metadata can only be read", vol.GetVolumeId(), vol.GetState())
		}
		return nil
	}
	u.Save = func(tx *store.Tx, vol *ctrlv1.Volume, now time.Time) error {
		vol.UpdatedAt = timestamppb.New(now)
		return tx.PutVolume(vol)
	}
	u.Stale = func(vol *ctrlv1.Volume, format string, args ...any) error { return precondition(vol, format, args...) }
	u.Result = func(vol *ctrlv1.Volume) proto.Message { return withoutObservation(vol) }
	return u
}

// UpdateLabels replaces all labels; CAS on labels_revision.
func (v *Service) UpdateLabels(ctx context.Context, req *ctrlv1.UpdateVolumeLabelsRequest) (*ctrlv1.UpdateVolumeLabelsResponse, error) {
	out, err := record.ReplaceMetadata(ctx, v.store, v.now(), v.metadataUpdate(record.MetadataUpdate[*ctrlv1.Volume]{
		Kind: "UpdateVolumeLabels", Command: req.GetCommand(), Request: req, ID: req.GetVolumeId(),
		Expected: req.GetExpectedLabelsRevision(), Values: req.GetLabels(), RevisionField: "expected_labels_revision",
		Slot: func(vol *ctrlv1.Volume) (*map[string]string, *uint64) { return &vol.Labels, &vol.LabelsRevision },
	}))
	if err != nil {
		return nil, err
	}
	return &ctrlv1.UpdateVolumeLabelsResponse{Volume: out.(*ctrlv1.Volume)}, nil
}

// UpdateAnnotations replaces all annotations; CAS on annotations_revision.
func (v *Service) UpdateAnnotations(ctx context.Context, req *ctrlv1.UpdateVolumeAnnotationsRequest) (*ctrlv1.UpdateVolumeAnnotationsResponse, error) {
	out, err := record.ReplaceMetadata(ctx, v.store, v.now(), v.metadataUpdate(record.MetadataUpdate[*ctrlv1.Volume]{
		Kind: "UpdateVolumeAnnotations", Annotations: true, Command: req.GetCommand(), Request: req, ID: req.GetVolumeId(),
		Expected: req.GetExpectedAnnotationsRevision(), Values: req.GetAnnotations(), RevisionField: "expected_annotations_revision",
		Slot: func(vol *ctrlv1.Volume) (*map[string]string, *uint64) {
			return &vol.Annotations, &vol.AnnotationsRevision
		},
	}))
	if err != nil {
		return nil, err
	}
	return &ctrlv1.UpdateVolumeAnnotationsResponse{Volume: out.(*ctrlv1.Volume)}, nil
}
