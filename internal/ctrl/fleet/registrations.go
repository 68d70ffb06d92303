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
		var err error
		res.Registrations, res.NextPageToken, err = page.Collect(page.Size(req.GetPageSize()), after, filter,
			func(n *operatorv1.NodeRegistration) string { return n.GetNodeId() },
			func(n *operatorv1.NodeRegistration) bool {
				f.View(n, now)
				return len(want) == 0 || want[n.GetStatus()]
			}, tx.ListNodes)
		return err
	})
	return res, err
}

// GetNodeRegistration reads one registration.
func (f *Fleet) GetNodeRegistration(ctx context.Context, req *operatorv1.GetNodeRegistrationRequest) (*operatorv1.GetNodeRegistrationResponse, error) {
	var n *operatorv1.NodeRegistration
	err := f.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		n, err = tx.GetNode(req.GetNodeId(), false)
		if errors.Is(err, store.ErrNotFound) {
			return apierr.NotFound("node", req.GetNodeId())
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &operatorv1.GetNodeRegistrationResponse{Registration: f.View(n, f.now())}, nil
}
