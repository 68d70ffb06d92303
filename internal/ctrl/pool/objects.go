package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/page"
	"github.com/kibotos/kibotos/internal/store"
)

// layerObject is a Workspace's writable layer as the API shows it; its
// holder is the node its current execution runs on.
func layerObject(rt *storev1.WorkspaceRuntime) *operatorv1.StoragePoolObject {
	return &operatorv1.StoragePoolObject{
		Kind: operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_WRITABLE_LAYER, WorkspaceId: rt.GetWorkspaceId(),
		StoragePool: rt.GetLayerPool(), CapacityBytes: rt.GetLayerCapacityBytes(), HolderNodeId: rt.GetNodeId(),
	}
}

// volumeObject is a Volume as the API shows it; an ATTACHED Volume is held
// by the node its Workspace's execution runs on.
func volumeObject(tx *store.Tx, v *ctrlv1.Volume) (*operatorv1.StoragePoolObject, error) {
	o := &operatorv1.StoragePoolObject{
		Kind: operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_VOLUME, VolumeId: v.GetVolumeId(), WorkspaceId: v.GetBoundWorkspaceId(),
		StoragePool: v.GetSpec().GetStoragePool(), CapacityBytes: v.GetSpec().GetCapacityBytes(),
	}
	if v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_ATTACHED && v.GetBoundWorkspaceId() != "" {
		rt, err := tx.GetRuntime(v.GetBoundWorkspaceId(), false)
		if err != nil {
			return nil, err
		}
		o.HolderNodeId = rt.GetNodeId()
	}
	return o, nil
}

// Object keys order a pool's objects: Volumes by volume_id, then writable
// layers by workspace_id.
const (
	volumeKey = "1/"
	layerKey  = "2/"
)

func objectKey(o *operatorv1.StoragePoolObject) string {
	if o.GetKind() == operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_VOLUME {
		return volumeKey + o.GetVolumeId()
	}
	return layerKey + o.GetWorkspaceId()
}

// objects returns up to n objects of pool after the key given, of kind
// (UNSPECIFIED: both), in key order.
func objects(tx *store.Tx, pool string, kind operatorv1.StoragePoolObjectKind, after string, n int) ([]*operatorv1.StoragePoolObject, error) {
	var out []*operatorv1.StoragePoolObject
	wantVolumes := kind != operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_WRITABLE_LAYER
	wantLayers := kind != operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_VOLUME
	layersAfter := ""
	if strings.HasPrefix(after, layerKey) {
		wantVolumes, layersAfter = false, strings.TrimPrefix(after, layerKey)
	}
	if wantVolumes {
		vols, err := tx.PoolVolumes(pool, strings.TrimPrefix(after, volumeKey), n, false)
		if err != nil {
			return nil, err
		}
		for _, v := range vols {
			o, err := volumeObject(tx, v)
			if err != nil {
				return nil, err
			}
			if err := withMove(tx, o); err != nil {
				return nil, err
			}
			out = append(out, o)
		}
	}
	if wantLayers && len(out) < n {
		layers, err := tx.PoolLayers(pool, layersAfter, n-len(out), false)
		if err != nil {
			return nil, err
		}
		for _, rt := range layers {
			o := layerObject(rt)
			if err := withMove(tx, o); err != nil {
				return nil, err
			}
			out = append(out, o)
		}
	}
	return out, nil
}

// holders counts, per node, the objects living in pool whose use right the
// node holds.
func holders(tx *store.Tx, pool string) (map[string]uint64, error) {
	held := map[string]uint64{}
	after := ""
	for {
		batch, err := objects(tx, pool, operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_UNSPECIFIED, after, 500)
		if err != nil {
			return nil, err
		}
		for _, o := range batch {
			if o.GetHolderNodeId() != "" {
				held[o.GetHolderNodeId()]++
			}
		}
		if len(batch) < 500 {
			return held, nil
		}
		after = objectKey(batch[len(batch)-1])
	}
}

