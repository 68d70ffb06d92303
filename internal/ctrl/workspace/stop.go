package workspace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/egress"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/store"
)

// runStop stops the current execution.
func (s *Service) runStop(ctx context.Context, wk *command.Work) error {
	req, err := wk.Request()
	if err != nil {
		return err
	}
	force := false
	cause := ctrlv1.StopCause_STOP_CAUSE_REQUESTED
	switch r := req.(type) {
	case *ctrlv1.StopWorkspaceRequest:
		force = r.GetMode() == ctrlv1.StopMode_STOP_MODE_FORCE
	}
	if strings.HasPrefix(wk.Command().GetCommandId(), "expire:") {
		cause = ctrlv1.StopCause_STOP_CAUSE_EXPIRED
	}
	var rt *storev1.WorkspaceRuntime
	if err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		rt, err = tx.GetRuntime(wk.Command().GetTargetId(), false)
		return err
	}); err != nil {
		return err
	}
	answer, err := s.fleet.Await(ctx, wk, "stop", rt.GetNodeId(), &nodev1.StopExecution{InstanceId: rt.GetInstanceId(), Force: force}, ctrlv1.FailureStage_FAILURE_STAGE_STOPPING)
	if answer == nil || err != nil {
		return err
	}
	if answer.Failure != nil {
		return wk.Fail(ctx, answer.Failure, func(tx *store.Tx) error {
			return s.stopFailed(tx, wk.Command().GetTargetId(), rt.GetInstanceId(), wk.Command().GetCommandId())
		})
	}
	result := &nodev1.StopResult{}
	if err := answer.Result.UnmarshalTo(result); err != nil {
		return err
	}
	durability := ctrlv1.StopDurability_STOP_DURABILITY_UNCONFIRMED
	if result.GetDurable() {
		durability = ctrlv1.StopDurability_STOP_DURABILITY_CONFIRMED
	}
	return wk.Succeed(ctx, func(tx *store.Tx) error {
		return s.stopped(tx, wk.Command().GetTargetId(), rt.GetInstanceId(), &ctrlv1.WorkspaceStop{
			Cause: cause, Force: force, Durability: durability, CommandId: wk.Command().GetCommandId(),
			RequestedAt: wk.Command().GetAdmittedAt(), CompletedAt: timestamppb.New(s.now()),
		})
	})
}

// stopFailed records that the node did not stop instance for the stop
// command: the execution runs on as far as ctrl knows, so the Workspace
// is AVAILABLE again, without the stop as its last_stop, and can be
// stopped again (FORCE, say). Left STOPPING with no command in progress,
// it refused every later stop and start. A Workspace that is no longer
// STOPPING by this stop, or runs another instance, is left as it is.
func (s *Service) stopFailed(tx *store.Tx, workspaceID, instance, commandID string) error {
	rt, err := tx.GetRuntime(workspaceID, false)
	if err != nil || rt.GetInstanceId() != instance {
		return err
	}
	w, err := tx.GetWorkspace(workspaceID, true)
	if err != nil {
		return err
	}
	if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPING || w.GetLastStop().GetCommandId() != commandID {
		return nil
	}
	w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE
	w.LastStop = nil
	w.UpdatedAt = timestamppb.New(s.now())
	return tx.PutWorkspace(w)
}

// stopped records that instance no longer runs: STOPPED with stop (a
// Workspace being deleted stays DELETING), the Volume detached. A report
// about an older instance changes nothing.
func (s *Service) stopped(tx *store.Tx, workspaceID, instance string, stop *ctrlv1.WorkspaceStop) error {
	rt, err := tx.GetRuntime(workspaceID, true)
	if err != nil || rt.GetInstanceId() != instance {
		return err
	}
	if err := tx.ReleaseAllocation(workspaceID, instance); err != nil {
		return err
	}
	rt.InstanceId, rt.NodeId, rt.BootId, rt.AppliedEgresses = "", "", "", nil
	if err := tx.PutRuntime(rt); err != nil {
		return err
	}
	w, err := tx.GetWorkspace(workspaceID, true)
	if err != nil {
		return err
	}
	if _, err := s.detachVolume(tx, w); err != nil {
		return err
	}
	// No execution, so nothing observes one, deleted or not.
	w.GuestObservation = nil
	w.NetworkPolicyStatus = nil
	w.EgressObservations = nil
	w.ResolverObservations = nil
	if w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETING && w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED {
		w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED
		w.LastStop = stop
	}
	w.UpdatedAt = timestamppb.New(s.now())
	return tx.PutWorkspace(w)
}

