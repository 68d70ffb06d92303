package catalog

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/page"
	"github.com/kibotos/kibotos/internal/store"
)

// admit runs a command: the replay of commandID, or fn's effect on target
// with result, in one transaction. Only a build is long (left for a worker).
func admit[R proto.Message](ctx context.Context, c *Catalog, commandID, kind string, req proto.Message, fn func(tx *store.Tx) (string, R, error)) (R, error) {
	var res R
	err := command.Do(ctx, c.store, func(tx *store.Tx) error {
		out, err := command.Admit(tx, c.now(), commandID, kind, req, func() (command.Effect, error) {
			target, r, err := fn(tx)
			return command.Effect{Target: target, Result: r, Long: kind == kindCreateRevision}, err
		})
		if err == nil {
			res = out.(R)
		}
		return err
	})
	return res, err
}

// CreatePlatformKey creates a key with no Launch; the first key becomes the
// deployment default.
func (c *Catalog) CreatePlatformKey(ctx context.Context, req *operatorv1.CreatePlatformKeyRequest) (*operatorv1.CreatePlatformKeyResponse, error) {
	if err := checkCreate(req.GetCommand(), "platform_key", req.GetPlatformKey(), keyPattern, keyRule, req.GetDescription()); err != nil {
		return nil, err
	}
	return admit(ctx, c, req.GetCommand().GetCommandId(), "CreatePlatformKey", req, func(tx *store.Tx) (string, *operatorv1.CreatePlatformKeyResponse, error) {
		k, err := c.createKey(tx, req.GetPlatformKey(), req.GetDescription())
		return k.GetPlatformKey(), &operatorv1.CreatePlatformKeyResponse{PlatformKey: k}, err
	})
}

func (c *Catalog) createKey(tx *store.Tx, name, description string) (*operatorv1.PlatformKey, error) {
	if _, err := tx.GetPlatformKey(name, true); err == nil {
		return nil, conflict("platform_key", "platform key %q already exists", name)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	first, err := tx.ListPlatformKeys("", 1)
	if err != nil {
		return nil, err
	}
	now := timestamppb.New(c.now())
	k := &operatorv1.PlatformKey{PlatformKey: name, Description: description, Version: 1, CreatedAt: now, UpdatedAt: now}
	if err := tx.PutPlatformKey(k); err != nil {
		return nil, err
	}
	if len(first) == 0 {
		k.DeploymentDefault = true
		return k, tx.SetDeploymentDefaultPlatformKey(name)
	}
	return k, nil
}

func getKey(tx *store.Tx, name string, lock bool) (*operatorv1.PlatformKey, error) {
	k, err := tx.GetPlatformKey(name, lock)
	return k, notFound(err, "platform key", name)
}

// GetPlatformKey reads one key.
func (c *Catalog) GetPlatformKey(ctx context.Context, req *operatorv1.GetPlatformKeyRequest) (*operatorv1.GetPlatformKeyResponse, error) {
	var k *operatorv1.PlatformKey
	err := c.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		k, err = getKey(tx, req.GetPlatformKey(), false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &operatorv1.GetPlatformKeyResponse{PlatformKey: k}, nil
}

// ListPlatformKeys pages the keys by name.
func (c *Catalog) ListPlatformKeys(ctx context.Context, req *operatorv1.ListPlatformKeysRequest) (*operatorv1.ListPlatformKeysResponse, error) {
	after, err := page.After(req.GetPageToken(), "platform-keys")
	if err != nil {
		return nil, err
	}
	res := &operatorv1.ListPlatformKeysResponse{}
	err = c.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		res.PlatformKeys, res.NextPageToken, err = page.Collect(page.Size(req.GetPageSize()), after, "platform-keys",
			(*operatorv1.PlatformKey).GetPlatformKey, func(*operatorv1.PlatformKey) bool { return true }, tx.ListPlatformKeys)
		return err
	})
	return res, err
}

// SetDeploymentDefaultPlatformKey selects the key new Workspaces are put on.
func (c *Catalog) SetDeploymentDefaultPlatformKey(ctx context.Context, req *operatorv1.SetDeploymentDefaultPlatformKeyRequest) (*operatorv1.SetDeploymentDefaultPlatformKeyResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	return admit(ctx, c, req.GetCommand().GetCommandId(), "SetDeploymentDefaultPlatformKey", req, func(tx *store.Tx) (string, *operatorv1.SetDeploymentDefaultPlatformKeyResponse, error) {
		k, err := getKey(tx, req.GetPlatformKey(), true)
		if err != nil {
			return "", nil, err
		}
		if k.GetDefaultLaunchRef() == "" {
			return "", nil, apierr.Precondition(&ctrlv1.ErrorDetail{Field: "platform_key"}, "platform key %q has no Launch yet", k.GetPlatformKey())
		}
		k.DeploymentDefault = true
		return k.GetPlatformKey(), &operatorv1.SetDeploymentDefaultPlatformKeyResponse{PlatformKey: k}, tx.SetDeploymentDefaultPlatformKey(k.GetPlatformKey())
	})
}

