package egress_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/anypb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/egress"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/ctrl/volume"
	"github.com/kibotos/kibotos/internal/ctrl/workspace"
	"github.com/kibotos/kibotos/internal/store"
)

// running makes the Workspace id AVAILABLE with an execution on node-a, its
// policy confirmed with each Egress and Resolver at revision 1 (and the
// Egresses as the runtime keeps them in force), as a finished create
// leaves it (the create command is ended: no runner of this test places).
func (e *env) running(t *testing.T, id, createCommand string) string {
	t.Helper()
	instance := id + ".run1"
	e.tx(t, func(tx *store.Tx) error {
		c, err := tx.GetCommand(createCommand, true)
		if err != nil {
			return err
		}
		c.State, c.LeaseUntil = storev1.CommandState_COMMAND_STATE_SUCCEEDED, time.Time{}
		if err := tx.UpdateCommand(c); err != nil {
			return err
		}
		w, err := tx.GetWorkspace(id, true)
		if err != nil {
			return err
		}
		w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE
		st := &ctrlv1.NetworkPolicyStatus{AppliedRevision: w.GetSpec().GetNetworkPolicy().GetRevision()}
		for _, eg := range w.GetSpec().GetNetworkPolicy().GetEgresses() {
			st.Egresses = append(st.Egresses, &ctrlv1.NetworkPolicyEgressStatus{EgressId: eg.GetEgressId(), AppliedRevision: 1})
		}
		for _, r := range w.GetSpec().GetNetworkPolicy().GetResolvers() {
			st.Resolvers = append(st.Resolvers, &ctrlv1.NetworkPolicyResolverStatus{ResolverId: r.GetResolverId(), Path: r.GetPath(), AppliedRevision: 1})
		}
		w.NetworkPolicyStatus = st
		if err := tx.PutWorkspace(w); err != nil {
			return err
		}
		rt, err := tx.GetRuntime(id, true)
		if err != nil {
			return err
		}
		rt.InstanceId, rt.NodeId = instance, "node-a"
		for _, eg := range w.GetSpec().GetNetworkPolicy().GetEgresses() {
			r, err := tx.GetEgress(eg.GetEgressId(), false)
			if err != nil {
				return err
			}
			rt.AppliedEgresses = append(rt.AppliedEgresses, &nodev1.ResolvedEgress{EgressId: eg.GetEgressId(), Revision: 1, Spec: r.Egress.GetSpec()})
		}
		return tx.PutRuntime(rt)
	})
	return instance
}

func (e *env) tx(t *testing.T, fn func(tx *store.Tx) error) {
	t.Helper()
	if err := e.store.Tx(ctx, fn); err != nil {
		t.Fatal(err)
	}
}

func (e *env) command(t *testing.T, id string) *store.CommandRow {
	t.Helper()
	var c *store.CommandRow
	e.tx(t, func(tx *store.Tx) error {
		var err error
		c, err = tx.GetCommand(id, false)
		return err
	})
	return c
}

// restartedCtrl is what a ctrl starting on e's database runs: a new
// runner (another replica's lease owner) with the Workspace domain's
// handlers, driving commands until the test ends.
func restartedCtrl(t *testing.T, st *store.Store) *command.Runner {
	t.Helper()
	runner := command.NewRunner(st, "restarted", slog.Default())
	f := fleet.New(st, runner, slog.Default(), fleet.DefaultConfig, fleet.Deps{})
	workspace.New(st, f, volume.New(st, f, runner, volume.DefaultProfile), runner)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); runner.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	return runner
}

// answerNode answers, as node-a would, the first ApplyNetworkPolicy
// operation it has pending once one is there: the policy applied, the old
// Egress revision drained. It returns what the node was sent.
func answerNode(t *testing.T, st *store.Store, runner *command.Runner) *nodev1.ApplyNetworkPolicy {
	t.Helper()
	return answerNodeWith(t, st, runner, nil)
}