// runPolicy applies a network policy to the Workspace's running
// execution, with its Egresses and Resolvers at their current revisions:
// for an UpdateWorkspaceNetworkPolicy, the revision that update made, with
// its own drain_seconds (a later update admitted meanwhile follows with
// its own); for an UpdateEgress's follow-up (egress.KindApplyEgressUpdate),
// the policy revision in force with the Egress's new one, and likewise
// for an UpdateResolver's (egress.KindApplyResolverUpdate).
// network_policy_status says what the node confirmed, its Resolvers as
// they were sent.
// A failed policy application leaves none (the command says why, at
// FAILURE_STAGE_APPLYING_NETWORK); a failed Egress update leaves the status
// as it was, as the node leaves the policy in force. A Workspace still
// starting is waited for (its start may carry older revisions), and so is
// an earlier application still in progress, so that the node gets them in
// order; with no execution running there is nothing to apply: the next
// start carries the policy.
func (s *Service) runPolicy(ctx context.Context, wk *command.Work) error {
	id := wk.Command().GetTargetId()
	own, err := madePolicy(wk)
	if err != nil {
		return err
	}
	ps, err := s.policyState(ctx, id, wk.Command().GetCommandId(), own)
	if err != nil {
		return err
	}
	w, rt, egresses, earlier := ps.w, ps.rt, ps.egresses, ps.earlier
	sent := wk.Command().GetNodeId() != "" // an earlier step sent it: collect that answer
	switch st := w.GetState(); {
	case st == ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING || st == ctrlv1.WorkspaceState_WORKSPACE_STATE_STARTING:
		return wk.Wait(ctx, "the Workspace to finish starting", policyRetry)
	case !sent && (st != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || rt.GetInstanceId() == "" || inForce(w, ps.policy, egresses, ps.resolvers)):
		return wk.Succeed(ctx, func(*store.Tx) error { return nil }) // nothing runs, or it is in force already
	case !sent && earlier != nil:
		return wk.Wait(ctx, fmt.Sprintf("the earlier network policy application %s", earlier.GetCommandId()), policyRetry)
	}
	drain, err := policyDrain(wk)
	if err != nil {
		return err
	}
	instance := rt.GetInstanceId()
	answer, err := s.fleet.Await(ctx, wk, policyOperation, rt.GetNodeId(),
		&nodev1.ApplyNetworkPolicy{InstanceId: instance, NetworkPolicy: ps.policy, Egresses: egresses, Resolvers: ps.resolvers,
			DrainSeconds: drain},
		ctrlv1.FailureStage_FAILURE_STAGE_APPLYING_NETWORK)
	if answer == nil || err != nil {
		return err
	}
	if answer.Failure != nil {
		return wk.Fail(ctx, answer.Failure, func(tx *store.Tx) error {
			if k := wk.Command().GetKind(); k == egress.KindApplyEgressUpdate || k == egress.KindApplyResolverUpdate {
				return nil // the node keeps the policy in force, and so does the status
			}
			return s.setPolicyStatus(tx, id, instance, nil, nil)
		})
	}
	result := &nodev1.ApplyNetworkPolicyResult{}
	if err := answer.Result.UnmarshalTo(result); err != nil {
		return err
	}
	return wk.Succeed(ctx, func(tx *store.Tx) error {
		// The Resolvers the node confirmed are those sent, which an
		// UpdateResolver may have moved on from since (a step after a
		// restart reads them again): its follow-up sends the new one.
		sent, err := sentApplication(tx, wk.Command().GetCommandId())
		if err != nil {
			return err
		}
		return s.setPolicyStatus(tx, id, instance, sent.GetEgresses(), &ctrlv1.NetworkPolicyStatus{
			AppliedRevision: result.GetAppliedRevision(), AppliedAt: timestamppb.New(s.now()), DrainingRevision: result.GetDrainingRevision(),
			Egresses: confirmedEgresses(result.GetEgresses()), Resolvers: resolverStatuses(sent.GetResolvers()),
		})
	})
}

