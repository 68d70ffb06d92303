package pool_test

import (
	"slices"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/node"
)

// Pools are declared by the nodes that reach them: two nodes declaring one
// directory share one pool, listed once with both as members; a pool never
// declared is not_found.
func TestPoolsAreDeclaredByTheNodesThatReachThem(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		shared, local := t.TempDir(), t.TempDir()
		e.startNode("node-a", node.Pool{Name: "shared", Dir: shared}, node.Pool{Name: "local-a", Dir: local})
		e.startNode("node-b", node.Pool{Name: "shared", Dir: shared})

		list, err := e.c.Nodes.ListStoragePools(ctx, connect.NewRequest(&operatorv1.ListStoragePoolsRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		pools := list.Msg.GetPools()
		if len(pools) != 2 || pools[0].GetStoragePool() != "local-a" || pools[1].GetStoragePool() != "shared" || list.Msg.GetNextPageToken() != "" {
			t.Fatalf("pools %v, want local-a then shared on one page", pools)
		}
		p := pools[1]
		if got := nodeIDs(p.GetAttachments()); !slices.Equal(got, []string{"node-a", "node-b"}) {
			t.Errorf("members of shared: %v, want node-a and node-b", got)
		}
		for _, a := range p.GetAttachments() {
			if !a.GetAvailable() || a.GetStoragePool() != "shared" || a.GetFilesystemSizeBytes() == 0 || a.GetObservedAt() == nil {
				t.Errorf("attachment %v: want available, both identities, the filesystem observed", a)
			}
		}
		if !p.GetDefaultPool() || p.CapacityBytes != nil || p.GetVersion() != 1 || p.GetReservedBytes() != 0 ||
			p.GetFirstDeclaredAt() == nil || p.GetLostAt() != nil {
			t.Errorf("shared = %v: want a default pool, no capacity, version 1, nothing reserved, declared, not lost", p)
		}
		if pools[0].GetDefaultPool() || len(pools[0].GetAttachments()) != 1 {
			t.Errorf("local-a = %v: want one member, not a default pool", pools[0])
		}

		got := e.pool("shared")
		if got.GetStoragePool() != "shared" || got.GetVersion() != p.GetVersion() || !slices.Equal(nodeIDs(got.GetAttachments()), nodeIDs(p.GetAttachments())) {
			t.Errorf("GetStoragePool %v, want what ListStoragePools gave %v", got, p)
		}

		first, err := e.c.Nodes.ListStoragePools(ctx, connect.NewRequest(&operatorv1.ListStoragePoolsRequest{PageSize: 1}))
		if err != nil || len(first.Msg.GetPools()) != 1 || first.Msg.GetNextPageToken() == "" {
			t.Fatalf("first page of one: %v %v", first, err)
		}
		next, err := e.c.Nodes.ListStoragePools(ctx, connect.NewRequest(&operatorv1.ListStoragePoolsRequest{PageSize: 1, PageToken: first.Msg.GetNextPageToken()}))
		if err != nil || len(next.Msg.GetPools()) != 1 || next.Msg.GetPools()[0].GetStoragePool() != "shared" || next.Msg.GetNextPageToken() != "" {
			t.Errorf("second page: %v %v, want shared and no more", next, err)
		}
		if _, err := e.c.Nodes.ListStoragePools(ctx, connect.NewRequest(&operatorv1.ListStoragePoolsRequest{PageToken: "garbage"})); apierr.FieldOf(err) != "page_token" {
			t.Errorf("a token no list made: %v, want invalid_argument on page_token", err)
		}

		for name, want := range map[string]connect.Code{"never-declared": connect.CodeNotFound, "": connect.CodeInvalidArgument, "Not A Pool": connect.CodeInvalidArgument} {
			_, err := e.c.Nodes.GetStoragePool(ctx, connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: name}))
			if connect.CodeOf(err) != want {
				t.Errorf("GetStoragePool(%q): %v, want %v", name, err, want)
			}
		}
	})
}