// answerNodeWith answers as answerNode does, or, with a failure, fails the
// operation with its code and message.
func answerNodeWith(t *testing.T, st *store.Store, runner *command.Runner, failure *connect.Error) *nodev1.ApplyNetworkPolicy {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var sent *nodev1.ApplyNetworkPolicy
		var commandID string
		err := st.Tx(ctx, func(tx *store.Tx) error {
			ops, err := tx.PendingNodeOperations("node-a", 10)
			if err != nil || len(ops) == 0 {
				return err
			}
			op := ops[0]
			sent = &nodev1.ApplyNetworkPolicy{}
			if err := op.GetBody().UnmarshalTo(sent); err != nil {
				return err
			}
			res := &nodev1.ApplyNetworkPolicyResult{AppliedRevision: sent.GetNetworkPolicy().GetRevision()}
			for _, eg := range sent.GetEgresses() {
				res.Egresses = append(res.Egresses, &nodev1.AppliedEgress{EgressId: eg.GetEgressId(), AppliedRevision: eg.GetRevision(), DrainingRevision: eg.GetRevision() - 1})
			}
			body, err := anypb.New(res)
			if err != nil {
				return err
			}
			op.State, op.Result, commandID = storev1.NodeOperationState_NODE_OPERATION_STATE_SUCCEEDED, body, op.GetCommandId()
			if failure != nil {
				op.State, op.Result = storev1.NodeOperationState_NODE_OPERATION_STATE_FAILED, nil
				op.Code, op.Message = uint32(failure.Code()), failure.Message()
			}
			return tx.PutNodeOperation(op)
		})
		if err != nil {
			t.Fatal(err)
		}
		if sent != nil {
			if err := runner.Wake(ctx, commandID); err != nil {
				t.Fatal(err)
			}
			return sent
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not waiting for readiness
	}
	t.Fatal("node-a was sent no operation")
	return nil
}

