package storetest

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/store"
)

// RunEgresses runs the store tests of Egresses, Resolvers and the policy
// references to them against databases from b.
func RunEgresses(t *testing.T, b Backend) {
	for name, fn := range map[string]func(*testing.T, string){
		"EgressesKeepPasswordAndDrain":    testEgressesKeepPasswordAndDrain,
		"ResolversPageAndHideDeleted":     testResolversPageAndHideDeleted,
		"PolicyReferencesFollowWorkspace": testPolicyReferencesFollowWorkspace,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.DSN(t))
		})
	}
}

func testEgressesKeepPasswordAndDrain(t *testing.T, dsn string) {
	s := Open(t, dsn)
	e := &ctrlv1.Egress{EgressId: "egr-a", Revision: 2, Labels: map[string]string{"k": "v"}, Spec: &ctrlv1.EgressSpec{
		Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: "proxy.example:1080", Username: "u", Password: "secret",
	}}
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.PutEgress(&store.EgressRecord{Egress: e, DrainSeconds: 30}); err != nil {
			return err
		}
		return tx.PutEgress(&store.EgressRecord{Egress: &ctrlv1.Egress{EgressId: "egr-b", Deleted: true}})
	})
	mustTx(t, s, func(tx *store.Tx) error {
		got, err := tx.GetEgress("egr-a", true)
		if err != nil || !proto.Equal(got.Egress, e) || got.DrainSeconds != 30 {
			t.Errorf("GetEgress = %v, %v; want %v with drain 30", got, err, e)
		}
		if _, err := tx.GetEgress("egr-c", false); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("unknown egress: %v", err)
		}
		list, err := tx.ListEgresses("", 10)
		if err != nil || len(list) != 1 || list[0].GetEgressId() != "egr-a" {
			t.Errorf("ListEgresses = %v, %v; want egr-a only (egr-b is deleted)", list, err)
		}
		return nil
	})
}

func testResolversPageAndHideDeleted(t *testing.T, dsn string) {
	s := Open(t, dsn)
	mustTx(t, s, func(tx *store.Tx) error {
		for _, id := range []string{"rsv-c", "rsv-a", "rsv-b", "rsv-d"} {
			r := &ctrlv1.Resolver{ResolverId: id, Deleted: id == "rsv-d", Spec: &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, Address: "192.0.2.1:53"}}
			if err := tx.PutResolver(r); err != nil {
				return err
			}
		}
		return nil
	})
	mustTx(t, s, func(tx *store.Tx) error {
		first, err := tx.ListResolvers("", 2)
		if err != nil || len(first) != 2 || first[0].GetResolverId() != "rsv-a" || first[1].GetResolverId() != "rsv-b" {
			t.Errorf("first page = %v, %v", first, err)
		}
		rest, err := tx.ListResolvers("rsv-b", 10)
		if err != nil || len(rest) != 1 || rest[0].GetResolverId() != "rsv-c" {
			t.Errorf("after rsv-b = %v, %v; want rsv-c only", rest, err)
		}
		got, err := tx.GetResolver("rsv-d", false)
		if err != nil || !got.GetDeleted() {
			t.Errorf("a deleted Resolver is still read: %v, %v", got, err)
		}
		return nil
	})
}

func policyWorkspace(id string, state ctrlv1.WorkspaceState, p *ctrlv1.NetworkPolicy) *ctrlv1.Workspace {
	return &ctrlv1.Workspace{WorkspaceId: id, State: state, Spec: &ctrlv1.WorkspaceSpec{NetworkPolicy: p}}
}

func testPolicyReferencesFollowWorkspace(t *testing.T, dsn string) {
	s := Open(t, dsn)
	uses := &ctrlv1.NetworkPolicy{
		Egresses: []*ctrlv1.NetworkPolicyEgress{{EgressId: "egr-a"}},
		Resolvers: []*ctrlv1.NetworkPolicyResolver{{ResolverId: "rsv-a", Path: &ctrlv1.ResolverPath{
			Kind: &ctrlv1.ResolverPath_EgressId{EgressId: "egr-a"},
		}}},
	}
	available := ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE
	mustTx(t, s, func(tx *store.Tx) error {
		for _, id := range []string{"ws-b", "ws-a"} {
			if err := tx.PutWorkspace(policyWorkspace(id, available, uses)); err != nil {
				return err
			}
		}
		return tx.PutWorkspace(policyWorkspace("ws-c", available, nil))
	})
	referrers := func(kind, id string) []string {
		var got []string
		mustTx(t, s, func(tx *store.Tx) error {
			var err error
			got, err = tx.PolicyReferrers(kind, id, 10)
			return err
		})
		return got
	}
	for _, c := range []struct{ kind, id string }{{store.RefEgress, "egr-a"}, {store.RefResolver, "rsv-a"}} {
		if got := referrers(c.kind, c.id); !slices.Equal(got, []string{"ws-a", "ws-b"}) {
			t.Errorf("%s %s referrers = %v, want [ws-a ws-b]", c.kind, c.id, got)
		}
	}
	// A Workspace read locked and written back in one transaction keeps
	// its rows when its policy names the same, and has them rewritten
	// when it names others, however many times it is written.
	rewrite := func(id string, change func(w *ctrlv1.Workspace)) {
		mustTx(t, s, func(tx *store.Tx) error {
			w, err := tx.GetWorkspace(id, true)
			if err != nil {
				return err
			}
			for range 2 {
				change(w)
				if err := tx.PutWorkspace(w); err != nil {
					return err
				}
			}
			return nil
		})
	}
	rewrite("ws-a", func(w *ctrlv1.Workspace) { w.State = ctrlv1.WorkspaceState_WORKSPACE_STATE_STOPPED })
	rewrite("ws-c", func(w *ctrlv1.Workspace) { w.Spec.NetworkPolicy = uses })
	if got := referrers(store.RefEgress, "egr-a"); !slices.Equal(got, []string{"ws-a", "ws-b", "ws-c"}) {
		t.Errorf("egr-a referrers after writes in place = %v, want [ws-a ws-b ws-c]", got)
	}
	rewrite("ws-c", func(w *ctrlv1.Workspace) { w.Spec.NetworkPolicy = nil })
	if got := referrers(store.RefResolver, "rsv-a"); !slices.Equal(got, []string{"ws-a", "ws-b"}) {
		t.Errorf("rsv-a referrers after ws-c stopped naming it = %v, want [ws-a ws-b]", got)
	}
	// A policy that stops naming them, and a deleted Workspace, drop out.
	mustTx(t, s, func(tx *store.Tx) error {
		if err := tx.PutWorkspace(policyWorkspace("ws-a", available, &ctrlv1.NetworkPolicy{})); err != nil {
			return err
		}
		return tx.PutWorkspace(policyWorkspace("ws-b", ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED, uses))
	})
	if got := referrers(store.RefEgress, "egr-a"); len(got) != 0 {
		t.Errorf("egr-a referrers after the change = %v, want none", got)
	}
	if got := referrers(store.RefResolver, "egr-a"); len(got) != 0 {
		t.Errorf("kinds are apart: resolver egr-a referrers = %v", got)
	}
}
