package workspace

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/store"
)

// CreateOnNode is Create with its placement fixed to one node: the same
// Workspace command (kind, command_id, replay, GetWorkspaceCommand), whose
// input is the whole operator request, node included, so the same
// command_id with another node, or sent to CreateWorkspace, is
// already_exists. A node never registered is not_found and admits nothing.
// The Workspace keeps no record of the node: later starts place as usual.
func (s *Service) CreateOnNode(ctx context.Context, req *operatorv1.CreateWorkspaceOnNodeRequest) (*operatorv1.CreateWorkspaceOnNodeResponse, error) {
	if err := fleet.ValidateNodeID("node_id", req.GetNodeId()); err != nil {
		return nil, err
	}
	res, err := s.create(ctx, req.GetRequest(), req, req.GetNodeId())
	if err != nil {
		return nil, err
	}
	return &operatorv1.CreateWorkspaceOnNodeResponse{Response: res}, nil
}

// StartOnNode is Start with its placement fixed to one node, under the
// rules of CreateOnNode.
func (s *Service) StartOnNode(ctx context.Context, req *operatorv1.StartWorkspaceOnNodeRequest) (*operatorv1.StartWorkspaceOnNodeResponse, error) {
	if err := fleet.ValidateNodeID("node_id", req.GetNodeId()); err != nil {
		return nil, err
	}
	res, err := s.start(ctx, req.GetRequest(), req, req.GetNodeId())
	if err != nil {
		return nil, err
	}
	return &operatorv1.StartWorkspaceOnNodeResponse{Response: res}, nil
}

// registered answers not_found for a node that never enrolled (a retired
// tombstone is registered: its placement then fails as no node fitting).
func registered(tx *store.Tx, nodeID string) error {
	if nodeID == "" {
		return nil
	}
	if _, err := tx.GetNode(nodeID, false); errors.Is(err, store.ErrNotFound) {
		return apierr.NotFound("node", nodeID)
	} else if err != nil {
		return err
	}
	return nil
}

// unpin is the Workspace request a command carries and the node an
// ...OnNode command fixes its placement to ("" for the Workspace API's own
// requests).
func unpin(req proto.Message) (proto.Message, string) {
	switch r := req.(type) {
	case *operatorv1.CreateWorkspaceOnNodeRequest:
		return r.GetRequest(), r.GetNodeId()
	case *operatorv1.StartWorkspaceOnNodeRequest:
		return r.GetRequest(), r.GetNodeId()
	}
	return req, ""
}

// startApply is applyStart for a start fixed to nodeID.
func (s *Service) startApply(nodeID string) func(tx *store.Tx, w *ctrlv1.Workspace, now time.Time) (bool, error) {
	return func(tx *store.Tx, w *ctrlv1.Workspace, now time.Time) (bool, error) {
		if err := registered(tx, nodeID); err != nil {
			return false, err
		}
		return s.applyStart(tx, w, now)
	}
}
