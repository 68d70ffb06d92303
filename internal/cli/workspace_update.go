package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

// updateFlags are the changes `workspace update` makes, each through its
// own RPC with the revision it read.
type updateFlags struct {
	memory, disk        sizeFlag
	labels, annotations []string
	expireIn            time.Duration
	expireAction        string
	noExpire            bool
	volumeID, mountPath string
	releaseVolume       bool
	commandID           string
	network             networkFlags
	drainSeconds        uint32
}

func newWorkspaceUpdateCommand(out *outputFlag) *cobra.Command {
	var f updateFlags
	c := &cobra.Command{
		Use:   "update WORKSPACE_ID",
		Short: "Change a Workspace's memory, writable layer size, labels, annotations, expiration, Volume binding or network policy",
		Long: `update makes each change asked for with the revision it reads just before,
and prints the Workspace after the last one. Memory and the Volume binding
change while the Workspace holds no execution (stopped); a larger writable
layer (--disk) takes effect at the next start. Labels and annotations:
KEY=VALUE sets one, KEY- removes it; the others are kept.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			steps, err := f.steps()
			if err != nil {
				return err
			}
			got, err := client.GetWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: args[0]}))
			if err != nil {
				return err
			}
			w := got.Msg.GetWorkspace()
			for i, step := range steps {
				if w, err = step(cmd.Context(), client, w, commandIDFor(f.commandID, i)); err != nil {
					return err
				}
			}
			return out.print(cmd.OutOrStdout(), w, workspaceHeader, [][]string{workspaceRow(w)})
		},
	}
	fl := c.Flags()
	fl.Var(&f.memory, "memory", "guest memory from the next start (512Mi, 1G)")
	fl.Var(&f.disk, "disk", "grow the writable layer to this capacity (it only grows)")
	fl.StringArrayVar(&f.labels, "label", nil, "KEY=VALUE sets a label, KEY- removes it (repeatable)")
	fl.StringArrayVar(&f.annotations, "annotation", nil, "KEY=VALUE sets an annotation, KEY- removes it (repeatable)")
	fl.DurationVar(&f.expireIn, "expire-in", 0, "replace the expiration: this long from now")
	fl.StringVar(&f.expireAction, "expire-action", "", "what --expire-in does: stop (default) or delete")
	fl.BoolVar(&f.noExpire, "no-expire", false, "clear the expiration")
	fl.StringVar(&f.volumeID, "volume", "", "bind this Volume (the Workspace holds no execution)")
	fl.StringVar(&f.mountPath, "mount-path", "", "with --volume: where it is mounted (default /data)")
	fl.BoolVar(&f.releaseVolume, "release-volume", false, "release the bound Volume, which is kept")
	f.network.register(c, "replace the egress policy: deny-all or public-internet (with its --allow and --deny)")
	fl.Uint32Var(&f.drainSeconds, "drain-seconds", 0, "with --network: how long a connection the change moves keeps its old path (at most 3600)")
	fl.StringVar(&f.commandID, "command-id", "", "command_id of the first change (the others get it with -2, -3, ...)")
	return c
}

// commandIDFor is the command_id of the i-th change.
func commandIDFor(given string, i int) string {
	if given == "" || i == 0 {
		return given
	}
	return fmt.Sprintf("%s-%d", given, i+1)
}

// updateStep makes one change to w and returns the Workspace after it.
type updateStep func(ctx context.Context, c ctrlv1connect.WorkspaceServiceClient, w *ctrlv1.Workspace, commandID string) (*ctrlv1.Workspace, error)

func (f *updateFlags) steps() ([]updateStep, error) {
	var steps []updateStep
	if f.memory != 0 {
		steps = append(steps, func(ctx context.Context, c ctrlv1connect.WorkspaceServiceClient, w *ctrlv1.Workspace, id string) (*ctrlv1.Workspace, error) {
			res, err := c.UpdateWorkspaceMemory(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceMemoryRequest{
				Command: newCommandMetadata(id), WorkspaceId: w.GetWorkspaceId(),
				ExpectedResourcesRevision: w.GetSpec().GetResourcesRevision(), MemoryBytes: uint64(f.memory),
			}))
			return workspaceOf(res, err)
		})
	}
	if f.disk != 0 {
		steps = append(steps, func(ctx context.Context, c ctrlv1connect.WorkspaceServiceClient, w *ctrlv1.Workspace, id string) (*ctrlv1.Workspace, error) {
			res, err := c.ResizeWorkspaceWritableLayer(ctx, connect.NewRequest(&ctrlv1.ResizeWorkspaceWritableLayerRequest{
				Command: newCommandMetadata(id), WorkspaceId: w.GetWorkspaceId(),
				ExpectedResourcesRevision: w.GetSpec().GetResourcesRevision(), CapacityBytes: uint64(f.disk),
			}))
			return workspaceOf(res, err)
		})
	}
	labels, err := mapEdits("--label", f.labels)
	if err != nil {
		return nil, err
	}
	if labels != nil {
		steps = append(steps, func(ctx context.Context, c ctrlv1connect.WorkspaceServiceClient, w *ctrlv1.Workspace, id string) (*ctrlv1.Workspace, error) {
			res, err := c.UpdateWorkspaceLabels(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceLabelsRequest{
				Command: newCommandMetadata(id), WorkspaceId: w.GetWorkspaceId(),
				ExpectedLabelsRevision: w.GetLabelsRevision(), Labels: labels(w.GetLabels()),
			}))
			return workspaceOf(res, err)
		})
	}
	annotations, err := mapEdits("--annotation", f.annotations)
	if err != nil {
		return nil, err
	}
	if annotations != nil {
		steps = append(steps, func(ctx context.Context, c ctrlv1connect.WorkspaceServiceClient, w *ctrlv1.Workspace, id string) (*ctrlv1.Workspace, error) {
			res, err := c.UpdateWorkspaceAnnotations(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceAnnotationsRequest{
				Command: newCommandMetadata(id), WorkspaceId: w.GetWorkspaceId(),
				ExpectedAnnotationsRevision: w.GetAnnotationsRevision(), Annotations: annotations(w.GetAnnotations()),
			}))
			return workspaceOf(res, err)
		})
	}
	expiration, err := f.expiration()
	if err != nil {
		return nil, err
	}
	if expiration != nil {
		steps = append(steps, func(ctx context.Context, c ctrlv1connect.WorkspaceServiceClient, w *ctrlv1.Workspace, id string) (*ctrlv1.Workspace, error) {
			res, err := c.UpdateWorkspaceExpiration(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceExpirationRequest{
				Command: newCommandMetadata(id), WorkspaceId: w.GetWorkspaceId(),
				ExpectedExpirationRevision: w.GetExpiration().GetRevision(), Change: expiration,
			}))
			return workspaceOf(res, err)
		})
	}
	binding, err := f.binding()
	if err != nil {
		return nil, err
	}
	if binding != nil {
		steps = append(steps, func(ctx context.Context, c ctrlv1connect.WorkspaceServiceClient, w *ctrlv1.Workspace, id string) (*ctrlv1.Workspace, error) {
			res, err := c.UpdateWorkspaceVolumeBinding(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceVolumeBindingRequest{
				Command: newCommandMetadata(id), WorkspaceId: w.GetWorkspaceId(),
				ExpectedBindingRevision: w.GetSpec().GetBindingRevision(), Volume: binding,
			}))
			return workspaceOf(res, err)
		})
	}
	network, err := f.network.policy()
	if err != nil {
		return nil, err
	}
	if network != nil {
		steps = append(steps, func(ctx context.Context, c ctrlv1connect.WorkspaceServiceClient, w *ctrlv1.Workspace, id string) (*ctrlv1.Workspace, error) {
			res, err := c.UpdateWorkspaceNetworkPolicy(ctx, connect.NewRequest(&ctrlv1.UpdateWorkspaceNetworkPolicyRequest{
				Command: newCommandMetadata(id), WorkspaceId: w.GetWorkspaceId(),
				ExpectedRevision: w.GetSpec().GetNetworkPolicy().GetRevision(), NetworkPolicy: network, DrainSeconds: f.drainSeconds,
			}))
			return workspaceOf(res, err)
		})
	}
	if len(steps) == 0 {
		return nil, errors.New("nothing to change: give at least one of --memory, --disk, --label, --annotation, --expire-in, --no-expire, --volume, --release-volume, --network")
	}
	return steps, nil
}

func (f *updateFlags) expiration() (*ctrlv1.WorkspaceExpirationChange, error) {
	if f.noExpire {
		if f.expireIn != 0 || f.expireAction != "" {
			return nil, errors.New("--no-expire takes neither --expire-in nor --expire-action")
		}
		return &ctrlv1.WorkspaceExpirationChange{Change: &ctrlv1.WorkspaceExpirationChange_Clear{Clear: true}}, nil
	}
	p, err := expirationPolicy(f.expireIn, f.expireAction)
	if p == nil || err != nil {
		return nil, err
	}
	return &ctrlv1.WorkspaceExpirationChange{Change: &ctrlv1.WorkspaceExpirationChange_Set{Set: p}}, nil
}

func (f *updateFlags) binding() (*ctrlv1.WorkspaceVolumeBinding, error) {
	switch {
	case f.releaseVolume && (f.volumeID != "" || f.mountPath != ""):
		return nil, errors.New("--release-volume takes neither --volume nor --mount-path")
	case f.releaseVolume:
		return &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}, nil
	case f.volumeID != "":
		return &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: f.volumeID, MountPath: f.mountPath}, nil
	case f.mountPath != "":
		return nil, errors.New("--mount-path goes with --volume")
	}
	return nil, nil
}

// mapEdits reads KEY=VALUE and KEY- edits into what they make of a map;
// nil when there are none.
func mapEdits(flag string, edits []string) (func(map[string]string) map[string]string, error) {
	if len(edits) == 0 {
		return nil, nil
	}
	set, remove := map[string]string{}, []string{}
	for _, e := range edits {
		if k, v, ok := strings.Cut(e, "="); ok && k != "" {
			set[k] = v
		} else if k, ok := strings.CutSuffix(e, "-"); ok && k != "" {
			remove = append(remove, k)
		} else {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE or KEY-", flag, e)
		}
	}
	return func(old map[string]string) map[string]string {
		m := maps.Clone(old)
		if m == nil {
			m = map[string]string{}
		}
		maps.Copy(m, set)
		for _, k := range remove {
			delete(m, k)
		}
		return m
	}, nil
}

// workspaceOf is the Workspace a response carries.
func workspaceOf[T any, PT interface {
	*T
	GetWorkspace() *ctrlv1.Workspace
}](res *connect.Response[T], err error) (*ctrlv1.Workspace, error) {
	if err != nil {
		return nil, err
	}
	return PT(res.Msg).GetWorkspace(), nil
}
