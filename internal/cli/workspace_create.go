package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
)

// defaultResources is what `workspace create` asks for without
// --memory, --cpu and --disk, and what a restore of an archive that
// carries no resources (a Volume's) starts from.
var defaultResources = &ctrlv1.ResourceRequest{MemoryBytes: 512 * mib, CpuMillis: 1000}

// specFlags are the WorkspaceCreateSpec fields `workspace create` and
// `workspace restore` both set.
type specFlags struct {
	platform            string
	memory, disk        sizeFlag
	cpuMillis           uint32
	labels, annotations map[string]string
	expireIn            time.Duration
	expireAction        string
	capabilities        []string
	network             networkFlags
}

// register adds the flags. For a restore (archived), a flag not given
// leaves the archive's value: the flags have no defaults of their own.
func (f *specFlags) register(c *cobra.Command, archived bool) {
	var cpu uint32
	layer, kept, mode := "the storage profile's", "", "deny-all (the default) or public-internet"
	if archived {
		layer, kept, mode = "the archive's", " (default: the archive's)", "deny-all or public-internet (default: the archive's)"
	} else {
		f.memory, cpu = sizeFlag(defaultResources.GetMemoryBytes()), defaultResources.GetCpuMillis()
	}
	fl := c.Flags()
	fl.StringVar(&f.platform, "platform", "", "platform key (default: the deployment's default)")
	fl.Var(&f.memory, "memory", "guest memory (512Mi, 1G; a bare number is MiB; at least 128Mi)"+kept)
	fl.Uint32Var(&f.cpuMillis, "cpu", cpu, "CPU in thousandths of a vCPU"+kept)
	fl.Var(&f.disk, "disk", "capacity of the writable layer, the root filesystem's changes (default: "+layer+")")
	fl.StringToStringVar(&f.labels, "label", nil, "label KEY=VALUE (repeatable)")
	fl.StringToStringVar(&f.annotations, "annotation", nil, "annotation KEY=VALUE (repeatable)")
	fl.DurationVar(&f.expireIn, "expire-in", 0, "stop or delete the Workspace this long from now (2h, 30m), on ctrl's clock")
	fl.StringVar(&f.expireAction, "expire-action", "", "what --expire-in does: stop (default) or delete")
	fl.StringSliceVar(&f.capabilities, "require", nil, "node capabilities the Workspace needs (provider.qemu, ...)"+kept)
	f.network.register(c, "egress policy: "+mode)
}

// spec is the WorkspaceCreateSpec the flags ask for, with resources;
// flags that contradict each other are an error before anything is sent.
// A field whose flags are not given is left unset.
func (f *specFlags) spec(resources *ctrlv1.ResourceRequest) (*ctrlv1.WorkspaceCreateSpec, error) {
	expiration, err := expirationPolicy(f.expireIn, f.expireAction)
	if err != nil {
		return nil, err
	}
	network, err := f.network.policy()
	if err != nil {
		return nil, err
	}
	spec := &ctrlv1.WorkspaceCreateSpec{
		NetworkPolicy: network, Resources: resources, PlatformKey: f.platform, Expiration: expiration,
		Labels: f.labels, Annotations: f.annotations,
	}
	if len(f.capabilities) > 0 {
		spec.Capabilities = &ctrlv1.CapabilityRequirements{Required: f.capabilities}
	}
	return spec, nil
}

// resources is base with each of --memory, --cpu and --disk that given
// says was given in place of its field.
func (f *specFlags) resources(base *ctrlv1.ResourceRequest, given func(flag string) bool) *ctrlv1.ResourceRequest {
	r := &ctrlv1.ResourceRequest{}
	if base != nil {
		r = proto.CloneOf(base)
	}
	if given("memory") {
		r.MemoryBytes = uint64(f.memory)
	}
	if given("cpu") {
		r.CpuMillis = f.cpuMillis
	}
	if given("disk") {
		r.WritableLayerCapacityBytes = uint64(f.disk)
	}
	return r
}

// createFlags are the CreateWorkspace fields a person sets.
type createFlags struct {
	specFlags
	template            string
	volumeSize          sizeFlag
	volumeID, mountPath string
	noVolume            bool
}

func (f *createFlags) register(c *cobra.Command) {
	f.specFlags.register(c, false)
	fl := c.Flags()
	fl.StringVar(&f.template, "template", "", "template NAME or NAME@REVISION (default: the deployment's default template, at its default revision)")
	fl.StringVar(&f.volumeID, "volume", "", "bind this existing Volume (kept when the Workspace is deleted) instead of creating one")
	fl.Var(&f.volumeSize, "volume-size", "capacity of the new Volume (default: the storage profile's)")
	fl.StringVar(&f.mountPath, "mount-path", "", "guest path the Volume is mounted at (default /data)")
	fl.BoolVar(&f.noVolume, "no-volume", false, "create no Volume (nothing is promised to persist)")
}

// spec is the WorkspaceCreateSpec the flags ask for, every field set (a
// flag not given sends its default).
func (f *createFlags) spec() (*ctrlv1.WorkspaceCreateSpec, error) {
	volume, err := f.volume()
	if err != nil {
		return nil, err
	}
	spec, err := f.specFlags.spec(f.resources(nil, func(string) bool { return true }))
	if err != nil {
		return nil, err
	}
	spec.Template, spec.Volume = templateSelector(f.template), volume
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
