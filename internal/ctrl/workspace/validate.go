package workspace

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/capability"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

const (
	mib = 1 << 20
	// MinMemory is the least guest RAM a Workspace may ask for.
	MinMemory = 128 * mib
	// DefaultMountPath is where a Volume is mounted when the request names
	// no path.
	DefaultMountPath = "/data"
	maxCPUMillis     = 64000
	// maxMemory bounds guest RAM far above any host (the reference judges
	// the upper bound at placement, against capacity), so that placement's
	// sums in signed 64-bit columns cannot overflow.
	maxMemory = 1 << 50
	maxLayer  = 16 << 40
)

// checkMemory validates guest RAM: a whole number of MiB, at least 128 MiB,
// so the requested value is exactly what the execution receives.
func checkMemory(field string, m uint64) error {
	switch {
	case m == 0:
		return apierr.Invalid(field, "is required: guest RAM in bytes, a whole number of MiB, at least 128 MiB")
	case m%mib != 0:
		return apierr.Invalid(field, "must be a whole number of MiB (a multiple of 1048576); %d is not", m)
	case m < MinMemory:
		return apierr.Invalid(field, "must be at least 128 MiB (134217728); %d is less", m)
	case m > maxMemory:
		return apierr.Invalid(field, "must be at most 1 PiB (no host has more; a request within it is judged against capacity when placed)")
	}
	return nil
}

// checkLayer validates a writable layer capacity: zero delegates to the
// storage profile, anything else is a whole number of MiB.
func checkLayer(field string, c uint64) error {
	switch {
	case c%mib != 0:
		return apierr.Invalid(field, "must be a whole number of MiB (a multiple of 1048576); %d is not", c)
	case c > maxLayer:
		return apierr.Invalid(field, "must be at most 16 TiB")
	}
	return nil
}

func checkResources(field string, r *ctrlv1.ResourceRequest) error {
	if r.GetCpuMillis() > maxCPUMillis {
		return apierr.Invalid(field+".cpu_millis", "must be at most %d", maxCPUMillis)
	}
	if err := checkMemory(field+".memory_bytes", r.GetMemoryBytes()); err != nil {
		return err
	}
	return checkLayer(field+".writable_layer_capacity_bytes", r.GetWritableLayerCapacityBytes())
}

// reservedPaths cannot hold a Volume: they are the NONE tier or the
// kernel's.
var reservedPaths = []string{"/tmp", "/run", "/proc", "/sys", "/dev"}

// checkMountPath validates an absolute, clean guest path for a Volume.
func checkMountPath(field, p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return apierr.Invalid(field, "must be an absolute guest path")
	case path.Clean(p) != p:
		return apierr.Invalid(field, "must be a clean path (%q)", path.Clean(p))
	case p == "/":
		return apierr.Invalid(field, "cannot be / : the root is the writable layer (BEST_EFFORT)")
	case len(p) > 4096 || strings.ContainsRune(p, 0):
		return apierr.Invalid(field, "is not a usable path")
	}
	for _, r := range reservedPaths {
		if p == r || strings.HasPrefix(p, r+"/") {
			return apierr.Invalid(field, "cannot be under %s", r)
		}
	}
	return nil
}

