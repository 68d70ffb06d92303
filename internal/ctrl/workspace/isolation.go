package workspace

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/store"
)

// ReleaseNode lets go, in tx, of everything an isolated node held: each
// execution charged to it is forgotten, the Volume it had attached is
// AVAILABLE again and its writable layer free to start elsewhere, and its
// Workspace is FAILED with failure (unavailable, retryable), so that a
// StartWorkspace places it anew. A Workspace one of the interrupted
// commands was creating or starting on the node fails the same way: the
// execution it was booting there is abandoned with the node.
func (s *Service) ReleaseNode(tx *store.Tx, nodeID string, interrupted []*store.CommandRow, failure *ctrlv1.WorkspaceFailure) (fleet.Released, error) {
	var out fleet.Released
	failed := map[string]bool{}
	runtimes, err := tx.NodeExecutions(nodeID)
	if err != nil {
		return out, err
	}
	for _, rt := range runtimes {
		rt.InstanceId, rt.NodeId, rt.BootId, rt.AppliedEgresses = "", "", "", nil
		if err := tx.PutRuntime(rt); err != nil {
			return out, err
		}
		if rt.GetLayerPool() != "" {
			out.RetainedLayers++
		}
		w, err := tx.GetWorkspace(rt.GetWorkspaceId(), true)
		if err != nil {
			return out, err
		}
		detached, err := s.detachVolume(tx, w)
		if err != nil {
			return out, err
		}
		if detached {
			out.Volumes++
		}
		if err := s.failReleased(tx, w, failure, failed); err != nil {
			return out, err
		}
	}
	for _, c := range interrupted {
		if c.GetKind() != kindCreate && c.GetKind() != kindRestore && c.GetKind() != kindStart {
			continue
		}
		w, err := tx.GetWorkspace(c.GetTargetId(), true)
		if err != nil {
			return out, err
		}
		if w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING || w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_STARTING {
			if err := s.failReleased(tx, w, failure, failed); err != nil {
				return out, err
			}
		}
	}
	out.Workspaces = uint64(len(failed))
	return out, nil
}

// failReleased moves w to FAILED once; a deleted Workspace stays deleted.
func (s *Service) failReleased(tx *store.Tx, w *ctrlv1.Workspace, failure *ctrlv1.WorkspaceFailure, failed map[string]bool) error {
	if failed[w.GetWorkspaceId()] || w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED {
		return nil
	}
	failed[w.GetWorkspaceId()] = true
	w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED
	w.Failure = proto.Clone(failure).(*ctrlv1.WorkspaceFailure)
	w.LastStop = nil // present only while STOPPING or STOPPED
	w.GuestObservation = nil
	w.NetworkPolicyStatus = nil
	w.EgressObservations = nil
	w.ResolverObservations = nil
	w.UpdatedAt = timestamppb.New(s.now())
	return tx.PutWorkspace(w)
}

// detachVolume gives up the use right of w's bound Volume: ATTACHED becomes
// AVAILABLE. It reports whether the Volume was attached.
func (s *Service) detachVolume(tx *store.Tx, w *ctrlv1.Workspace) (bool, error) {
	b := w.GetSpec().GetVolume()
	if b.GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND {
		return false, nil
	}
	detached := false
	err := s.volumes.Update(tx, b.GetVolumeId(), func(v *ctrlv1.Volume) {
		if v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_ATTACHED {
			v.State = ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE
			detached = true
		}
	})
	return detached, err
}
