package egress_test

import (
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/egress"
	"github.com/kibotos/kibotos/internal/store"
)

// "A connection whose path the change moves keeps its old path for the
// drain_seconds of that UpdateWorkspaceNetworkPolicy call": two updates
// admitted before the first reached the node each reach it, in order, as
// the revision it made with its own call's drain_seconds; neither is
// folded into the other.
func TestQueuedPolicyUpdatesEachKeepTheirDrain(t *testing.T) {
	e := sqlite(t)
	public := ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET
	w, err := e.createWorkspace("ws", &ctrlv1.NetworkPolicy{Mode: public})
	if err != nil {
		t.Fatal(err)
	}
	id := w.GetWorkspaceId()
	e.running(t, id, "ws")
	for _, u := range []struct {
		command  string
		revision uint64
		deny     []string
		drain    uint32
	}{{"a", 1, []string{"192.0.2.1"}, 0}, {"b", 2, []string{"192.0.2.1", "192.0.2.2"}, 600}} {
		if _, err := e.ws.UpdateNetworkPolicy(ctx, &ctrlv1.UpdateWorkspaceNetworkPolicyRequest{Command: cmd(u.command), WorkspaceId: id,
			ExpectedRevision: u.revision, NetworkPolicy: &ctrlv1.NetworkPolicy{Mode: public, Deny: u.deny}, DrainSeconds: u.drain}); err != nil {
			t.Fatal(err)
		}
	}
	runner := restartedCtrl(t, e.store)
	first := answerNode(t, e.store, runner)
	second := answerNode(t, e.store, runner)
	if first.GetNetworkPolicy().GetRevision() != 2 || len(first.GetNetworkPolicy().GetDeny()) != 1 || first.GetDrainSeconds() != 0 {
		t.Errorf("first sent: revision %d %v, drain %d; want call a's revision 2, drain 0", first.GetNetworkPolicy().GetRevision(), first.GetNetworkPolicy().GetDeny(), first.GetDrainSeconds())
	}
	if second.GetNetworkPolicy().GetRevision() != 3 || second.GetDrainSeconds() != 600 {
		t.Errorf("then sent: revision %d, drain %d; want call b's revision 3, drain 600", second.GetNetworkPolicy().GetRevision(), second.GetDrainSeconds())
	}
	waitFor(t, "both updates to succeed", func() bool {
		return e.command(t, "a").GetState() == storev1.CommandState_COMMAND_STATE_SUCCEEDED && e.command(t, "b").GetState() == storev1.CommandState_COMMAND_STATE_SUCCEEDED
	})
	if st := e.workspace(t, id).GetNetworkPolicyStatus(); st.GetAppliedRevision() != 3 {
		t.Errorf("status after both: %v, want revision 3 applied", st)
	}
}

// NetworkPolicyResolverStatus.applied_revision "moves on each node's
// confirmation": a Resolver updated while a policy application is at the
// node is not confirmed by that application's answer, which carried the
// revision before; the status says that one, and the update's follow-up
// still takes the new revision to the node.
func TestAResolverUpdatedWhileAnApplicationIsAtTheNodeStillReachesIt(t *testing.T) {
	e := sqlite(t)
	r, run, _ := e.runningWithResolver(t)
	id := run.GetWorkspaceId()
	runner := restartedCtrl(t, e.store)
	p := policy("", r.GetResolverId(), true)
	p.Deny = []string{"192.0.2.1"}
	if _, err := e.ws.UpdateNetworkPolicy(ctx, &ctrlv1.UpdateWorkspaceNetworkPolicyRequest{Command: cmd("pol"), WorkspaceId: id, ExpectedRevision: 1, NetworkPolicy: p}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the application pending at node-a", func() bool {
		n := 0
		e.tx(t, func(tx *store.Tx) error {
			ops, err := tx.PendingNodeOperations("node-a", 10)
			n = len(ops)
			return err
		})
		return n > 0
	})
	moved := &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP, Address: "9.9.9.10:53"}
	if _, err := e.eg.UpdateResolver(ctx, &ctrlv1.UpdateResolverRequest{Command: cmd("move"), ResolverId: r.GetResolverId(), ExpectedRevision: 1, Spec: moved}); err != nil {
		t.Fatal(err)
	}
	if sent := answerNode(t, e.store, runner); sent.GetResolvers()[0].GetRevision() != 1 {
		t.Fatalf("the application at the node carried Resolver revision %d, want 1", sent.GetResolvers()[0].GetRevision())
	}
	waitFor(t, "the application to succeed", func() bool {
		return e.command(t, "pol").GetState() == storev1.CommandState_COMMAND_STATE_SUCCEEDED
	})
	if st := e.workspace(t, id).GetNetworkPolicyStatus(); st.GetResolvers()[0].GetAppliedRevision() != 1 {
		t.Errorf("status after the node confirmed Resolver revision 1: %v", st.GetResolvers())
	}
	if sent := answerNode(t, e.store, runner); sent.GetResolvers()[0].GetRevision() != 2 || sent.GetResolvers()[0].GetSpec().GetAddress() != moved.GetAddress() {
		t.Errorf("the follow-up sent %v, want Resolver revision 2", sent.GetResolvers())
	}
	followUp := egress.ResolverFollowUpID(r.GetResolverId(), 2, id)
	waitFor(t, "the follow-up to succeed", func() bool {
		return e.command(t, followUp).GetState() == storev1.CommandState_COMMAND_STATE_SUCCEEDED
	})
	if st := e.workspace(t, id).GetNetworkPolicyStatus(); st.GetResolvers()[0].GetAppliedRevision() != 2 {
		t.Errorf("status after the follow-up: %v, want Resolver revision 2", st.GetResolvers())
	}
}
