package pool_test

import (
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/node"
	"github.com/kibotos/kibotos/internal/testenv"
)

func (e *env) workspace(id string) *ctrlv1.Workspace {
	e.t.Helper()
	res, err := e.c.Workspaces.GetWorkspace(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.GetWorkspace()
}

func (e *env) objects(pool string) []*operatorv1.StoragePoolObject {
	e.t.Helper()
	res, err := e.c.Nodes.ListStoragePoolObjects(ctx, connect.NewRequest(&operatorv1.ListStoragePoolObjectsRequest{StoragePool: pool}))
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Msg.GetObjects()
}

// DeclareStoragePoolLost takes a pool only once every member is isolated,
// naming those in the way; then, in one transaction, its Volumes are LOST,
// its reservation released, the removals waiting on it dropped, and a
// Workspace bound to a lost Volume fails to start. The pool id never comes
// back: a node declaring it again reports it unavailable.
func TestDeclaringAPoolLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		shared, other := t.TempDir(), t.TempDir()
		a := e.startNode("node-a", node.Pool{Name: "shared", Dir: shared})
		b := e.startNode("node-b", node.Pool{Name: "other", Dir: other}, node.Pool{Name: "shared", Dir: shared})
		if _, err := e.setCapacity("cap-shared", "shared", 1, gib); err != nil {
			t.Fatal(err)
		}
		kept, err := e.createVolume("vol-kept", "shared", 64*mib)
		if err != nil {
			t.Fatal(err)
		}
		doomed, err := e.createVolume("vol-doomed", "shared", 128*mib)
		if err != nil {
			t.Fatal(err)
		}
		e.waitVolume(kept.GetVolumeId(), ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE)
		e.waitVolume(doomed.GetVolumeId(), ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE)

		_, err = e.declareLost("lost-0", "shared")
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "node-a, node-b") {
			t.Errorf("declaring a pool with live members lost: %v, want failed_precondition naming node-a and node-b", err)
		}
		if _, err := e.declareLost("lost-0", "never-declared"); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("declaring a pool never declared lost: %v, want not_found", err)
		}

		// Both hosts go down; a deletion then waits for a node reaching the pool.
		a.Stop(t)
		b.Stop(t)
		// Only once both read as down does the removal wait for a node;
		// sooner it is addressed to one, and isolating that node fails it.
		e.c.WaitStatus(t, "node-a", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		e.c.WaitStatus(t, "node-b", operatorv1.NodeRegistrationStatus_NODE_REGISTRATION_STATUS_UNAVAILABLE)
		if _, err := e.c.Volumes.DeleteVolume(ctx, connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: cmd("del-doomed"), VolumeId: doomed.GetVolumeId()})); err != nil {
			t.Fatal(err)
		}
		// A Workspace bound to the Volume waits for a node to start on.
		e.c.UnbootableCatalog(t)
		created, err := e.c.Workspaces.CreateWorkspace(ctx, connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
			Command: cmd("create-ws"),
			Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 * mib}, Volume: &ctrlv1.WorkspaceVolumeBinding{
				Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: kept.GetVolumeId(),
			}},
		}))
		if err != nil {
			t.Fatal(err)
		}
		wsID := created.Msg.GetWorkspace().GetWorkspaceId()
		if p := e.pool("shared"); p.GetCleanupCount() != 1 || p.GetVolumeCount() != 1 || p.GetReservedBytes() != 64*mib {
			t.Errorf("pool with a deletion waiting: %v, want 1 cleanup, 1 Volume, 64 MiB reserved", p)
		}

		e.isolate(a)
		_, err = e.declareLost("lost-1", "shared")
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "node-b") || strings.Contains(err.Error(), "node-a") {
			t.Errorf("declaring lost with node-b not isolated: %v, want failed_precondition naming node-b alone", err)
		}
		if p := e.pool("shared"); p.GetLostAt() != nil {
			t.Fatalf("a refused declaration changed the pool: %v", p)
		}

		e.isolate(b)
		res, err := e.declareLost("lost-1", "shared")
		if err != nil {
			t.Fatal(err)
		}
		if res.GetLostVolumes() != 1 || res.GetDiscardedCleanups() != 1 || res.GetLostRetainedLayers() != 0 {
			t.Errorf("declaration counted %d lost Volumes, %d discarded cleanups, %d lost layers; want 1, 1, 0",
				res.GetLostVolumes(), res.GetDiscardedCleanups(), res.GetLostRetainedLayers())
		}
		p := res.GetPool()
		if p.GetLostAt() == nil || p.GetReservedBytes() != 0 || p.GetCleanupCount() != 0 || p.GetVolumeCount() != 1 {
			t.Errorf("lost pool %v: want lost_at, nothing reserved, no cleanup, the lost Volume still counted", p)
		}
		for _, at := range p.GetAttachments() {
			if at.GetAvailable() {
				t.Errorf("attachment of a lost pool reads available: %v", at)
			}
		}
		if list, err := e.c.Nodes.ListStoragePools(ctx, connect.NewRequest(&operatorv1.ListStoragePoolsRequest{})); err != nil ||
			len(list.Msg.GetPools()) != 2 || list.Msg.GetPools()[1].GetLostAt() == nil {
			t.Errorf("pools after the loss: %v %v, want the lost pool still listed", list, err)
		}
		if again, err := e.declareLost("lost-1", "shared"); err != nil || !proto.Equal(again, res) {
			t.Errorf("replay: %v %v, want the same result", again, err)
		}
		if _, err := e.declareLost("lost-2", "shared"); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("declaring a lost pool lost again: %v, want failed_precondition", err)
		}

		if got := e.volume(kept.GetVolumeId()).GetState(); got != ctrlv1.VolumeState_VOLUME_STATE_LOST {
			t.Errorf("volume of the lost pool: %v, want LOST", got)
		}
		e.waitVolume(doomed.GetVolumeId(), ctrlv1.VolumeState_VOLUME_STATE_DELETED)
		if objs := e.objects("shared"); len(objs) != 1 || objs[0].GetVolumeId() != kept.GetVolumeId() || objs[0].GetWorkspaceId() != wsID {
			t.Errorf("objects of the lost pool: %v, want the LOST Volume bound to %s", objs, wsID)
		}

		// The waiting creation fails: its Volume is lost; so does a new start.
		var w *ctrlv1.Workspace
		testenv.WaitFor(t, "the creation bound to the lost Volume to fail", func() bool {
			w = e.workspace(wsID)
			return w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_FAILED
		})
		if w.GetFailure().GetReason() != ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST || w.GetFailure().GetRetryable() {
			t.Errorf("failure of the creation: %v, want VOLUME_LOST, not retryable", w.GetFailure())
		}
		_, err = e.c.Workspaces.StartWorkspace(ctx, connect.NewRequest(&ctrlv1.StartWorkspaceRequest{Command: cmd("start-ws"), WorkspaceId: wsID}))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || apierr.DetailOf(err).GetReason() != ctrlv1.FailureReason_FAILURE_REASON_VOLUME_LOST || apierr.DetailOf(err).GetRetryable() {
			t.Errorf("starting a Workspace bound to a lost Volume: %v, want failed_precondition with VOLUME_LOST, not retryable", err)
		}

		// The pool takes no capacity and no new object; its id never comes
		// back, even declared again with the original directory.
		if _, err := e.setCapacity("cap-lost", "shared", p.GetVersion(), 2*gib); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("capacity of a lost pool: %v, want failed_precondition", err)
		}
		if _, err := e.createVolume("vol-new", "shared", mib); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("a Volume in a lost pool: %v, want failed_precondition", err)
		}
		e.c.StartNodeWithPools(t, "node-b", b.StateDir, node.Pool{Name: "other", Dir: other, Default: true}, node.Pool{Name: "shared", Dir: shared})
		for _, at := range e.c.Registration(t, "node-b").GetStoragePools() {
			if at.GetAvailable() != (at.GetStoragePool() == "other") {
				t.Errorf("node-b back with a new incarnation reports %s available=%v; want only other available", at.GetStoragePool(), at.GetAvailable())
			}
		}
		if back := e.pool("shared"); len(back.GetAttachments()) != 2 || back.GetAttachments()[1].GetAvailable() {
			t.Errorf("lost pool with node-b back: %v, want its attachments unavailable", back)
		}
	})
}