// SetStoragePoolCapacity: bad input is refused naming the field and
// changes nothing, the version is a CAS token, a replay answers the pool as
// it stands, and the version moves only when the capacity does.
func TestSetCapacityValidatesCASAndReplays(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.startNode("node-a", node.Pool{Name: "pool-a", Dir: t.TempDir()})
		for _, tc := range []struct {
			name  string
			req   *operatorv1.SetStoragePoolCapacityRequest
			code  connect.Code
			field string
		}{
			{"no command", &operatorv1.SetStoragePoolCapacityRequest{StoragePool: "pool-a", ExpectedVersion: 1, CapacityBytes: gib}, connect.CodeInvalidArgument, "command.command_id"},
			{"no pool", &operatorv1.SetStoragePoolCapacityRequest{Command: cmd("c"), ExpectedVersion: 1, CapacityBytes: gib}, connect.CodeInvalidArgument, "storage_pool"},
			{"no version", &operatorv1.SetStoragePoolCapacityRequest{Command: cmd("c"), StoragePool: "pool-a", CapacityBytes: gib}, connect.CodeInvalidArgument, "expected_version"},
			{"zero capacity", &operatorv1.SetStoragePoolCapacityRequest{Command: cmd("c"), StoragePool: "pool-a", ExpectedVersion: 1}, connect.CodeInvalidArgument, "capacity_bytes"},
			{"beyond int64", &operatorv1.SetStoragePoolCapacityRequest{Command: cmd("c"), StoragePool: "pool-a", ExpectedVersion: 1, CapacityBytes: 1 << 63}, connect.CodeInvalidArgument, "capacity_bytes"},
			{"never declared", &operatorv1.SetStoragePoolCapacityRequest{Command: cmd("c"), StoragePool: "pool-z", ExpectedVersion: 1, CapacityBytes: gib}, connect.CodeNotFound, ""},
			{"stale version", &operatorv1.SetStoragePoolCapacityRequest{Command: cmd("c"), StoragePool: "pool-a", ExpectedVersion: 7, CapacityBytes: gib}, connect.CodeFailedPrecondition, ""},
		} {
			_, err := e.c.Nodes.SetStoragePoolCapacity(ctx, connect.NewRequest(tc.req))
			if connect.CodeOf(err) != tc.code || apierr.FieldOf(err) != tc.field {
				t.Errorf("%s: %v (field %q), want %v on %q", tc.name, err, apierr.FieldOf(err), tc.code, tc.field)
			}
		}
		if p := e.pool("pool-a"); p.CapacityBytes != nil || p.GetVersion() != 1 {
			t.Fatalf("refused requests changed the pool: %v", p)
		}

		set, err := e.setCapacity("cap-1", "pool-a", 1, 3*gib)
		if err != nil {
			t.Fatal(err)
		}
		if set.GetCapacityBytes() != 3*gib || set.GetVersion() != 2 {
			t.Errorf("after setting 3 GiB: %v, want it at version 2", set)
		}
		if _, err := e.setCapacity("cap-1", "pool-a", 1, 4*gib); connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Errorf("the same command_id with other input: %v, want already_exists", err)
		}
		if _, err := e.setCapacity("cap-2", "pool-a", 1, 4*gib); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("the version read before the change: %v, want failed_precondition", err)
		}
		lowered, err := e.setCapacity("cap-3", "pool-a", 2, 2*gib)
		if err != nil || lowered.GetVersion() != 3 {
			t.Fatalf("lowering: %v %v", lowered, err)
		}
		// The replay answers the pool as it stands now, writing nothing.
		if again, err := e.setCapacity("cap-1", "pool-a", 1, 3*gib); err != nil || !proto.Equal(again.GetFirstDeclaredAt(), lowered.GetFirstDeclaredAt()) ||
			again.GetCapacityBytes() != 2*gib || again.GetVersion() != 3 {
			t.Errorf("replay of cap-1: %v %v, want the current pool (2 GiB, version 3)", again, err)
		}
		if same, err := e.setCapacity("cap-4", "pool-a", 3, 2*gib); err != nil || same.GetVersion() != 3 {
			t.Errorf("setting the capacity it has: %v %v, want version 3 still (it moves only when the capacity changes)", same, err)
		}
	})
}

