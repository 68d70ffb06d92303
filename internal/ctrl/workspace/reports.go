package workspace

import (
	"context"
	"errors"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// ExecutionEnded records an execution a node saw end without a stop: the
// guest powered off, the host's OOM killer ended its VMM, or the VMM ended
// otherwise (crashed, killed by someone). ctrl releases it as a forced
// stop, so the Workspace can start again. The reference has no cause for a
// VMM that crashed: such a stop records none (UNSPECIFIED) rather than
// blame the guest.
func (s *Service) ExecutionEnded(ctx context.Context, nodeID string, r *nodev1.ExecutionReport) {
	var cause ctrlv1.StopCause
	switch r.GetEnd() {
	case nodev1.ExecutionEnd_EXECUTION_END_STOPPED:
		return // a StopExecution's own answer records it
	case nodev1.ExecutionEnd_EXECUTION_END_GUEST_SHUTDOWN:
		cause = ctrlv1.StopCause_STOP_CAUSE_GUEST_SHUTDOWN
	case nodev1.ExecutionEnd_EXECUTION_END_HOST_MEMORY_EXHAUSTED:
		cause = ctrlv1.StopCause_STOP_CAUSE_HOST_MEMORY_EXHAUSTED
	}
	now := timestamppb.New(s.now())
	_ = s.store.Tx(ctx, func(tx *store.Tx) error {
		rt, err := tx.GetRuntime(WorkspaceOf(r.GetInstanceId()), false)
		if err != nil || rt.GetInstanceId() != r.GetInstanceId() || rt.GetNodeId() != nodeID {
			return err
		}
		return s.stopped(tx, rt.GetWorkspaceId(), r.GetInstanceId(), &ctrlv1.WorkspaceStop{
			Cause: cause, Force: true, Durability: ctrlv1.StopDurability_STOP_DURABILITY_UNCONFIRMED, RequestedAt: now, CompletedAt: now,
		})
	})
}

// ExecutionObserved records the node's latest probe of a running guest, and
// its judgment of the Volume the execution has attached, in tx (the node's
// observation's). It is an observation: it never changes the Workspace's
// or the Volume's state. An execution that is not current on the node is a
// stray, which the node is told to stop (stopStray); it reports whether it
// recorded that. An execution of no Workspace ctrl knows is left alone.
func (s *Service) ExecutionObserved(tx *store.Tx, nodeID string, r *nodev1.ExecutionReport) (applied, notify bool, err error) {
	id := WorkspaceOf(r.GetInstanceId())
	rt, err := tx.GetRuntime(id, false)
	if errors.Is(err, store.ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	if rt.GetInstanceId() != r.GetInstanceId() || rt.GetNodeId() != nodeID {
		notify, err := s.stopStray(tx, nodeID, r.GetInstanceId())
		return false, notify, err
	}
	w, err := tx.GetWorkspace(id, true)
	if errors.Is(err, store.ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	if err := s.volumeObserved(tx, w.GetSpec(), r); err != nil {
		return false, false, err
	}
	return true, false, tx.PutWorkspace(s.observed(w, r))
}

// volumeObserved records the Volume's observation r carries, when the
// node holds the Volume bound by spec.
func (s *Service) volumeObserved(tx *store.Tx, spec *ctrlv1.WorkspaceSpec, r *nodev1.ExecutionReport) error {
	b := spec.GetVolume()
	if r.GetVolume() == nil || b.GetMode() != ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND || b.GetVolumeId() != r.GetVolume().GetRef().GetObjectId() {
		return nil
	}
	return s.volumes.Observed(tx, b.GetVolumeId(), r.GetVolume())
}

// observed is w with what report r of its running execution observes:
// its network's drains, its Egresses' and Resolvers' faults, its guest.
func (s *Service) observed(w *ctrlv1.Workspace, r *nodev1.ExecutionReport) *ctrlv1.Workspace {
	if st := w.GetNetworkPolicyStatus(); st != nil {
		// Connections a policy change refused close as their drain ends.
		st.DrainingRevision = r.GetNetworkDrainingRevision()
		observeEgressDraining(st, r.GetEgressDraining())
	}
	w.EgressObservations = egressObservations(w.GetEgressObservations(), r.GetEgressFaults(), s.now())
	w.ResolverObservations = resolverObservations(w.GetResolverObservations(), r.GetResolverFaults(), s.now())
	return withGuestObservation(w, r, s.now())
}

// observeEgressDraining sets each Egress's draining_revision from the
// node's report: the connections an UpdateEgress moved off close as its
// drain ends. applied_revision is left as the node confirmed it.
func observeEgressDraining(st *ctrlv1.NetworkPolicyStatus, draining []*nodev1.EgressDraining) {
	by := map[string]uint64{}
	for _, d := range draining {
		by[d.GetEgressId()] = d.GetRevision()
	}
	for _, e := range st.GetEgresses() {
		e.DrainingRevision = by[e.GetEgressId()]
	}
}

// withGuestObservation is w with the guest observation r makes at now. A
// guest coming back from a reset has none until it answers again; then
// restart_count and last_reset_at count its resets, and it is rebooted:
// it answers from another boot than the one that started the execution.
func withGuestObservation(w *ctrlv1.Workspace, r *nodev1.ExecutionReport, now time.Time) *ctrlv1.Workspace {
	if r.GetComingBack() {
		w.GuestObservation = nil
		return w
	}
	prev := w.GetGuestObservation()
	obs := &ctrlv1.GuestObservation{ObservedAt: timestamppb.New(now), Condition: ctrlv1.GuestCondition_GUEST_CONDITION_RESPONDING}
	if !r.GetResponding() {
		obs.Condition = ctrlv1.GuestCondition_GUEST_CONDITION_UNRESPONSIVE
		obs.Error = r.GetProbeError()
		// The node's first failed probe, on its clock; a node that says
		// nothing of it leaves ctrl's first report of the silence.
		switch {
		case r.GetUnresponsiveSince() != nil:
			obs.UnresponsiveSince = r.GetUnresponsiveSince()
		case prev.GetCondition() == ctrlv1.GuestCondition_GUEST_CONDITION_UNRESPONSIVE:
			obs.UnresponsiveSince = prev.GetUnresponsiveSince()
		default:
			obs.UnresponsiveSince = obs.GetObservedAt()
		}
	}
	observeMemory(obs, prev, r.GetMemory())
	if n := r.GetRestartCount(); n > 0 {
		obs.RestartCount, obs.LastResetAt = n, r.GetLastResetAt()
	}
	// "the guest answered with a boot other than the one that started this
	// execution": a counted reset, or another boot_id the provider did not
	// count a reset for.
	obs.Rebooted = r.GetRestartCount() > 0 || r.GetOtherBoot()
	w.GuestObservation = obs
	return w
}

// stopStray has nodeID stop an execution it runs that is not its
// Workspace's current Instance there: one ctrl let go of (an isolation
// failed it, a start failed around it, the Workspace was deleted or has
// run elsewhere since) while its VM lived on, such as a node that comes
// back with a new incarnation and re-attaches the VMs its old one left.
// Left running, it would keep writing block files that now belong to
// another execution. A start still booting is not a stray: its Allocation
// is charged to the node before the node boots it, and the runtime names
// it only once the boot is answered. It reports whether an operation was
// recorded.
func (s *Service) stopStray(tx *store.Tx, nodeID, instance string) (bool, error) {
	a, err := tx.GetAllocation(WorkspaceOf(instance))
	switch {
	case err == nil && a.InstanceID == instance && a.NodeID == nodeID:
		return false, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return false, err
	}
	return s.fleet.StopStray(tx, nodeID, instance)
}

// observeMemory fills the memory fields of obs from the guest's report.
// The condition is known only while the guest responds; the kills stand
// while it does not.
func observeMemory(obs, prev *ctrlv1.GuestObservation, m *guestv1.MemoryReport) {
	if m == nil {
		obs.MemoryKillCount, obs.LatestMemoryKill = prev.GetMemoryKillCount(), prev.GetLatestMemoryKill()
		return
	}
	obs.MemoryKillCount = m.GetKillCount()
	if k := m.GetLatestKill(); k != nil {
		obs.LatestMemoryKill = &ctrlv1.GuestMemoryKill{
			KilledAt: k.GetKilledAt(), Pid: k.GetPid(), Command: k.GetCommand(), RssBytes: k.GetRssBytes(),
			FullStallPermille: k.GetFullStallPermille(), Window: k.GetWindow(), SaturatedFor: k.GetSaturatedFor(),
		}
	}
	if obs.GetCondition() != ctrlv1.GuestCondition_GUEST_CONDITION_RESPONDING {
		return
	}
	switch m.GetCondition() {
	case guestv1.MemoryCondition_MEMORY_CONDITION_NORMAL:
		obs.MemoryCondition = ctrlv1.GuestMemoryCondition_GUEST_MEMORY_CONDITION_NORMAL
	case guestv1.MemoryCondition_MEMORY_CONDITION_SATURATED:
		obs.MemoryCondition = ctrlv1.GuestMemoryCondition_GUEST_MEMORY_CONDITION_SATURATED
		obs.MemorySaturatedSince = m.GetSaturatedSince()
	}
}

// ExecutionProgress records how far the template and platform artifacts
// of a starting execution have arrived on its node, as the Workspace's
// delivery observation. It never changes the Workspace's state.
func (s *Service) ExecutionProgress(ctx context.Context, nodeID string, p *nodev1.ExecutionProgress) {
	_ = s.store.Tx(ctx, func(tx *store.Tx) error {
		w, err := tx.GetWorkspace(WorkspaceOf(p.GetInstanceId()), true)
		if err != nil {
			return err
		}
		if st := w.GetState(); st != ctrlv1.WorkspaceState_WORKSPACE_STATE_CREATING && st != ctrlv1.WorkspaceState_WORKSPACE_STATE_STARTING {
			return nil // a late report of a start that ended
		}
		now := timestamppb.New(s.now())
		started := now
		prev := w.GetDelivery()
		if prev != nil {
			started = prev.GetStartedAt()
		}
		if prev != nil && prev.GetDeliveredBytes() == p.GetDeliveredBytes() && prev.GetTotalBytes() == p.GetTotalBytes() {
			return nil // nothing moved: observed_at stays when the bytes last did
		}
		w.Delivery = &ctrlv1.TemplateDeliveryObservation{
			State:          ctrlv1.TemplateDeliveryState_TEMPLATE_DELIVERY_STATE_NOT_READY,
			Reason:         ctrlv1.TemplateDeliveryReason_TEMPLATE_DELIVERY_REASON_DISTRIBUTING,
			DeliveredBytes: p.GetDeliveredBytes(), TotalBytes: p.GetTotalBytes(),
			StartedAt: started, ObservedAt: now,
		}
		return tx.PutWorkspace(w)
	})
}

// Execution is where a Workspace's current execution runs, for the data
// plane: its node and instance. ok is false when none runs.
func (s *Service) Execution(ctx context.Context, workspaceID string) (w *ctrlv1.Workspace, nodeID, instance string, err error) {
	err = s.store.Snapshot(ctx, func(tx *store.Tx) error {
		if w, err = get(tx, workspaceID, false); err != nil {
			return err
		}
		rt, err := tx.GetRuntime(workspaceID, false)
		nodeID, instance = rt.GetNodeId(), rt.GetInstanceId()
		return err
	})
	return w, nodeID, instance, err
}

// egressObservations are the node's current Egress faults as the
// Workspace reports them: an observation stays as it was (observed_at
// included) while its run of failures goes on, a new run is observed now,
// and an Egress the node no longer reports failing has none.
func egressObservations(prev []*ctrlv1.EgressObservation, faults []*nodev1.EgressFault, now time.Time) []*ctrlv1.EgressObservation {
	var out []*ctrlv1.EgressObservation
	for _, f := range faults {
		i := slices.IndexFunc(prev, func(o *ctrlv1.EgressObservation) bool {
			return o.GetEgressId() == f.GetEgressId() && o.GetKind() == f.GetKind() && o.GetFailingSince().AsTime().Equal(f.GetFailingSince().AsTime())
		})
		if i >= 0 {
			out = append(out, prev[i])
			continue
		}
		out = append(out, &ctrlv1.EgressObservation{EgressId: f.GetEgressId(), Kind: f.GetKind(), FailingSince: f.GetFailingSince(),
			ObservedAt: timestamppb.New(now), Message: f.GetMessage()})
	}
	return out
}
