package transfer

import (
	"encoding/json"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// project is the provider-neutral TransferManifest of a verified archive
// of size bytes and digest, with the archive's own manifest encoded for
// the store (it names parts, which the API never shows). An archive whose
// source does not decode as a Workspace spec or a Volume is refused: a
// restore could not use it.
//
// source_workspace_id and source_volume_id stay empty: an imported
// archive's source ids are another deployment's.
func project(m *archive.Manifest, size uint64, digest string) (*ctrlv1.TransferManifest, []byte, error) {
	out := &ctrlv1.TransferManifest{SizeBytes: size, Digest: digest, Completeness: completeness(m.Completeness)}
	if !m.CreatedAt.IsZero() {
		out.CreatedAt = timestamppb.New(m.CreatedAt)
	}
	if t := m.Template; t != nil {
		out.Template = &ctrlv1.TemplateRef{Template: t.Name, Revision: t.Revision}
	}
	opts := protojson.UnmarshalOptions{DiscardUnknown: true}
	switch m.Source.Kind {
	case archive.SourceWorkspace:
		spec := &ctrlv1.WorkspaceSpec{}
		if err := opts.Unmarshal(orEmpty(m.Source.Spec), spec); err != nil {
			return nil, nil, refused("data", "the archive's workspace spec does not decode: %v", err)
		}
		out.Resources = spec.GetResources()
		if out.Template == nil && spec.GetTemplate() != nil {
			out.Template = spec.GetTemplate()
		}
	case archive.SourceVolume:
		vol := &ctrlv1.Volume{}
		if err := opts.Unmarshal(orEmpty(m.Source.Spec), vol); err != nil {
			return nil, nil, refused("data", "the archive's volume does not decode: %v", err)
		}
		out.VolumeCapacityBytes = vol.GetSpec().GetCapacityBytes()
	}
	private, err := json.Marshal(m)
	return out, private, err
}

func orEmpty(b json.RawMessage) []byte {
	if len(b) == 0 {
		return []byte("{}")
	}
	return b
}

func completeness(c string) ctrlv1.Completeness {
	switch c {
	case "complete":
		return ctrlv1.Completeness_COMPLETENESS_COMPLETE
	case "partial":
		return ctrlv1.Completeness_COMPLETENESS_PARTIAL
	default:
		return ctrlv1.Completeness_COMPLETENESS_UNKNOWN
	}
}