// ListStoragePoolObjects pages the Volumes, then the writable layers, that
// live in one pool.
func (s *Service) ListStoragePoolObjects(ctx context.Context, req *operatorv1.ListStoragePoolObjectsRequest) (*operatorv1.ListStoragePoolObjectsResponse, error) {
	if err := checkName("storage_pool", req.GetStoragePool()); err != nil {
		return nil, err
	}
	if _, ok := operatorv1.StoragePoolObjectKind_name[int32(req.GetKind())]; !ok {
		return nil, apierr.Invalid("kind", "is not a storage pool object kind")
	}
	filter := fmt.Sprintf("%s|%s", req.GetStoragePool(), req.GetKind())
	after, err := page.After(req.GetPageToken(), filter)
	if err != nil {
		return nil, err
	}
	res := &operatorv1.ListStoragePoolObjectsResponse{}
	err = s.store.Tx(ctx, func(tx *store.Tx) error {
		if _, err := read(tx, req.GetStoragePool(), false); err != nil {
			return err
		}
		var err error
		res.Objects, res.NextPageToken, err = page.Collect(page.Size(req.GetPageSize()), after, filter, objectKey,
			func(*operatorv1.StoragePoolObject) bool { return true },
			func(after string, n int) ([]*operatorv1.StoragePoolObject, error) {
				return objects(tx, req.GetStoragePool(), req.GetKind(), after, n)
			})
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// GetStoragePoolObject reads one Volume, or one Workspace's writable layer,
// where it lives.
func (s *Service) GetStoragePoolObject(ctx context.Context, req *operatorv1.GetStoragePoolObjectRequest) (*operatorv1.GetStoragePoolObjectResponse, error) {
	res := &operatorv1.GetStoragePoolObjectResponse{}
	err := s.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		switch o := req.GetObject().(type) {
		case *operatorv1.GetStoragePoolObjectRequest_VolumeId:
			res.Object, err = volumeIn(tx, o.VolumeId)
		case *operatorv1.GetStoragePoolObjectRequest_WorkspaceId:
			res.Object, err = layerIn(tx, o.WorkspaceId)
		default:
			err = apierr.Invalid("object", "names no object: set volume_id or workspace_id")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// volumeIn reads a Volume that lives in a pool: one that does not exist or
// whose deletion was admitted is not_found.
func volumeIn(tx *store.Tx, id string) (*operatorv1.StoragePoolObject, error) {
	v, err := tx.GetVolume(id, false)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, apierr.NotFound("volume", id)
	case err != nil:
		return nil, err
	case v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_DELETED, v.GetState() == ctrlv1.VolumeState_VOLUME_STATE_DELETING:
		return nil, apierr.NotFound("volume", id)
	}
	o, err := volumeObject(tx, v)
	if err != nil {
		return nil, err
	}
	return o, withMove(tx, o)
}

// LiveWorkspace reads a Workspace whose deletion was not admitted; any
// other is not_found.
func LiveWorkspace(tx *store.Tx, id string) (*ctrlv1.Workspace, error) {
	w, err := tx.GetWorkspace(id, false)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, apierr.NotFound("workspace", id)
	case err != nil:
		return nil, err
	case w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETED, w.GetState() == ctrlv1.WorkspaceState_WORKSPACE_STATE_DELETING:
		return nil, apierr.NotFound("workspace", id)
	}
	return w, nil
}

// layerIn reads a Workspace's writable layer: a Workspace that does not
// exist, whose deletion was admitted, or whose layer is not placed (never,
// or not again since its pool was lost) is not_found.
func layerIn(tx *store.Tx, id string) (*operatorv1.StoragePoolObject, error) {
	if _, err := LiveWorkspace(tx, id); err != nil {
		return nil, err
	}
	rt, err := tx.GetRuntime(id, false)
	if err != nil {
		return nil, err
	}
	if rt.GetLayerPool() == "" {
		return nil, apierr.NotFound("writable layer of workspace", id)
	}
	o := layerObject(rt)
	return o, withMove(tx, o)
}
