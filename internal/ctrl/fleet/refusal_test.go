package fleet_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// liveNode is a node that holds a live session, runs VMs and block files
// and reaches pool-a, with no resources: change makes it fail a constraint.
func liveNode(id string, change func(n *operatorv1.NodeRegistration)) *operatorv1.NodeRegistration {
	now := timestamppb.Now()
	n := &operatorv1.NodeRegistration{
		NodeId: id, Incarnation: 1, Admission: operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED,
		Status:       operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY,
		Session:      &operatorv1.NodeSessionSummary{Live: true, ConnectedAt: now, LastSeenAt: now},
		Observation:  &operatorv1.NodeObservationSummary{Capabilities: []string{capability.QEMU, capability.BlockFile}},
		StoragePools: []*operatorv1.StoragePoolAttachment{{NodeId: id, StoragePool: "pool-a", DefaultPool: true, Available: true}},
	}
	if change != nil {
		change(n)
	}
	return n
}

var (
	revoked  = func(n *operatorv1.NodeRegistration) { n.Admission = operatorv1.NodeAdmission_NODE_ADMISSION_REVOKED }
	isolated = func(n *operatorv1.NodeRegistration) { n.Isolated = true }
	notLive  = func(n *operatorv1.NodeRegistration) { n.Session.Live = false }
	syncing  = func(n *operatorv1.NodeRegistration) {
		n.Status = operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_SYNCING
	}
	skewed = func(n *operatorv1.NodeRegistration) {
		n.Session.Clock = &operatorv1.NodeClockObservation{ExceedsTolerance: true}
	}
	noVMs     = func(n *operatorv1.NodeRegistration) { n.Observation.Capabilities = []string{capability.BlockFile} }
	noBlocks  = func(n *operatorv1.NodeRegistration) { n.Observation.Capabilities = []string{capability.QEMU} }
	elsewhere = func(n *operatorv1.NodeRegistration) { n.StoragePools[0].StoragePool = "pool-b" }
	tight     = func(n *operatorv1.NodeRegistration) { n.MemoryTight = &operatorv1.NodeMemoryTight{} }
)

// A placement that finds no node names why for the first nodes by node_id
// and counts the others by reason, in the order placement checks them:
// one aggregate over the fleet, not a read of every node. It is
// resource_exhausted while some node lacks only room, unavailable
// otherwise.
func TestARefusedPlacementNamesAFewNodesAndCountsTheRest(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			f, st := storeFleet(t, b)
			nodes := []*operatorv1.NodeRegistration{
				// The first eight by node_id are named.
				liveNode("a-0", revoked), liveNode("a-1", isolated), liveNode("a-2", notLive), liveNode("a-3", syncing),
				liveNode("a-4", skewed), liveNode("a-5", noVMs), liveNode("a-6", noBlocks), liveNode("a-7", elsewhere),
			}
			for i, change := range []func(*operatorv1.NodeRegistration){
				isolated, isolated, isolated, notLive, notLive, skewed, noBlocks, noBlocks, elsewhere, tight, tight, nil, nil, nil,
			} {
				nodes = append(nodes, liveNode(fmt.Sprintf("b-%02d", i), change))
			}
			mustTx(t, st, func(tx *store.Tx) error {
				for _, n := range nodes {
					if err := tx.PutNode(n); err != nil {
						return err
					}
				}
				return nil
			})
			refused := func(pool string) *fleet.Refusal {
				t.Helper()
				var refusal *fleet.Refusal
				mustTx(t, st, func(tx *store.Tx) error {
					placed, why, err := f.Place(tx, fleet.Placement{WorkspaceID: "ws-1", InstanceID: "ws-1.1", CPUMillis: 1000, MemoryBytes: 1 << 30, Pools: []string{pool}})
					if placed != nil {
						t.Fatalf("placed on %s", placed.NodeID)
					}
					refusal = why
					return err
				})
				return refusal
			}
			named := "a-0: not admitted (revoked or retired); a-1: isolated; a-2: no live control session; a-3: syncing; " +
				"a-4: its clock is beyond the allowed skew; a-5: runs no VMs (capability provider.qemu); " +
				"a-6: handles no block files (capability storage.block_file); a-7: does not reach storage pool %q; "

			r := refused("pool-a")
			want := fmt.Sprintf("no node can run it (1000 cpu_millis, 1024 MiB): "+named+"and 14 more: 3 isolated, "+
				"2 without a live control session, 1 with a clock beyond the allowed skew, 2 handling no block files, "+
				"1 not reaching every storage pool, 2 with tight host memory, 3 without the room", "pool-a")
			if r.Reason != ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED || r.Message != want {
				t.Errorf("refusal %v %q,\nwant RESOURCE_EXHAUSTED %q", r.Reason, r.Message, want)
			}

			// Nobody reaches pool-c: no node lacks only room.
			r = refused("pool-c")
			want = fmt.Sprintf("no node can run it (1000 cpu_millis, 1024 MiB): "+named+"and 14 more: 3 isolated, "+
				"2 without a live control session, 1 with a clock beyond the allowed skew, 2 handling no block files, "+
				"6 not reaching every storage pool", "pool-c")
			if r.Reason != ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE || r.Message != want {
				t.Errorf("refusal %v %q,\nwant UNAVAILABLE %q", r.Reason, r.Message, want)
			}
		})
	}
}