// An UpdateEgress that changes the Egress admits, with itself, one
// follow-up for each Workspace whose policy names it and that runs (not
// for a stopped one, nor one naming another Egress). A ctrl started after
// the admission drives it: node-a is sent the same policy revision with
// the Egress's new revision and spec and the call's drain_seconds, and
// the status's applied_revision moves on the node's confirmation.
func TestAnEgressUpdateReachesRunningExecutions(t *testing.T) {
	e := sqlite(t)
	eg := e.createEgress(t, "eg", socks(false), nil)
	other := e.createEgress(t, "eg-other", socks(false), nil)
	run, err := e.createWorkspace("ws-run", policy(eg.GetEgressId(), "", false))
	if err != nil {
		t.Fatal(err)
	}
	instance := e.running(t, run.GetWorkspaceId(), "ws-run")
	stopped, err := e.createWorkspace("ws-stopped", policy(eg.GetEgressId(), "", false))
	if err != nil {
		t.Fatal(err)
	}
	e.tx(t, func(tx *store.Tx) error {
		w, err := tx.GetWorkspace(stopped.GetWorkspaceId(), true)
		if err != nil {
			return err
		}
		w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED
		return tx.PutWorkspace(w)
	})
	unrelated, err := e.createWorkspace("ws-other", policy(other.GetEgressId(), "", false))
	if err != nil {
		t.Fatal(err)
	}
	e.running(t, unrelated.GetWorkspaceId(), "ws-other")

	moved := socks(false)
	moved.Endpoint = "moved.example:1080"
	res, err := e.eg.UpdateEgress(ctx, &ctrlv1.UpdateEgressRequest{Command: cmd("move"), EgressId: eg.GetEgressId(), ExpectedRevision: 1, Spec: moved, DrainSeconds: 30})
	if err != nil || res.GetEgress().GetRevision() != 2 {
		t.Fatalf("UpdateEgress: %v %v", res, err)
	}
	followUp := egress.FollowUpID(eg.GetEgressId(), 2, run.GetWorkspaceId())
	if c := e.command(t, followUp); c.GetKind() != egress.KindApplyEgressUpdate || c.GetState() != storev1.CommandState_COMMAND_STATE_ADMITTED || c.GetTargetId() != run.GetWorkspaceId() {
		t.Fatalf("follow-up %s: %v", followUp, c.Command)
	}
	for _, w := range []string{stopped.GetWorkspaceId(), unrelated.GetWorkspaceId()} {
		e.tx(t, func(tx *store.Tx) error {
			if c, err := tx.GetCommand(egress.FollowUpID(eg.GetEgressId(), 2, w), false); err == nil {
				t.Errorf("a follow-up for %s: %v", w, c.Command)
			}
			return nil
		})
	}
	if st := e.workspace(t, run.GetWorkspaceId()).GetNetworkPolicyStatus(); st.GetEgresses()[0].GetAppliedRevision() != 1 {
		t.Errorf("applied_revision before any node confirmed: %v, want 1", st)
	}

	runner := restartedCtrl(t, e.store)
	sent := answerNode(t, e.store, runner)
	if sent.GetInstanceId() != instance || sent.GetNetworkPolicy().GetRevision() != 1 || sent.GetDrainSeconds() != 30 ||
		len(sent.GetEgresses()) != 1 || sent.GetEgresses()[0].GetRevision() != 2 || sent.GetEgresses()[0].GetSpec().GetEndpoint() != moved.GetEndpoint() {
		t.Errorf("node-a was sent %v; want policy revision 1 of %s with the Egress at revision 2 (its new endpoint) and drain_seconds 30", sent, instance)
	}
	waitFor(t, "the follow-up to succeed", func() bool {
		return e.command(t, followUp).GetState() == storev1.CommandState_COMMAND_STATE_SUCCEEDED
	})
	st := e.workspace(t, run.GetWorkspaceId()).GetNetworkPolicyStatus()
	if st.GetAppliedRevision() != 1 || len(st.GetEgresses()) != 1 || st.GetEgresses()[0].GetAppliedRevision() != 2 || st.GetEgresses()[0].GetDrainingRevision() != 1 {
		t.Errorf("network_policy_status %v, want revision 1 with the Egress applied at 2, draining 1", st)
	}
}

// An UpdateEgress admitted while a policy update of the same Workspace is
// queued drains for its own drain_seconds (egress.md U1: "connections on
// the old revision drain for the update's drain_seconds"): the policy
// update goes first with the Egress as the node has it, draining for its
// own 5 s, and the Egress's follow-up then applies the new revision with
// its 30 s. Before, the policy update carried the new revision with its 5 s
// and the follow-up, finding it in force, sent nothing.
func TestAnEgressUpdateQueuedBehindAPolicyUpdateDrainsForItsOwn(t *testing.T) {
	e := sqlite(t)
	eg := e.createEgress(t, "eg", socks(false), nil)
	w, err := e.createWorkspace("ws-run", policy(eg.GetEgressId(), "", false))
	if err != nil {
		t.Fatal(err)
	}
	e.running(t, w.GetWorkspaceId(), "ws-run")
	changed := policy(eg.GetEgressId(), "", false)
	changed.Deny = []string{"203.0.113.0/24"}
	if _, err := e.ws.UpdateNetworkPolicy(ctx, &ctrlv1.UpdateWorkspaceNetworkPolicyRequest{Command: cmd("policy"), WorkspaceId: w.GetWorkspaceId(),
		ExpectedRevision: 1, NetworkPolicy: changed, DrainSeconds: 5}); err != nil {
		t.Fatal(err)
	}
	moved := socks(false)
	moved.Endpoint = "moved.example:1080"
	if _, err := e.eg.UpdateEgress(ctx, &ctrlv1.UpdateEgressRequest{Command: cmd("move"), EgressId: eg.GetEgressId(), ExpectedRevision: 1, Spec: moved, DrainSeconds: 30}); err != nil {
		t.Fatal(err)
	}

	runner := restartedCtrl(t, e.store)
	first := answerNode(t, e.store, runner)
	if first.GetNetworkPolicy().GetRevision() != 2 || first.GetDrainSeconds() != 5 || len(first.GetEgresses()) != 1 ||
		first.GetEgresses()[0].GetRevision() != 1 || first.GetEgresses()[0].GetSpec().GetEndpoint() != eg.GetSpec().GetEndpoint() {
		t.Errorf("the policy update sent %v; want policy revision 2, the Egress at revision 1 (as in force), drain_seconds 5", first)
	}
	second := answerNode(t, e.store, runner)
	if second.GetNetworkPolicy().GetRevision() != 2 || second.GetDrainSeconds() != 30 || len(second.GetEgresses()) != 1 ||
		second.GetEgresses()[0].GetRevision() != 2 || second.GetEgresses()[0].GetSpec().GetEndpoint() != moved.GetEndpoint() {
		t.Errorf("the Egress's follow-up sent %v; want policy revision 2, the Egress at revision 2 (its new endpoint), drain_seconds 30", second)
	}
	followUp := egress.FollowUpID(eg.GetEgressId(), 2, w.GetWorkspaceId())
	waitFor(t, "the follow-up to succeed", func() bool {
		return e.command(t, followUp).GetState() == storev1.CommandState_COMMAND_STATE_SUCCEEDED
	})
	if st := e.workspace(t, w.GetWorkspaceId()).GetNetworkPolicyStatus(); st.GetAppliedRevision() != 2 || st.GetEgresses()[0].GetAppliedRevision() != 2 {
		t.Errorf("network_policy_status %v, want revision 2 with the Egress applied at 2", st)
	}
}