// A pool takes new Volumes only within its capacity: none without one, and
// none beyond it; lowering the capacity below what is reserved stops new
// Volumes and evicts nothing; a deleted Volume's reservation is released.
func TestVolumesReserveTheirCapacityInTheirPool(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.startNode("node-a", node.Pool{Name: "pool-a", Dir: t.TempDir()})
		_, err := e.createVolume("vol-0", "", 64*mib)
		if d := apierr.DetailOf(err); connect.CodeOf(err) != connect.CodeResourceExhausted ||
			d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_CREATING_VOLUME || d.GetReason() != ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED {
			t.Errorf("a Volume in a pool without capacity: %v (%v), want resource_exhausted at CREATING_VOLUME", err, d)
		}
		if list, err := e.c.Volumes.ListVolumes(ctx, connect.NewRequest(&ctrlv1.ListVolumesRequest{IncludeDeleted: true})); err != nil || len(list.Msg.GetVolumes()) != 0 {
			t.Errorf("a refused creation stored %v %v", list, err)
		}

		if _, err := e.setCapacity("cap-1", "pool-a", 1, 192*mib); err != nil {
			t.Fatal(err)
		}
		a, err := e.createVolume("vol-a", "pool-a", 64*mib)
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.createVolume("vol-b", "", 128*mib)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.createVolume("vol-c", "pool-a", 64*mib); connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Errorf("a Volume beyond the capacity: %v, want resource_exhausted", err)
		}
		if p := e.pool("pool-a"); p.GetReservedBytes() != 192*mib || p.GetVolumeCount() != 2 {
			t.Errorf("pool after two Volumes: reserved %d, volumes %d; want 192 MiB and 2", p.GetReservedBytes(), p.GetVolumeCount())
		}
		e.waitVolume(a.GetVolumeId(), ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE)
		e.waitVolume(b.GetVolumeId(), ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE)
		_, err = e.c.Volumes.ResizeVolume(ctx, connect.NewRequest(&ctrlv1.ResizeVolumeRequest{Command: cmd("grow-a"), VolumeId: a.GetVolumeId(), CapacityBytes: 128 * mib}))
		if d := apierr.DetailOf(err); connect.CodeOf(err) != connect.CodeResourceExhausted || d.GetStage() != ctrlv1.FailureStage_FAILURE_STAGE_RESIZING_VOLUME {
			t.Errorf("growing a Volume beyond its pool's capacity: %v (%v), want resource_exhausted at RESIZING_VOLUME", err, d)
		}

		// Lowered below what is reserved: nothing is evicted, nothing new fits.
		lowered, err := e.setCapacity("cap-2", "pool-a", 2, 64*mib)
		if err != nil {
			t.Fatal(err)
		}
		if lowered.GetReservedBytes() != 192*mib || lowered.GetCapacityBytes() != 64*mib || lowered.GetVolumeCount() != 2 {
			t.Errorf("pool lowered below its reservation: %v", lowered)
		}
		for _, id := range []string{a.GetVolumeId(), b.GetVolumeId()} {
			if got := e.volume(id).GetState(); got != ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE {
				t.Errorf("volume %s after the capacity was lowered: %v, want AVAILABLE", id, got)
			}
		}
		if _, err := e.createVolume("vol-d", "pool-a", mib); connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Errorf("a Volume in a pool reserved beyond its capacity: %v, want resource_exhausted", err)
		}

		if _, err := e.c.Volumes.DeleteVolume(ctx, connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: cmd("del-b"), VolumeId: b.GetVolumeId()})); err != nil {
			t.Fatal(err)
		}
		e.waitVolume(b.GetVolumeId(), ctrlv1.VolumeState_VOLUME_STATE_DELETED)
		if p := e.pool("pool-a"); p.GetReservedBytes() != 64*mib || p.GetVolumeCount() != 1 || p.GetCleanupCount() != 0 {
			t.Errorf("pool after a deletion: %v, want 64 MiB reserved, 1 Volume, no cleanup", p)
		}
		if _, err := e.createVolume("vol-e", "pool-a", mib); connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Errorf("a Volume in a full pool: %v, want resource_exhausted", err)
		}
		if _, err := e.setCapacity("cap-3", "pool-a", 3, 65*mib); err != nil {
			t.Fatal(err)
		}
		if _, err := e.createVolume("vol-f", "pool-a", mib); err != nil {
			t.Errorf("a Volume that fits the raised capacity: %v", err)
		}
	})
}