// CreateLaunch appends a Launch to a key; the first becomes its default.
func (c *Catalog) CreateLaunch(ctx context.Context, req *operatorv1.CreateLaunchRequest) (*operatorv1.CreateLaunchResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	if err := checkLaunchSpec(req.GetSpec()); err != nil {
		return nil, err
	}
	if err := checkDescription("description", req.GetDescription()); err != nil {
		return nil, err
	}
	return admit(ctx, c, req.GetCommand().GetCommandId(), "CreateLaunch", req, func(tx *store.Tx) (string, *operatorv1.CreateLaunchResponse, error) {
		l, err := c.createLaunch(tx, req)
		return l.GetLaunchRef(), &operatorv1.CreateLaunchResponse{Launch: l}, err
	})
}

func (c *Catalog) createLaunch(tx *store.Tx, req *operatorv1.CreateLaunchRequest) (*operatorv1.Launch, error) {
	k, err := getKey(tx, req.GetPlatformKey(), true)
	if err != nil {
		return nil, err
	}
	spec := proto.Clone(req.GetSpec()).(*operatorv1.LaunchSpec)
	if spec.GetArchitecture() == "" {
		spec.Architecture = runtime.GOARCH
	}
	for field, a := range map[string]*operatorv1.PlatformArtifact{"spec.kernel": spec.GetKernel(), "spec.initramfs": spec.GetInitramfs()} {
		if a == nil {
			continue
		}
		size, err := tx.UploadSize(store.UploadPlatformArtifact, a.GetDigest())
		if errors.Is(err, store.ErrNotFound) {
			return nil, missing(field+".digest", "%s.digest: no platform artifact %s was uploaded", field, a.GetDigest())
		} else if err != nil {
			return nil, err
		}
		a.SizeBytes = size
	}
	k.LaunchCount++
	l := &operatorv1.Launch{
		LaunchRef: "launch-" + randomHex(8), PlatformKey: k.GetPlatformKey(), Revision: uint64(k.GetLaunchCount()),
		Spec: spec, Description: req.GetDescription(), CreatedAt: timestamppb.New(c.now()),
	}
	if err := tx.InsertLaunch(l); err != nil {
		return nil, err
	}
	if k.GetDefaultLaunchRef() == "" || req.GetSetDefault() {
		c.moveDefault(k, l.GetLaunchRef())
	}
	l.IsDefault = k.GetDefaultLaunchRef() == l.GetLaunchRef()
	return l, tx.PutPlatformKey(k)
}

// moveDefault makes ref the key's default; the version advances only when
// the default changes.
func (c *Catalog) moveDefault(k *operatorv1.PlatformKey, ref string) {
	if k.GetDefaultLaunchRef() == ref {
		return
	}
	k.DefaultLaunchRef = ref
	k.Version++
	k.UpdatedAt = timestamppb.New(c.now())
}

// checkLaunchSpec validates what a request may say of a Launch.
func checkLaunchSpec(s *operatorv1.LaunchSpec) error {
	if s == nil {
		return apierr.Invalid("spec", "is required")
	}
	vm := true
	switch s.GetVmm() {
	case operatorv1.VmmKind_VMM_KIND_QEMU, operatorv1.VmmKind_VMM_KIND_FIRECRACKER, operatorv1.VmmKind_VMM_KIND_CLOUD_HYPERVISOR:
	case operatorv1.VmmKind_VMM_KIND_GVISOR, operatorv1.VmmKind_VMM_KIND_SIM:
		vm = false
	default:
		return apierr.Invalid("spec.vmm", "must name a VMM kind")
	}
	if a := s.GetArchitecture(); a != "" && !archPattern.MatchString(a) {
		return apierr.Invalid("spec.architecture", "must be an architecture in OCI terms, such as amd64 or arm64")
	}
	for field, a := range map[string]*operatorv1.PlatformArtifact{"spec.kernel": s.GetKernel(), "spec.initramfs": s.GetInitramfs()} {
		switch {
		case vm && a == nil:
			return apierr.Invalid(field, "is required for %s", s.GetVmm())
		case !vm && a != nil:
			return apierr.Invalid(field, "must be unset for %s, which boots no kernel of its own", s.GetVmm())
		case a != nil && !digestPattern.MatchString(a.GetDigest()):
			return apierr.Invalid(field+".digest", "must be \"sha256:\" and 64 lowercase hex digits")
		}
	}
	for _, arg := range strings.Fields(s.GetKernelArgs()) {
		for _, reserved := range []string{"root=", "init=", "console="} {
			if strings.HasPrefix(arg, reserved) {
				return apierr.Invalid("spec.kernel_args", "must not set %s: the provider sets it", reserved)
			}
		}
	}
	for k := range s.GetMachine() {
		if k == "" {
			return apierr.Invalid("spec.machine", "keys must not be empty")
		}
	}
	for _, cap := range s.GetRequiredCapabilities() {
		if cap == "" {
			return apierr.Invalid("spec.required_capabilities", "must not hold an empty capability")
		}
	}
	if d := s.GetBootTimeout(); d != nil && (d.CheckValid() != nil || d.AsDuration() < 0) {
		return apierr.Invalid("spec.boot_timeout", "must be a duration of zero or more")
	}
	return nil
}