// policyOperation is the name of a policy application's node operation.
const policyOperation = "network"

// sentApplication is the ApplyNetworkPolicy command commandID sent.
func sentApplication(tx *store.Tx, commandID string) (*nodev1.ApplyNetworkPolicy, error) {
	op, err := tx.GetNodeOperation(fleet.OperationID(commandID, policyOperation), false)
	if err != nil {
		return nil, err
	}
	sent := &nodev1.ApplyNetworkPolicy{}
	return sent, op.GetBody().UnmarshalTo(sent)
}

// madePolicy is the network policy revision the UpdateWorkspaceNetworkPolicy
// wk runs made (its admission's answer), or nil for an Egress's or a
// Resolver's follow-up, which applies the revision in force.
func madePolicy(wk *command.Work) (*ctrlv1.NetworkPolicy, error) {
	if wk.Command().GetKind() != kindPolicy {
		return nil, nil
	}
	res := &ctrlv1.UpdateWorkspaceNetworkPolicyResponse{}
	if err := wk.Command().GetResult().UnmarshalTo(res); err != nil {
		return nil, err
	}
	return res.GetWorkspace().GetSpec().GetNetworkPolicy(), nil
}

// policyState is what a policy application reads at the start of a step.
type policyState struct {
	w         *ctrlv1.Workspace
	policy    *ctrlv1.NetworkPolicy // the revision to apply
	rt        *storev1.WorkspaceRuntime
	egresses  []*nodev1.ResolvedEgress   // the policy's, at their current revisions
	resolvers []*nodev1.ResolvedResolver // likewise
	earlier   *store.CommandRow          // an application admitted before, unfinished
}

// policyState reads it for command commandID, which applies policy own
// (nil: the Workspace's, as it stands).
func (s *Service) policyState(ctx context.Context, id, commandID string, own *ctrlv1.NetworkPolicy) (policyState, error) {
	var ps policyState
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		if ps.w, err = get(tx, id, false); err != nil {
			return err
		}
		ps.policy = own
		if own == nil {
			ps.policy = ps.w.GetSpec().GetNetworkPolicy()
		}
		if ps.egresses, err = resolvedEgresses(tx, ps.policy); err != nil {
			return err
		}
		if ps.resolvers, err = resolvedResolvers(tx, ps.policy); err != nil {
			return err
		}
		if ps.earlier, err = earlierApplication(tx, id, commandID); err != nil {
			return err
		}
		if ps.rt, err = tx.GetRuntime(id, false); err != nil || own == nil {
			return err
		}
		ps.egresses, err = leaveToFollowUps(tx, id, ps.egresses, ps.rt.GetAppliedEgresses())
		return err
	})
	return ps, err
}

// leaveToFollowUps is what a policy update sends of egresses, its Egresses
// at their current revisions: an Egress whose UpdateEgress follow-up for
// Workspace id still waits (behind this update) goes as the node has it in
// force (applied), so that the follow-up moves its connections with the
// Egress update's own drain_seconds, not this update's. An Egress the node
// does not have yet goes as it is now.
func leaveToFollowUps(tx *store.Tx, id string, egresses, applied []*nodev1.ResolvedEgress) ([]*nodev1.ResolvedEgress, error) {
	out := slices.Clone(egresses)
	for i, e := range out {
		j := slices.IndexFunc(applied, func(a *nodev1.ResolvedEgress) bool { return a.GetEgressId() == e.GetEgressId() })
		if j < 0 || applied[j].GetRevision() >= e.GetRevision() {
			continue
		}
		c, err := tx.GetCommand(egress.FollowUpID(e.GetEgressId(), e.GetRevision(), id), false)
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			return nil, err
		}
		if st := c.GetState(); st != storev1.CommandState_COMMAND_STATE_SUCCEEDED && st != storev1.CommandState_COMMAND_STATE_FAILED {
			out[i] = applied[j]
		}
	}
	return out, nil
}