// normalizeBinding checks a requested binding and fills its defaults: the
// stored mode, mount path and delete_with_workspace. allowNew is false for
// UpdateWorkspaceVolumeBinding, which accepts only BOUND and NONE.
func normalizeBinding(field string, b *ctrlv1.WorkspaceVolumeBinding, allowNew bool) (*ctrlv1.WorkspaceVolumeBinding, error) {
	out := &ctrlv1.WorkspaceVolumeBinding{Mode: b.GetMode(), VolumeId: b.GetVolumeId(), MountPath: b.GetMountPath(), NewVolume: b.GetNewVolume()}
	var deleteWith *bool
	if b != nil {
		deleteWith = b.DeleteWithWorkspace
	}
	if out.Mode == ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_UNSPECIFIED && allowNew {
		out.Mode = ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW
	}
	switch out.Mode {
	case ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NEW:
		if !allowNew {
			return nil, apierr.Invalid(field+".mode", "NEW is accepted only by CreateWorkspace; bind an existing Volume (BOUND) or none (NONE)")
		}
		if out.VolumeId != "" {
			return nil, apierr.Invalid(field+".volume_id", "must be empty for NEW")
		}
		out.DeleteWithWorkspace = boolOr(deleteWith, true)
	case ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_BOUND:
		if out.VolumeId == "" {
			return nil, apierr.Invalid(field+".volume_id", "is required for BOUND")
		}
		if out.NewVolume != nil {
			return nil, apierr.Invalid(field+".new_volume", "must be unset for BOUND")
		}
		out.DeleteWithWorkspace = boolOr(deleteWith, false)
	case ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE:
		switch {
		case out.VolumeId != "":
			return nil, apierr.Invalid(field+".volume_id", "must be empty for NONE")
		case out.MountPath != "":
			return nil, apierr.Invalid(field+".mount_path", "must be empty for NONE")
		case deleteWith != nil:
			return nil, apierr.Invalid(field+".delete_with_workspace", "must be unset for NONE")
		case out.NewVolume != nil:
			return nil, apierr.Invalid(field+".new_volume", "must be unset for NONE")
		}
		return out, nil
	default:
		return nil, apierr.Invalid(field+".mode", "is not a volume mode")
	}
	if out.MountPath == "" {
		out.MountPath = DefaultMountPath
	}
	if err := checkMountPath(field+".mount_path", out.MountPath); err != nil {
		return nil, err
	}
	return out, nil
}

func boolOr(b *bool, def bool) *bool {
	if b != nil {
		v := *b
		return &v
	}
	return &def
}

// checkExpiration validates a policy at now: STOP or DELETE at a deadline
// still ahead.
func checkExpiration(field string, p *ctrlv1.WorkspaceExpirationPolicy, now time.Time) error {
	switch p.GetAction() {
	case ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_STOP, ctrlv1.WorkspaceExpirationAction_WORKSPACE_EXPIRATION_ACTION_DELETE:
	default:
		return apierr.Invalid(field+".action", "must be STOP or DELETE")
	}
	if p.GetDeadline() == nil {
		return apierr.Invalid(field+".deadline", "is required")
	}
	if err := p.GetDeadline().CheckValid(); err != nil {
		return apierr.Invalid(field+".deadline", "%v", err)
	}
	if !p.GetDeadline().AsTime().After(now) {
		return apierr.Invalid(field+".deadline", "is not in the future (%s)", p.GetDeadline().AsTime().Format(time.RFC3339))
	}
	return nil
}

// checkTemplate checks the template, then the revision: in that order, so
// that a request with both wrong always names the same field.
func checkTemplate(field string, s *ctrlv1.TemplateSelector) error {
	for _, f := range []struct{ name, v string }{{"template", s.GetTemplate()}, {"revision", s.GetRevision()}} {
		if len(f.v) > 253 || strings.ContainsAny(f.v, " /\x00") {
			return apierr.Invalid(fmt.Sprintf("%s.%s", field, f.name), "is not a template name")
		}
	}
	return nil
}

// checkCapabilities refuses a capability outside the one vocabulary
// (internal/capability): no node could ever offer it. A known one nobody
// offers is admitted and fails placement.
func checkCapabilities(field string, c *ctrlv1.CapabilityRequirements) error {
	for i, name := range c.GetRequired() {
		if !capability.Known(name) {
			return apierr.Invalid(fmt.Sprintf("%s.required[%d]", field, i), "%q is not a capability; known: %s",
				name, strings.Join(capability.Vocabulary(), ", "))
		}
	}
	return nil
}

// platformKeyPattern is the catalog's rule for PlatformKey names
// (internal/ctrl/catalog, keyPattern).
var platformKeyPattern = regexp.MustCompile(`^[a-z][a-z0-9.-]{0,62}$`)

// checkPlatformKey validates a requested PlatformKey's name; empty
// selects the deployment's default.
func checkPlatformKey(field, key string) error {
	if key != "" && !platformKeyPattern.MatchString(key) {
		return apierr.Invalid(field, "%q is not a PlatformKey name (1 to 63 characters of lowercase letters, digits, '.' and '-', starting with a letter)", key)
	}
	return nil
}
