package fleet_test

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/fleet"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/store/storetest"
)

// Two ctrl replicas on one PostgreSQL database, each with its own
// connections, place at once more executions than the nodes hold: every
// node ends with exactly what its schedulable memory holds, never more,
// each Allocation counted once in its node's sums, and the rest refused
// as resource_exhausted. (SQLite has one ctrl: its file is locked.)
func TestTwoReplicasNeverOverbookANode(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	const nodes, perNode, attempts = 3, 4, 2 * 3 * 4
	setup := storetest.Open(t, dsn)
	for i := range nodes {
		putNodeWithRoom(t, setup, fmt.Sprintf("node-%d", i), 8000, perNode<<30)
	}
	replica := func(name string) (*fleet.Fleet, *store.Store) {
		st := storetest.Open(t, dsn)
		return fleet.New(st, command.NewRunner(st, name, slog.Default()), slog.Default(), fleet.DefaultConfig, fleet.Deps{}), st
	}
	fa, sa := replica("a")
	fb, sb := replica("b")

	var wg sync.WaitGroup
	var mu sync.Mutex
	placed, refused := map[string]int{}, 0
	for i := range attempts {
		f, st := fa, sa
		if i%2 == 1 {
			f, st = fb, sb
		}
		wg.Go(func() {
			ws := fmt.Sprintf("ws-%02d", i)
			var node string
			var refusal *fleet.Refusal
			err := st.Tx(ctx, func(tx *store.Tx) error {
				p, why, err := f.Place(tx, fleet.Placement{WorkspaceID: ws, InstanceID: ws + ".1", CPUMillis: 1000, MemoryBytes: 1 << 30, Pools: []string{"pool-a"}})
				if p != nil {
					node = p.NodeID
				}
				refusal = why
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Errorf("%s: %v", ws, err)
			case refusal != nil && refusal.Reason.String() != "FAILURE_REASON_RESOURCE_EXHAUSTED":
				t.Errorf("%s refused as %v: %s", ws, refusal.Reason, refusal.Message)
			case refusal != nil:
				refused++
			default:
				placed[node]++
			}
		})
	}
	wg.Wait()

	if refused != attempts-nodes*perNode {
		t.Errorf("%d of %d placements refused, want %d: placed %v", refused, attempts, attempts-nodes*perNode, placed)
	}
	mustTx(t, setup, func(tx *store.Tx) error {
		sums, err := tx.NodeAllocations()
		if err != nil {
			return err
		}
		for i := range nodes {
			id := fmt.Sprintf("node-%d", i)
			all, err := tx.ListAllocations(store.AllocationFilter{NodeID: id}, "", 100)
			if err != nil {
				return err
			}
			var memory uint64
			for _, a := range all {
				memory += a.MemoryBytes
			}
			if len(all) != perNode || memory != perNode<<30 || placed[id] != perNode {
				t.Errorf("%s holds %d Allocations of %d MiB (the callers saw %d placed), want exactly %d of 1024 MiB each", id, len(all), memory>>20, placed[id], perNode)
			}
			if s := sums[id]; s.Count != len(all) || s.MemoryBytes != memory {
				t.Errorf("%s's placement row sums %d Allocations, %d MiB; its Allocations are %d, %d MiB", id, s.Count, s.MemoryBytes>>20, len(all), memory>>20)
			}
		}
		return nil
	})
}

// putNodeWithRoom records a live, READY node with cpuMillis and memory
// of host resources, reaching pool-a.
func putNodeWithRoom(t *testing.T, st *store.Store, id string, cpuMillis uint32, memory uint64) {
	t.Helper()
	now := timestamppb.Now()
	mustTx(t, st, func(tx *store.Tx) error {
		return tx.PutNode(&operatorv1.NodeRegistration{
			NodeId: id, Incarnation: 1, Admission: operatorv1.NodeAdmission_NODE_ADMISSION_ADMITTED,
			Status:  operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_READY,
			Session: &operatorv1.NodeSessionSummary{Live: true, ConnectedAt: now, LastSeenAt: now},
			Observation: &operatorv1.NodeObservationSummary{
				Capabilities: []string{capability.QEMU, capability.BlockFile},
				Resources:    &operatorv1.NodeResources{CpuMillis: cpuMillis, MemoryBytes: memory},
			},
			StoragePools: []*operatorv1.StoragePoolAttachment{{NodeId: id, StoragePool: "pool-a", DefaultPool: true, Available: true}},
		})
	})
}
