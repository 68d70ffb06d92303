package fleet

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/page"
	"github.com/kibotos/kibotos/internal/store"
)

// ListWorkspacePlacements pages, by workspace_id, the Workspaces whose
// current Instance holds an Allocation, narrowed to exactly one node,
// Workspace or Instance. A node or Workspace that does not exist is
// not_found; an Instance current nowhere is an empty page. It reads ctrl's
// records only.
func (f *Fleet) ListWorkspacePlacements(ctx context.Context, req *operatorv1.ListWorkspacePlacementsRequest) (*operatorv1.ListWorkspacePlacementsResponse, error) {
	var filter store.AllocationFilter
	var key string
	switch v := req.GetFilter().(type) {
	case *operatorv1.ListWorkspacePlacementsRequest_NodeId:
		filter.NodeID, key = v.NodeId, "node_id="+v.NodeId
	case *operatorv1.ListWorkspacePlacementsRequest_WorkspaceId:
		filter.WorkspaceID, key = v.WorkspaceId, "workspace_id="+v.WorkspaceId
	case *operatorv1.ListWorkspacePlacementsRequest_InstanceId:
		filter.InstanceID, key = v.InstanceId, "instance_id="+v.InstanceId
	}
	if filter == (store.AllocationFilter{}) {
		return nil, apierr.Invalid("filter", "name exactly one of node_id, workspace_id or instance_id")
	}
	after, err := page.After(req.GetPageToken(), key)
	if err != nil {
		return nil, err
	}
	res := &operatorv1.ListWorkspacePlacementsResponse{}
	err = f.store.Tx(ctx, func(tx *store.Tx) error {
		if err := exists(tx, filter); err != nil {
			return err
		}
		list, next, err := page.Collect(page.Size(req.GetPageSize()), after, key,
			func(a *store.Allocation) string { return a.WorkspaceID },
			func(*store.Allocation) bool { return true },
			func(after string, n int) ([]*store.Allocation, error) { return tx.ListAllocations(filter, after, n) })
		if err != nil {
			return err
		}
		res.NextPageToken = next
		for _, a := range list {
			w, err := tx.GetWorkspace(a.WorkspaceID, false)
			if err != nil {
				return err
			}
			state, _ := f.ObservedState(w.GetState(), a.NodeID, func() (*operatorv1.NodeRegistration, error) { return tx.GetNode(a.NodeID, false) })
			res.WorkspacePlacements = append(res.WorkspacePlacements, &operatorv1.WorkspacePlacement{
				WorkspaceId: a.WorkspaceID, WorkspaceState: state, InstanceId: a.InstanceID, NodeId: a.NodeID,
				Allocation:  &operatorv1.NodeResources{CpuMillis: uint32(a.CPUMillis), MemoryBytes: a.MemoryBytes, DiskBytes: a.DiskBytes},
				AllocatedAt: timestamppb.New(a.AllocatedAt),
			})
		}
		return nil
	})
	return res, err
}

// exists answers not_found for a node or Workspace the filter names that
// does not exist. An Instance cannot be told apart from one that never
// existed: it is not checked.
func exists(tx *store.Tx, f store.AllocationFilter) error {
	switch {
	case f.NodeID != "":
		if _, err := tx.GetNode(f.NodeID, false); errors.Is(err, store.ErrNotFound) {
			return apierr.NotFound("node", f.NodeID)
		} else if err != nil {
			return err
		}
	case f.WorkspaceID != "":
		if _, err := tx.GetWorkspace(f.WorkspaceID, false); errors.Is(err, store.ErrNotFound) {
			return apierr.NotFound("workspace", f.WorkspaceID)
		} else if err != nil {
			return err
		}
	}
	return nil
}