// launch reads a Launch with is_default as its key says now.
func launch(tx *store.Tx, ref string) (*operatorv1.Launch, error) {
	l, err := tx.CatalogLaunch(ref)
	if err != nil {
		return nil, notFound(err, "launch", ref)
	}
	k, err := tx.GetPlatformKey(l.GetPlatformKey(), false)
	if err != nil {
		return nil, err
	}
	l.IsDefault = k.GetDefaultLaunchRef() == ref
	return l, nil
}

// GetLaunch reads one Launch.
func (c *Catalog) GetLaunch(ctx context.Context, req *operatorv1.GetLaunchRequest) (*operatorv1.GetLaunchResponse, error) {
	var l *operatorv1.Launch
	err := c.store.Tx(ctx, func(tx *store.Tx) error {
		var err error
		l, err = launch(tx, req.GetLaunchRef())
		return err
	})
	if err != nil {
		return nil, err
	}
	return &operatorv1.GetLaunchResponse{Launch: l}, nil
}

// ListLaunches pages a key's Launches, newest first.
func (c *Catalog) ListLaunches(ctx context.Context, req *operatorv1.ListLaunchesRequest) (*operatorv1.ListLaunchesResponse, error) {
	filter := "launches|" + req.GetPlatformKey()
	after, err := page.After(req.GetPageToken(), filter)
	if err != nil {
		return nil, err
	}
	res := &operatorv1.ListLaunchesResponse{}
	err = c.store.Tx(ctx, func(tx *store.Tx) error {
		k, err := getKey(tx, req.GetPlatformKey(), false)
		if err != nil {
			return err
		}
		res.Launches, res.NextPageToken, err = page.Collect(page.Size(req.GetPageSize()), after, filter,
			func(l *operatorv1.Launch) string { return strconv.FormatUint(l.GetRevision(), 10) },
			func(l *operatorv1.Launch) bool {
				l.IsDefault = l.GetLaunchRef() == k.GetDefaultLaunchRef()
				return true
			},
			func(after string, n int) ([]*operatorv1.Launch, error) {
				before, _ := strconv.ParseUint(after, 10, 64)
				return tx.ListLaunches(k.GetPlatformKey(), before, n)
			})
		return err
	})
	return res, err
}

// SetDefaultLaunch makes one of a key's Launches its default.
func (c *Catalog) SetDefaultLaunch(ctx context.Context, req *operatorv1.SetDefaultLaunchRequest) (*operatorv1.SetDefaultLaunchResponse, error) {
	if err := command.ValidateID("command.command_id", req.GetCommand()); err != nil {
		return nil, err
	}
	return admit(ctx, c, req.GetCommand().GetCommandId(), "SetDefaultLaunch", req, func(tx *store.Tx) (string, *operatorv1.SetDefaultLaunchResponse, error) {
		k, err := getKey(tx, req.GetPlatformKey(), true)
		if err != nil {
			return "", nil, err
		}
		if v := req.GetExpectedVersion(); v != 0 && v != k.GetVersion() {
			return "", nil, apierr.Precondition(&ctrlv1.ErrorDetail{Field: "expected_version"},
				"platform key %q is at version %d, not %d: read it again", k.GetPlatformKey(), k.GetVersion(), v)
		}
		l, err := tx.CatalogLaunch(req.GetLaunchRef())
		if err != nil {
			return "", nil, notFound(err, "launch", req.GetLaunchRef())
		}
		if l.GetPlatformKey() != k.GetPlatformKey() {
			return "", nil, apierr.Invalid("launch_ref", "is a Launch of platform key %q, not %q", l.GetPlatformKey(), k.GetPlatformKey())
		}
		c.moveDefault(k, l.GetLaunchRef())
		return k.GetPlatformKey(), &operatorv1.SetDefaultLaunchResponse{PlatformKey: k}, tx.PutPlatformKey(k)
	})
}