// policyDrain is the drain_seconds of the command wk runs: of the policy
// update, or of the Egress update.
func policyDrain(wk *command.Work) (uint32, error) {
	req, err := wk.Request()
	if err != nil {
		return 0, err
	}
	switch r := req.(type) {
	case *ctrlv1.UpdateWorkspaceNetworkPolicyRequest:
		return r.GetDrainSeconds(), nil
	case *ctrlv1.UpdateEgressRequest:
		return r.GetDrainSeconds(), nil
	}
	return 0, nil
}

// inForce: the node confirmed policy's revision of w and every Egress's and
// Resolver's current revision already, or a later policy revision (a later
// update's, or a start's): that is not undone.
func inForce(w *ctrlv1.Workspace, policy *ctrlv1.NetworkPolicy, egresses []*nodev1.ResolvedEgress, resolvers []*nodev1.ResolvedResolver) bool {
	st := w.GetNetworkPolicyStatus()
	switch {
	case st.GetAppliedRevision() < policy.GetRevision():
		return false
	case st.GetAppliedRevision() > policy.GetRevision():
		return true
	}
	applied := map[string]uint64{}
	for _, e := range st.GetEgresses() {
		applied[e.GetEgressId()] = e.GetAppliedRevision()
	}
	for _, e := range egresses {
		if applied[e.GetEgressId()] < e.GetRevision() {
			return false
		}
	}
	for _, r := range resolvers {
		i := slices.IndexFunc(st.GetResolvers(), func(s *ctrlv1.NetworkPolicyResolverStatus) bool {
			return s.GetResolverId() == r.GetResolverId() && proto.Equal(s.GetPath(), r.GetPath())
		})
		if i < 0 || st.GetResolvers()[i].GetAppliedRevision() < r.GetRevision() {
			return false
		}
	}
	return true
}

// earlierApplication is an unfinished policy application on the Workspace
// admitted before the command commandID, nil when there is none: the
// oldest unfinished command on it, when it applies a policy.
func earlierApplication(tx *store.Tx, workspaceID, commandID string) (*store.CommandRow, error) {
	c, err := tx.ActiveCommandOn(workspaceID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil || c.GetCommandId() == commandID {
		return nil, err
	}
	if k := c.GetKind(); k == kindPolicy || k == egress.KindApplyEgressUpdate || k == egress.KindApplyResolverUpdate {
		return c, nil
	}
	return nil, nil
}

// confirmedEgresses are the node's confirmation of the Egresses in force
// as the Workspace's status says them.
func confirmedEgresses(applied []*nodev1.AppliedEgress) []*ctrlv1.NetworkPolicyEgressStatus {
	var out []*ctrlv1.NetworkPolicyEgressStatus
	for _, e := range applied {
		out = append(out, &ctrlv1.NetworkPolicyEgressStatus{EgressId: e.GetEgressId(), AppliedRevision: e.GetAppliedRevision(), DrainingRevision: e.GetDrainingRevision()})
	}
	return out
}

// policyRetry is how soon a policy update waiting for a start looks again
// (a start's end kicks the runner sooner).
const policyRetry = time.Second

// setPolicyStatus records status for the Workspace's execution instance;
// a later execution's status is left alone.
func (s *Service) setPolicyStatus(tx *store.Tx, id, instance string, egresses []*nodev1.ResolvedEgress, status *ctrlv1.NetworkPolicyStatus) error {
	rt, err := tx.GetRuntime(id, true)
	if err != nil || rt.GetInstanceId() != instance {
		return err
	}
	if status != nil && !egressesEqual(rt.GetAppliedEgresses(), egresses) {
		// What the node confirmed is in force (a failed application
		// leaves what was, or nothing known); the row is written only
		// when that changed.
		rt.AppliedEgresses = egresses
		if err := tx.PutRuntime(rt); err != nil {
			return err
		}
	}
	return s.setWorkspace(tx, id, func(w *ctrlv1.Workspace) { w.NetworkPolicyStatus = status })
}

func egressesEqual(a, b []*nodev1.ResolvedEgress) bool {
	return slices.EqualFunc(a, b, func(x, y *nodev1.ResolvedEgress) bool { return proto.Equal(x, y) })
}
