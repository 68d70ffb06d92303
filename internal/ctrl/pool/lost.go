package pool

import (
	"context"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/telemetry"
)

const kindDeclareLost = "DeclareStoragePoolLost"

// DeclareStoragePoolLost records the operator's declaration that a pool's
// storage is gone for good, and lets go of everything in it, in one
// transaction.
func (s *Service) DeclareStoragePoolLost(ctx context.Context, req *operatorv1.DeclareStoragePoolLostRequest) (*operatorv1.DeclareStoragePoolLostResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	if err := checkName("storage_pool", req.GetStoragePool()); err != nil {
		return nil, err
	}
	var out proto.Message
	err := command.Do(ctx, s.store, func(tx *store.Tx) error {
		var err error
		out, err = command.Admit(tx, s.now(), req.GetCommand().GetCommandId(), kindDeclareLost, req, func() (command.Effect, error) {
			res, err := s.declareLost(tx, req.GetStoragePool(), s.now())
			return command.Effect{Target: req.GetStoragePool(), Result: res}, err
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	// Commands waiting on the pool (a removal, a placement reaching it) go
	// on now: they find their objects lost, removed or to be placed anew.
	if werr := s.waker.WakeWaiting(context.WithoutCancel(ctx)); werr != nil {
		s.log.WarnContext(telemetry.WithCommandID(ctx, req.GetCommand().GetCommandId()), "wake commands after a pool loss", "storage_pool", req.GetStoragePool(), "err", werr)
	}
	res := out.(*operatorv1.DeclareStoragePoolLostResponse)
	s.log.WarnContext(telemetry.WithCommandID(ctx, req.GetCommand().GetCommandId()), "storage pool declared lost by the operator", "storage_pool", req.GetStoragePool(), "lost_volumes", res.GetLostVolumes(),
		"lost_retained_layers", res.GetLostRetainedLayers(), "discarded_cleanups", res.GetDiscardedCleanups())
	return res, nil
}

func (s *Service) declareLost(tx *store.Tx, name string, now time.Time) (*operatorv1.DeclareStoragePoolLostResponse, error) {
	p, err := read(tx, name, true)
	if err != nil {
		return nil, err
	}
	if p.Lost() {
		return nil, apierr.Precondition(nil, "storage pool %q was declared lost already", name)
	}
	nodes, err := tx.AllNodes()
	if err != nil {
		return nil, err
	}
	if err := noWriter(nodes, name); err != nil {
		return nil, err
	}
	res := &operatorv1.DeclareStoragePoolLostResponse{}
	if res.LostVolumes, res.DiscardedCleanups, err = loseVolumes(tx, name, now); err != nil {
		return nil, err
	}
	lostLayers, droppedLayers, err := loseLayers(tx, name)
	if err != nil {
		return nil, err
	}
	res.LostRetainedLayers, res.DiscardedCleanups = lostLayers, res.DiscardedCleanups+droppedLayers
	if err := tx.SetStoragePoolLost(name, now); err != nil {
		return nil, err
	}
	if err := unavailableOn(tx, nodes, name); err != nil {
		return nil, err
	}
	p.LostAt = now
	res.Pool, err = view(tx, p, nodes)
	return res, err
}

// noWriter refuses while a member's current incarnation is not isolated:
// it may still write to the pool.
func noWriter(nodes []*operatorv1.NodeRegistration, name string) error {
	isolated := map[string]bool{}
	for _, n := range nodes {
		isolated[n.GetNodeId()] = n.GetIsolated()
	}
	var inTheWay []string
	for _, a := range members(nodes, name) {
		if !isolated[a.GetNodeId()] {
			inTheWay = append(inTheWay, a.GetNodeId())
		}
	}
	if len(inTheWay) == 0 {
		return nil
	}
	sort.Strings(inTheWay)
	return apierr.Precondition(nil, "storage pool %q still has members whose current incarnation is not isolated: %s; isolate them (kibotos node isolate) or retire them first",
		name, strings.Join(inTheWay, ", "))
}

// loseVolumes makes the pool's Volumes LOST and drops the removals of
// those being deleted, which are DELETED at once: nothing is left to
// remove. The deletions waiting on them then succeed.
func loseVolumes(tx *store.Tx, name string, now time.Time) (lost, dropped uint64, err error) {
	for _, removing := range []bool{false, true} {
		after := ""
		for {
			vols, err := tx.PoolVolumes(name, after, 500, removing)
			if err != nil {
				return 0, 0, err
			}
			for _, v := range vols {
				v.State = ctrlv1.VolumeState_VOLUME_STATE_LOST
				if removing {
					v.State = ctrlv1.VolumeState_VOLUME_STATE_DELETED
					dropped++
				} else {
					lost++
				}
				v.UpdatedAt = timestamppb.New(now)
				if err := tx.PutVolume(v); err != nil {
					return 0, 0, err
				}
			}
			if len(vols) < 500 {
				break
			}
			after = vols[len(vols)-1].GetVolumeId()
		}
	}
	return lost, dropped, nil
}

// loseLayers forgets every writable layer in the pool: a Workspace whose
// layer it was starts with a new one (RESET, LAYER_UNAVAILABLE, since it
// started before), and a Workspace being deleted has no layer left to
// remove.
func loseLayers(tx *store.Tx, name string) (lost, dropped uint64, err error) {
	for _, removing := range []bool{false, true} {
		for {
			// Each forgotten layer leaves the query: read from the start.
			layers, err := tx.PoolLayers(name, "", 500, removing)
			if err != nil {
				return 0, 0, err
			}
			for _, rt := range layers {
				rt.LayerPool, rt.LayerCapacityBytes, rt.LayerTemplate = "", 0, ""
				if err := tx.PutRuntime(rt); err != nil {
					return 0, 0, err
				}
				if removing {
					dropped++
				} else {
					lost++
				}
			}
			if len(layers) < 500 {
				break
			}
		}
	}
	return lost, dropped, nil
}

// unavailableOn marks the pool unavailable in every registration that
// declares it; the fleet keeps it so on every later report.
func unavailableOn(tx *store.Tx, nodes []*operatorv1.NodeRegistration, name string) error {
	for _, n := range nodes {
		changed := false
		for _, a := range n.GetStoragePools() {
			if a.GetStoragePool() == name && a.GetAvailable() {
				a.Available, changed = false, true
			}
		}
		if changed {
			if err := tx.PutNode(n); err != nil {
				return err
			}
		}
	}
	return nil
}
