package catalog

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/page"
	"github.com/kibotos/kibotos/internal/store"
)

// Liveness says when a node's session must be live for its reports to be
// fresh: the fleet's rule for a live session (store.CandidateQuery.LiveAt).
type Liveness interface {
	LiveAt(now time.Time) time.Time
}

// GetTemplateDelivery reports, per admitted node, how far a READY
// revision's image has arrived and whether the node can use it, from what
// the nodes reported in their observations (node_artifacts). It never
// calls a node.
func (c *Catalog) GetTemplateDelivery(ctx context.Context, req *operatorv1.GetTemplateDeliveryRequest) (*operatorv1.GetTemplateDeliveryResponse, error) {
	sel := req.GetSelector()
	if err := checkSelector(sel); err != nil {
		return nil, err
	}
	one := req.GetNodeId()
	if one != "" {
		if err := fleet.ValidateNodeID("node_id", one); err != nil {
			return nil, err
		}
	}
	filter := fmt.Sprintf("delivery|%s|%s", sel.GetTemplate(), sel.GetRevision())
	after, err := page.After(req.GetPageToken(), filter)
	if err != nil {
		return nil, err
	}
	res := &operatorv1.GetTemplateDeliveryResponse{}
	err = c.store.Tx(ctx, func(tx *store.Tx) error {
		r, err := deliverableRevision(tx, sel)
		if err != nil {
			return err
		}
		res.Ref = r.GetRef()
		var nodes []*store.NodePlacement
		if one != "" {
			n, err := tx.GetNodePlacement(one)
			if err != nil {
				return notFound(err, "node", one)
			}
			nodes = []*store.NodePlacement{n}
		} else {
			nodes, res.NextPageToken, err = page.Collect(page.Size(req.GetPageSize()), after, filter,
				func(n *store.NodePlacement) string { return n.NodeID },
				func(n *store.NodePlacement) bool { return n.Admitted },
				tx.ListNodePlacements)
			if err != nil {
				return err
			}
		}
		liveAt := c.liveness.LiveAt(c.now())
		ready, admitted, err := tx.ArtifactReadiness(r.GetImageDigest(), liveAt, capability.Providers)
		if err != nil {
			return err
		}
		res.ReadyNodeCount, res.NotReadyNodeCount = uint32(ready), uint32(admitted-ready)
		if len(nodes) == 0 {
			return nil
		}
		held, err := tx.ArtifactOnNodes(r.GetImageDigest(), nodes[0].NodeID, nodes[len(nodes)-1].NodeID)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			a, ok := held[n.NodeID]
			res.Deliveries = append(res.Deliveries, &operatorv1.TemplateNodeDelivery{NodeId: n.NodeID, Observation: delivery(n, a, ok, liveAt)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// checkSelector refuses names no Template or revision can have; an empty
// one selects a default.
func checkSelector(sel *ctrlv1.TemplateSelector) error {
	if t := sel.GetTemplate(); t != "" && !templatePattern.MatchString(t) {
		return apierr.Invalid("selector.template", "must be 1 to 63 characters of a-z, 0-9 and '-', starting with a letter and not ending with '-'")
	}
	if r := sel.GetRevision(); r != "" && !revisionPattern.MatchString(r) {
		return apierr.Invalid("selector.revision", "must be 1 to 63 characters of a-z, 0-9, '.', '_' and '-'")
	}
	return nil
}

// deliverableRevision resolves the selector to a READY revision: only
// one has an image to deliver.
func deliverableRevision(tx *store.Tx, sel *ctrlv1.TemplateSelector) (*operatorv1.TemplateRevision, error) {
	r, err := tx.SelectTemplateRevision(sel.GetTemplate(), sel.GetRevision())
	if err != nil {
		return nil, notFound(err, "template revision", sel.GetTemplate()+"/"+sel.GetRevision())
	}
	if r.GetState() != stateReady {
		state := strings.TrimPrefix(r.GetState().String(), "TEMPLATE_REVISION_STATE_")
		return nil, apierr.Precondition(&ctrlv1.ErrorDetail{Field: "selector"},
			"template revision %s/%s is %s: only a READY revision has an image to deliver", r.GetRef().GetTemplate(), r.GetRef().GetRevision(), state)
	}
	return r, nil
}

// delivery is one node's delivery of an image, judged from its records:
// a node without a live session is UNKNOWN (what it last reported may be
// old), one that runs no VMs can never use it, and otherwise the image is
// READY once held complete, DISTRIBUTING while it arrives, and NOT_READY
// with no reason while the node does not hold it. held says whether the
// node reported a (the image) at all.
func delivery(n *store.NodePlacement, a store.NodeArtifact, held bool, liveAt time.Time) *ctrlv1.TemplateDeliveryObservation {
	o := &ctrlv1.TemplateDeliveryObservation{State: ctrlv1.TemplateDeliveryState_TEMPLATE_DELIVERY_STATE_NOT_READY}
	if !n.LastSeenAt.IsZero() {
		o.ObservedAt = timestamppb.New(n.LastSeenAt)
	}
	if held {
		o.DeliveredBytes, o.TotalBytes = a.DeliveredBytes, a.TotalBytes
		if !a.StartedAt.IsZero() {
			o.StartedAt = timestamppb.New(a.StartedAt)
		}
	}
	switch {
	case !n.Live || n.LiveUntil.Before(liveAt):
		o.State, o.Reason = ctrlv1.TemplateDeliveryState_TEMPLATE_DELIVERY_STATE_UNKNOWN, ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_OBSERVATION_STALE
		o.Message = "the node has no live control session: what it last reported may be out of date"
	case !fleet.RunsVMs(n):
		o.Reason = ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_CAPABILITY_MISMATCH
		o.Message = "the node runs no VMs (capability " + strings.Join(capability.Providers, " or ") + ")"
	case held && a.Complete:
		o.State = ctrlv1.TemplateDeliveryState_TEMPLATE_DELIVERY_STATE_READY
	case held:
		o.Reason = ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_DISTRIBUTING
	}
	return o
}
