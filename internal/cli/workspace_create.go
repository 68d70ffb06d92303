package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// createFlags are the CreateWorkspace fields a person sets.
type createFlags struct {
	template, platform       string
	memory, disk, volumeSize sizeFlag
	cpuMillis                uint32
	volumeID, mountPath      string
	noVolume                 bool
	labels, annotations      map[string]string
	expireIn                 time.Duration
	expireAction             string
	capabilities             []string
	network                  networkFlags
}

func (f *createFlags) register(c *cobra.Command) {
	f.memory = 512 * mib
	fl := c.Flags()
	fl.StringVar(&f.template, "template", "", "template NAME or NAME@REVISION (default: the deployment's default template, at its default revision)")
	fl.StringVar(&f.platform, "platform", "", "platform key (default: the deployment's default)")
	fl.Var(&f.memory, "memory", "guest memory (512Mi, 1G; a bare number is MiB; at least 128Mi)")
	fl.Uint32Var(&f.cpuMillis, "cpu", 1000, "CPU in thousandths of a vCPU")
	fl.Var(&f.disk, "disk", "capacity of the writable layer, the root filesystem's changes (default: the storage profile's)")
	fl.StringVar(&f.volumeID, "volume", "", "bind this existing Volume (kept when the Workspace is deleted) instead of creating one")
	fl.Var(&f.volumeSize, "volume-size", "capacity of the new Volume (default: the storage profile's)")
	fl.StringVar(&f.mountPath, "mount-path", "", "guest path the Volume is mounted at (default /data)")
	fl.BoolVar(&f.noVolume, "no-volume", false, "create no Volume (nothing is promised to persist)")
	fl.StringToStringVar(&f.labels, "label", nil, "label KEY=VALUE (repeatable)")
	fl.StringToStringVar(&f.annotations, "annotation", nil, "annotation KEY=VALUE (repeatable)")
	fl.DurationVar(&f.expireIn, "expire-in", 0, "stop or delete the Workspace this long from now (2h, 30m), on ctrl's clock")
	fl.StringVar(&f.expireAction, "expire-action", "", "what --expire-in does: stop (default) or delete")
	fl.StringSliceVar(&f.capabilities, "require", nil, "node capabilities the Workspace needs (provider.qemu, ...)")
	f.network.register(c, "egress policy: deny-all (the default) or public-internet")
}

// spec is the WorkspaceCreateSpec the flags ask for; flags that contradict
// each other are an error before anything is sent.
func (f *createFlags) spec() (*ctrlv1.WorkspaceCreateSpec, error) {
	volume, err := f.volume()
	if err != nil {
		return nil, err
	}
	expiration, err := expirationPolicy(f.expireIn, f.expireAction)
	if err != nil {
		return nil, err
	}
	network, err := f.network.policy()
	if err != nil {
		return nil, err
	}
	spec := &ctrlv1.WorkspaceCreateSpec{
		NetworkPolicy: network,
		Template:      templateSelector(f.template),
		Resources: &ctrlv1.ResourceRequest{
			CpuMillis: f.cpuMillis, MemoryBytes: uint64(f.memory), WritableLayerCapacityBytes: uint64(f.disk),
		},
		Volume: volume, PlatformKey: f.platform, Expiration: expiration,
		Labels: f.labels, Annotations: f.annotations,
	}
	if len(f.capabilities) > 0 {
		spec.Capabilities = &ctrlv1.CapabilityRequirements{Required: f.capabilities}
	}
	return spec, nil
}

func (f *createFlags) volume() (*ctrlv1.WorkspaceVolumeBinding, error) {
	switch {
	case f.noVolume && (f.volumeID != "" || f.volumeSize != 0 || f.mountPath != ""):
		return nil, errors.New("--no-volume takes none of --volume, --volume-size, --mount-path")
	case f.noVolume:
		return &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE}, nil
	case f.volumeID != "" && f.volumeSize != 0:
		return nil, errors.New("--volume-size is the size of a new Volume: --volume binds one that has its size (volume resize grows it)")
	case f.volumeID != "":
		return &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND, VolumeId: f.volumeID, MountPath: f.mountPath}, nil
	case f.volumeSize != 0 || f.mountPath != "":
		return &ctrlv1.WorkspaceVolumeBinding{
			Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW, MountPath: f.mountPath,
			NewVolume: &ctrlv1.VolumeSpec{CapacityBytes: uint64(f.volumeSize)},
		}, nil
	}
	return nil, nil // a new Volume of the defaults
}

// templateSelector reads NAME, NAME@REVISION or "" (the defaults).
func templateSelector(s string) *ctrlv1.TemplateSelector {
	name, revision, _ := strings.Cut(s, "@")
	return &ctrlv1.TemplateSelector{Template: name, Revision: revision}
}

// expirationPolicy is --expire-in and --expire-action as a policy; nil
// when neither is given.
func expirationPolicy(in time.Duration, action string) (*ctrlv1.WorkspaceExpirationPolicy, error) {
	if in == 0 {
		if action != "" {
			return nil, errors.New("--expire-action needs --expire-in")
		}
		return nil, nil
	}
	if in < 0 {
		return nil, fmt.Errorf("--expire-in %s: want a time from now", in)
	}
	p := &ctrlv1.WorkspaceExpirationPolicy{Deadline: timestamppb.New(time.Now().Add(in))}
	switch action {
	case "", "stop":
		p.Action = ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP
	case "delete":
		p.Action = ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_DELETE
	default:
		return nil, fmt.Errorf("--expire-action %q: want stop or delete", action)
	}
	return p, nil
}
