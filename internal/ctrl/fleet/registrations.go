package fleet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/page"
	"github.com/kibotos/kibotos/internal/store"
)

// ListNodeRegistrations pages registrations by node_id, optionally narrowed
// to some statuses.
func (f *Fleet) ListNodeRegistrations(ctx context.Context, req *operatorv1.ListNodeRegistrationsRequest) (*operatorv1.ListNodeRegistrationsResponse, error) {
	want := map[operatorv1.NodeRegistrationStatus]bool{}
	var names []string
	for i, s := range req.GetStatuses() {
		if _, ok := operatorv1.NodeRegistrationStatus_name[int32(s)]; !ok || s == operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNSPECIFIED {
			return nil, apierr.Invalid(fmt.Sprintf("statuses[%d]", i), "is not a node registration status")
		}
		want[s] = true
		names = append(names, s.String())
	}
	sort.Strings(names)
	filter := strings.Join(names, ",")
	after, err := page.After(req.GetPageToken(), filter)
	if err != nil {
		return nil, err
	}
	now := f.now()
	res := &operatorv1.ListNodeRegistrationsResponse{}
	err = f.store.Tx(ctx, func(tx *store.Tx) error {
		lc, err := readLifecycle(tx)
		if err != nil {
			return err
		}
		res.Registrations, res.NextPageToken, err = page.Collect(page.Size(req.GetPageSize()), after, filter,
			func(n *operatorv1.NodeRegistration) string { return n.GetNodeId() },
			func(n *operatorv1.NodeRegistration) bool {
				f.view(n, now, lc)
				return len(want) == 0 || want[n.GetStatus()]
			}, tx.ListNodes)
		for _, n := range res.Registrations {
			if err := fillHeld(tx, n, lc); err != nil {
				return err
			}
		}
		return err
	})
	return res, err
}

// GetNodeRegistration reads one registration. A node_id no node could
// have is bad input, not an unknown node.
func (f *Fleet) GetNodeRegistration(ctx context.Context, req *operatorv1.GetNodeRegistrationRequest) (*operatorv1.GetNodeRegistrationResponse, error) {
	if err := ValidateNodeID("node_id", req.GetNodeId()); err != nil {
		return nil, err
	}
	var n *operatorv1.NodeRegistration
	err := f.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		n, err = f.readView(tx, req.GetNodeId(), false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &operatorv1.GetNodeRegistrationResponse{Registration: n}, nil
}

// readView reads one registration as the API shows it now; a node that
// never enrolled is not_found.
func (f *Fleet) readView(tx *store.Tx, nodeID string, lock bool) (*operatorv1.NodeRegistration, error) {
	n, err := tx.GetNode(nodeID, lock)
	if errors.Is(err, store.ErrNotFound) {
		return nil, apierr.NotFound("node", nodeID)
	} else if err != nil {
		return nil, err
	}
	lc, err := readLifecycle(tx, nodeID)
	if err != nil {
		return nil, err
	}
	return f.view(n, f.now(), lc), fillHeld(tx, n, lc)
}