// A pool without members (its only node retired, or revoked) can be
// declared lost: retired and revoked nodes are members of no pool.
func TestAPoolWithoutMembersCanBeDeclaredLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		n := e.startNode("node-a", node.Pool{Name: "alone", Dir: t.TempDir()})
		e.isolate(n)
		if _, err := e.c.Nodes.RetireNode(ctx, connect.NewRequest(&operatorv1.RetireNodeRequest{Command: cmd("retire-a"), NodeId: "node-a"})); err != nil {
			t.Fatal(err)
		}
		if p := e.pool("alone"); len(p.GetAttachments()) != 0 {
			t.Fatalf("pool of a retired node: %v, want no member", p)
		}
		res, err := e.declareLost("lost-alone", "alone")
		if err != nil || res.GetPool().GetLostAt() == nil {
			t.Errorf("declaring a pool without members lost: %v %v", res, err)
		}

		e.startNode("node-b", node.Pool{Name: "revoked", Dir: t.TempDir()})
		grants, err := e.c.Enrollment.ListEnrollmentGrants(ctx, connect.NewRequest(&operatorv1.ListEnrollmentGrantsRequest{NodeId: "node-b", IncludeInactive: true}))
		if err != nil || len(grants.Msg.GetGrants()) != 1 {
			t.Fatalf("node-b's grant: %v %v", grants, err)
		}
		if _, err := e.c.Enrollment.RevokeEnrollmentGrant(ctx, connect.NewRequest(&operatorv1.RevokeEnrollmentGrantRequest{
			Command: cmd("revoke-b"), GrantId: grants.Msg.GetGrants()[0].GetGrantId(), RevokeEnrolledNodes: true,
		})); err != nil {
			t.Fatal(err)
		}
		if p := e.pool("revoked"); len(p.GetAttachments()) != 0 {
			t.Errorf("pool of a revoked node: %v, want no member", p)
		}
		if _, err := e.declareLost("lost-revoked", "revoked"); err != nil {
			t.Errorf("declaring the pool of a revoked node lost: %v", err)
		}
	})
}
