package fleet

import (
	"context"
	"log/slog"
	"testing"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// A placement checks the node's constraints again in the conditional
// update that charges it, not only on the row it read: on PostgreSQL a
// pinned placement (StartWorkspaceOnNode) may read the node before a
// DrainNode or a RevokeNode commits, and must not land on it then. The
// stale read is the row as it was before the change, in the same
// transaction; the charge refuses. A node that did not change is charged.
func TestAChargeChecksTheNodeInItsUpdate(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			st := storetest.Open(t, b.DSN(t))
			f := New(st, nil, slog.New(slog.DiscardHandler), Config{}, Deps{})
			for _, id := range []string{"node-kept", "node-drained", "node-revoked"} {
				storetest.PutLiveNode(t, st, id, "pool-a")
			}
			for id, change := range map[string]func(tx *store.Tx) error{
				"node-kept":    func(*store.Tx) error { return nil },
				"node-drained": func(tx *store.Tx) error { return tx.SetNodeDraining("node-drained", true) },
				"node-revoked": func(tx *store.Tx) error {
					n, err := tx.GetNode("node-revoked", true)
					if err != nil {
						return err
					}
					n.Admission = operatorv1.NodeAdmission_NODE_ADMISSION_REVOKED
					return tx.PutNode(n)
				},
			} {
				mustTx(t, st, func(tx *store.Tx) error {
					read, err := tx.GetNodePlacement(id)
					if err != nil {
						return err
					}
					if err := change(tx); err != nil {
						return err
					}
					p := Placement{WorkspaceID: "ws-" + id, InstanceID: "ws-" + id + ".1", Node: id, Pools: []string{"pool-a"}, New: true}
					var held *store.Allocation
					q := store.CandidateQuery{LiveAt: f.LiveAt(f.now()), Defaults: store.Ratios{CPU: 1000, Memory: 1000}, Pools: p.Pools}
					placed, err := f.charge(tx, read, &held, p, q, f.now())
					if kept := id == "node-kept"; kept != (placed != nil) {
						t.Errorf("a placement on %s, read before its change: placed %v, want %v", id, placed, kept)
					}
					return err
				})
			}
		})
	}
}

func mustTx(t *testing.T, st *store.Store, fn func(tx *store.Tx) error) {
	t.Helper()
	if err := st.Tx(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}