func (e *env) workspace(t *testing.T, id string) *ctrlv1.Workspace {
	t.Helper()
	res, err := e.ws.Get(ctx, &ctrlv1.GetWorkspaceRequest{WorkspaceId: id})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetWorkspace()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not waiting for readiness
	}
}

// A node that cannot apply the Egress's new revision fails the follow-up
// at FAILURE_STAGE_APPLYING_NETWORK and leaves the status as it was: the
// node keeps the policy in force, so applied_revision stays the old one.
func TestAFailedEgressApplicationKeepsTheStatus(t *testing.T) {
	e := sqlite(t)
	eg := e.createEgress(t, "eg", socks(false), nil)
	w, err := e.createWorkspace("ws-run", policy(eg.GetEgressId(), "", false))
	if err != nil {
		t.Fatal(err)
	}
	e.running(t, w.GetWorkspaceId(), "ws-run")
	moved := socks(false)
	moved.Endpoint = "moved.example:1080"
	if _, err := e.eg.UpdateEgress(ctx, &ctrlv1.UpdateEgressRequest{Command: cmd("move"), EgressId: eg.GetEgressId(), ExpectedRevision: 1, Spec: moved}); err != nil {
		t.Fatal(err)
	}
	runner := restartedCtrl(t, e.store)
	answerNodeWith(t, e.store, runner, connect.NewError(connect.CodeUnimplemented, errors.New("apply the network policy: unenforceable")))
	followUp := egress.FollowUpID(eg.GetEgressId(), 2, w.GetWorkspaceId())
	waitFor(t, "the follow-up to fail", func() bool {
		return e.command(t, followUp).GetState() == storev1.CommandState_COMMAND_STATE_FAILED
	})
	if f := e.command(t, followUp).GetFailure(); f.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_APPLYING_NETWORK {
		t.Errorf("failure %v, want FAILURE_STAGE_APPLYING_NETWORK", f)
	}
	if st := e.workspace(t, w.GetWorkspaceId()).GetNetworkPolicyStatus(); st.GetAppliedRevision() != 1 || len(st.GetEgresses()) != 1 || st.GetEgresses()[0].GetAppliedRevision() != 1 {
		t.Errorf("network_policy_status after the failure: %v, want it as it was (the Egress at 1)", st)
	}
}

