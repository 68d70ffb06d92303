package egress

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
)

// KindApplyEgressUpdate is the command that puts an Egress's new revision
// in force on the running execution of one Workspace whose policy names
// the Egress. UpdateEgress admits one for each such Workspace in its own
// transaction, so neither a ctrl restart nor a node out of reach loses it;
// the Workspace domain runs it as it runs a policy update (an
// ApplyNetworkPolicy of the same policy revision with the Egress's current
// revision and this update's drain_seconds). Its request is the
// UpdateEgressRequest without its spec.
const KindApplyEgressUpdate = "ApplyEgressUpdate"

// maxFanOut bounds the Workspaces one update reaches in its admitting
// transaction: far more than a caller's policies name one proxy with.
const maxFanOut = 100000

// Kicker wakes the command runner (command.Runner): a follow-up was
// admitted. Without one the runner finds it at its next poll.
type Kicker interface{ Kick() }

// KindApplyResolverUpdate is KindApplyEgressUpdate for a Resolver: the
// same policy revision with the Resolver's new revision (queries are each
// their own, so there is nothing to drain). Its request is the
// UpdateResolverRequest without its spec.
const KindApplyResolverUpdate = "ApplyResolverUpdate"

// FollowUpID is the id of the command that applies revision rev of Egress
// egressID to Workspace workspaceID: one per revision and Workspace, so a
// replayed admission admits nothing twice.
func FollowUpID(egressID string, rev uint64, workspaceID string) string {
	return fmt.Sprintf("egress:%s:%d:%s", egressID, rev, workspaceID)
}

// ResolverFollowUpID is FollowUpID for a Resolver.
func ResolverFollowUpID(resolverID string, rev uint64, workspaceID string) string {
	return fmt.Sprintf("resolver:%s:%d:%s", resolverID, rev, workspaceID)
}

// followUp is what a change of a referenced object admits for each
// Workspace whose policy names it.
type followUp struct {
	ref, objectID, kind string
	id                  func(workspaceID string) string
	request             func(commandID string) proto.Message
	response            proto.Message
}

// egressFollowUp applies e's new revision with the update's drain.
func egressFollowUp(e *ctrlv1.Egress, drain uint32) followUp {
	return followUp{ref: store.RefEgress, objectID: e.GetEgressId(), kind: KindApplyEgressUpdate,
		id: func(wid string) string { return FollowUpID(e.GetEgressId(), e.GetRevision(), wid) },
		request: func(id string) proto.Message {
			return &ctrlv1.UpdateEgressRequest{Command: &ctrlv1.CommandMetadata{CommandId: id}, EgressId: e.GetEgressId(),
				ExpectedRevision: e.GetRevision() - 1, DrainSeconds: drain}
		},
		response: &ctrlv1.UpdateEgressResponse{}}
}

// resolverFollowUp applies r's new revision.
func resolverFollowUp(r *ctrlv1.Resolver) followUp {
	return followUp{ref: store.RefResolver, objectID: r.GetResolverId(), kind: KindApplyResolverUpdate,
		id: func(wid string) string { return ResolverFollowUpID(r.GetResolverId(), r.GetRevision(), wid) },
		request: func(id string) proto.Message {
			return &ctrlv1.UpdateResolverRequest{Command: &ctrlv1.CommandMetadata{CommandId: id}, ResolverId: r.GetResolverId(),
				ExpectedRevision: r.GetRevision() - 1}
		},
		response: &ctrlv1.UpdateResolverResponse{}}
}

// admitFollowUps admits, in tx, f's application for each Workspace whose
// policy names its object and that runs or may by then (AVAILABLE,
// CREATING, STARTING). It reports whether it admitted any.
func admitFollowUps(tx *store.Tx, now time.Time, f followUp) (bool, error) {
	ids, err := tx.PolicyReferrers(f.ref, f.objectID, maxFanOut)
	if err != nil {
		return false, err
	}
	admitted := false
	for _, wid := range ids {
		w, err := tx.GetWorkspace(wid, false)
		if err != nil {
			return false, fmt.Errorf("workspace %s of policy_references: %w", wid, err)
		}
		if !mayRun(w.GetState()) {
			continue // nothing runs; its next start reads the current revision
		}
		id := f.id(wid)
		if _, err := command.Admit(tx, now, id, f.kind, f.request(id), func() (command.Effect, error) {
			return command.Effect{Target: wid, Result: f.response, Long: true}, nil
		}); err != nil {
			return false, fmt.Errorf("admit %s: %w", id, err)
		}
		admitted = true
	}
	return admitted, nil
}

// mayRun: a Workspace in state st has an execution, or is starting one
// that may start with an older revision.
func mayRun(st ctrlv1.WorkspaceState) bool {
	switch st {
	case ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE, ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING, ctrlv1.WorkspaceState_WORKSPACE_STATE_STARTING:
		return true
	}
	return false
}
