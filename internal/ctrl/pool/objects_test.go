package pool_test

import (
	"fmt"
	"sync"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/node"
)

func (e *env) listObjects(req *operatorv1.ListStoragePoolObjectsRequest) (*operatorv1.ListStoragePoolObjectsResponse, error) {
	res, err := e.c.Nodes.ListStoragePoolObjects(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// ListStoragePoolObjects pages the Volumes living in a pool, in order,
// with tokens bound to the pool and kind; GetStoragePoolObject reads one
// where it lives. Objects whose deletion was admitted are gone from both.
func TestPoolObjectsListAndGet(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.startNode("node-a", node.Pool{Name: "pool-a", Dir: t.TempDir()}, node.Pool{Name: "pool-b", Dir: t.TempDir()})
		for _, p := range []string{"pool-a", "pool-b"} {
			if _, err := e.setCapacity("cap-"+p, p, 1, gib); err != nil {
				t.Fatal(err)
			}
		}
		var ids []string
		for _, c := range []string{"v1", "v2", "v3"} {
			v, err := e.createVolume(c, "pool-a", 32*mib)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, v.GetVolumeId())
		}
		if _, err := e.createVolume("v-b", "pool-b", 32*mib); err != nil {
			t.Fatal(err)
		}

		var listed []string
		token := ""
		for {
			page, err := e.listObjects(&operatorv1.ListStoragePoolObjectsRequest{StoragePool: "pool-a", PageSize: 2, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page.GetObjects() {
				if o.GetKind() != operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_VOLUME || o.GetStoragePool() != "pool-a" || o.GetCapacityBytes() != 32*mib {
					t.Errorf("object %v: want a 32 MiB Volume in pool-a", o)
				}
				listed = append(listed, o.GetVolumeId())
			}
			if token = page.GetNextPageToken(); token == "" {
				break
			}
			if _, err := e.listObjects(&operatorv1.ListStoragePoolObjectsRequest{StoragePool: "pool-b", PageToken: token}); apierr.FieldOf(err) != "page_token" {
				t.Errorf("a token of pool-a's list used for pool-b: %v, want invalid_argument on page_token", err)
			}
		}
		if len(listed) != 3 || !(listed[0] < listed[1] && listed[1] < listed[2]) {
			t.Errorf("pool-a lists %v, want its 3 Volumes ordered by volume_id", listed)
		}
		layers, err := e.listObjects(&operatorv1.ListStoragePoolObjectsRequest{StoragePool: "pool-a", Kind: operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_WRITABLE_LAYER})
		if err != nil || len(layers.GetObjects()) != 0 {
			t.Errorf("writable layers of pool-a: %v %v, want none", layers, err)
		}
		for _, tc := range []struct {
			name string
			req  *operatorv1.ListStoragePoolObjectsRequest
			code connect.Code
		}{
			{"never declared", &operatorv1.ListStoragePoolObjectsRequest{StoragePool: "pool-z"}, connect.CodeNotFound},
			{"no pool", &operatorv1.ListStoragePoolObjectsRequest{}, connect.CodeInvalidArgument},
			{"bad kind", &operatorv1.ListStoragePoolObjectsRequest{StoragePool: "pool-a", Kind: 9}, connect.CodeInvalidArgument},
		} {
			if _, err := e.listObjects(tc.req); connect.CodeOf(err) != tc.code {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
			}
		}

		get := func(req *operatorv1.GetStoragePoolObjectRequest) (*operatorv1.StoragePoolObject, error) {
			res, err := e.c.Nodes.GetStoragePoolObject(ctx, connect.NewRequest(req))
			if err != nil {
				return nil, err
			}
			return res.Msg.GetObject(), nil
		}
		byVolume := func(id string) *operatorv1.GetStoragePoolObjectRequest {
			return &operatorv1.GetStoragePoolObjectRequest{Object: &operatorv1.GetStoragePoolObjectRequest_VolumeId{VolumeId: id}}
		}
		if o, err := get(byVolume(ids[1])); err != nil || o.GetVolumeId() != ids[1] || o.GetStoragePool() != "pool-a" {
			t.Errorf("GetStoragePoolObject of %s: %v %v", ids[1], o, err)
		}
		if _, err := get(&operatorv1.GetStoragePoolObjectRequest{}); apierr.FieldOf(err) != "object" {
			t.Errorf("naming no object: %v, want invalid_argument on object", err)
		}
		if _, err := get(byVolume("vol-none")); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("a Volume that does not exist: %v, want not_found", err)
		}
		if _, err := get(&operatorv1.GetStoragePoolObjectRequest{Object: &operatorv1.GetStoragePoolObjectRequest_WorkspaceId{WorkspaceId: "ws-none"}}); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("a Workspace that does not exist: %v, want not_found", err)
		}

		e.waitVolume(ids[0], ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE)
		if _, err := e.c.Volumes.DeleteVolume(ctx, connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: cmd("del-1"), VolumeId: ids[0]})); err != nil {
			t.Fatal(err)
		}
		if _, err := get(byVolume(ids[0])); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("a Volume being deleted: %v, want not_found", err)
		}
		if all, err := e.listObjects(&operatorv1.ListStoragePoolObjectsRequest{StoragePool: "pool-a"}); err != nil || len(all.GetObjects()) != 2 {
			t.Errorf("pool-a after a deletion: %v %v, want 2 objects", all, err)
		}
	})
}

// Concurrent creations in one pool reserve one after the other: of two
// that fit only one at a time, exactly one is admitted (rounds on pools of
// their own, to give the race several chances).
func TestConcurrentReservationsNeverExceedTheCapacity(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		var pools []node.Pool
		for round := 0; round < 5; round++ {
			pools = append(pools, node.Pool{Name: fmt.Sprintf("pool-%d", round), Dir: t.TempDir()})
		}
		e.startNode("node-a", pools...)
		for round, p := range pools {
			if _, err := e.setCapacity("cap-"+p.Name, p.Name, 1, 100*mib); err != nil {
				t.Fatal(err)
			}
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = e.createVolume(fmt.Sprintf("vol-%d-%d", round, i), p.Name, 60*mib)
				}()
			}
			wg.Wait()
			admitted := 0
			for _, err := range errs {
				switch {
				case err == nil:
					admitted++
				case connect.CodeOf(err) != connect.CodeResourceExhausted:
					t.Errorf("round %d: %v, want success or resource_exhausted", round, err)
				}
			}
			if got := e.pool(p.Name); admitted != 1 || got.GetReservedBytes() != 60*mib {
				t.Errorf("round %d admitted %d of two 60 MiB Volumes in 100 MiB (reserved %d), want 1", round, admitted, got.GetReservedBytes())
			}
		}
	})
}