// runningWithResolver is Resolver "rs" (TCP, 9.9.9.9:53) and Workspace
// "ws-run" whose policy names it, running on node-a (running) as the
// instance it returns.
func (e *env) runningWithResolver(t *testing.T) (r *ctrlv1.Resolver, w *ctrlv1.Workspace, instance string) {
	t.Helper()
	spec := &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, Address: "9.9.9.9:53"}
	r = e.createResolver(t, "rs", spec, nil)
	w, err := e.createWorkspace("ws-run", policy("", r.GetResolverId(), true))
	if err != nil {
		t.Fatal(err)
	}
	return r, w, e.running(t, w.GetWorkspaceId(), "ws-run")
}

// An UpdateResolver that changes the Resolver reaches the running
// executions whose policy names it as an UpdateEgress does: a follow-up
// for the running Workspace only, which a ctrl started after the admission
// drives; node-a is sent the same policy revision with the Resolver's new
// revision and spec, and NetworkPolicyResolverStatus.applied_revision
// moves on the node's confirmation.
func TestAResolverUpdateReachesRunningExecutions(t *testing.T) {
	e := sqlite(t)
	r, run, instance := e.runningWithResolver(t)
	stopped, err := e.createWorkspace("ws-stopped", policy("", r.GetResolverId(), true))
	if err != nil {
		t.Fatal(err)
	}
	e.tx(t, func(tx *store.Tx) error {
		w, err := tx.GetWorkspace(stopped.GetWorkspaceId(), true)
		if err != nil {
			return err
		}
		w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED
		return tx.PutWorkspace(w)
	})

	moved := &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, Address: "9.9.9.10:53"}
	res, err := e.eg.UpdateResolver(ctx, &ctrlv1.UpdateResolverRequest{Command: cmd("move"), ResolverId: r.GetResolverId(), ExpectedRevision: 1, Spec: moved})
	if err != nil || res.GetResolver().GetRevision() != 2 {
		t.Fatalf("UpdateResolver: %v %v", res, err)
	}
	followUp := egress.ResolverFollowUpID(r.GetResolverId(), 2, run.GetWorkspaceId())
	if c := e.command(t, followUp); c.GetKind() != egress.KindApplyResolverUpdate || c.GetTargetId() != run.GetWorkspaceId() {
		t.Fatalf("follow-up %s: %v", followUp, c.Command)
	}
	e.tx(t, func(tx *store.Tx) error {
		if c, err := tx.GetCommand(egress.ResolverFollowUpID(r.GetResolverId(), 2, stopped.GetWorkspaceId()), false); err == nil {
			t.Errorf("a follow-up for the stopped Workspace: %v", c.Command)
		}
		return nil
	})
	if st := e.workspace(t, run.GetWorkspaceId()).GetNetworkPolicyStatus(); st.GetResolvers()[0].GetAppliedRevision() != 1 {
		t.Errorf("applied_revision before any node confirmed: %v, want 1", st)
	}

	runner := restartedCtrl(t, e.store)
	sent := answerNode(t, e.store, runner)
	if sent.GetInstanceId() != instance || sent.GetNetworkPolicy().GetRevision() != 1 || len(sent.GetResolvers()) != 1 ||
		sent.GetResolvers()[0].GetRevision() != 2 || sent.GetResolvers()[0].GetSpec().GetAddress() != moved.GetAddress() {
		t.Errorf("node-a was sent %v; want policy revision 1 of %s with the Resolver at revision 2 (its new address)", sent, instance)
	}
	waitFor(t, "the follow-up to succeed", func() bool {
		return e.command(t, followUp).GetState() == storev1.CommandState_COMMAND_STATE_SUCCEEDED
	})
	st := e.workspace(t, run.GetWorkspaceId()).GetNetworkPolicyStatus()
	if st.GetAppliedRevision() != 1 || len(st.GetResolvers()) != 1 || st.GetResolvers()[0].GetAppliedRevision() != 2 {
		t.Errorf("network_policy_status %v, want revision 1 with the Resolver applied at 2", st)
	}
}
