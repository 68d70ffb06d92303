package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Where the guest mounts its storage while it builds the new root.
const (
	RootMountPoint  = "/mnt/root"  // the template root, read-only
	LayerMountPoint = "/mnt/layer" // the writable layer; upper/ and work/ inside
	NewRoot         = "/newroot"   // the overlay the guest changes root into
)

// Mount is one mount(2) call.
type Mount struct {
	Source string
	Target string
	FSType string
	Flags  uintptr
	Data   string
	// Mkdir lists directories made (mkdir -p) before mounting, besides
	// Target itself.
	Mkdir []string
	// Storage marks a mount holding data (root, layer, overlay, Volume): at
	// power-off it is unmounted, or at least remounted read-only. Other
	// mounts (pseudo and memory file systems) are detached.
	Storage bool
}

func (m Mount) String() string {
	s := fmt.Sprintf("%s on %s type %s", m.Source, m.Target, m.FSType)
	if m.Flags&unix.MS_RDONLY != 0 {
		s += " (ro)"
	}
	return s
}

const pseudoFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// PseudoMounts are the kernel file systems PID 1 mounts first: devtmpfs
// (with devpts and a /dev/shm), proc and sysfs.
func PseudoMounts() []Mount {
	return []Mount{
		{Source: "devtmpfs", Target: "/dev", FSType: "devtmpfs", Flags: unix.MS_NOSUID, Data: "mode=0755"},
		{Source: "devpts", Target: "/dev/pts", FSType: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "mode=0620,ptmxmode=0666,gid=5"},
		{Source: "shm", Target: "/dev/shm", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777"},
		{Source: "proc", Target: "/proc", FSType: "proc", Flags: pseudoFlags},
		{Source: "sysfs", Target: "/sys", FSType: "sysfs", Flags: pseudoFlags},
	}
}

// MovedIntoNewRoot are the mounts moved (MS_MOVE) from the initramfs into
// the new root before changing into it.
var MovedIntoNewRoot = []string{"/dev", "/proc", "/sys"}

// StorageMounts is how the guest mounts its storage for cfg, in order.
// With a root and a layer: the root read-only, the layer, an overlay of
// both at NewRoot, tmpfs at /tmp and /run inside it, then the Volume at its
// path inside it (after the tmpfs mounts, so that no tmpfs hides it).
// Without them the guest stays in its initramfs and only the Volume, if
// any, is mounted, at its path there.
func StorageMounts(cfg Config) []Mount {
	var ms []Mount
	prefix := ""
	if cfg.SwitchesRoot() {
		upper, work := filepath.Join(LayerMountPoint, "upper"), filepath.Join(LayerMountPoint, "work")
		ms = append(ms,
			Mount{Source: cfg.Root, Target: RootMountPoint, FSType: cfg.RootFSType, Flags: unix.MS_RDONLY, Storage: true},
			Mount{Source: cfg.Layer, Target: LayerMountPoint, FSType: "ext4", Flags: unix.MS_NOATIME, Storage: true},
			Mount{Source: "overlay", Target: NewRoot, FSType: "overlay",
				Data:    "lowerdir=" + RootMountPoint + ",upperdir=" + upper + ",workdir=" + work,
				Mkdir:   []string{upper, work},
				Storage: true},
			Mount{Source: "tmpfs", Target: NewRoot + "/tmp", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777"},
			Mount{Source: "tmpfs", Target: NewRoot + "/run", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=0755"},
		)
		prefix = NewRoot
	}
	if cfg.Volume != nil {
		ms = append(ms, Mount{Source: cfg.Volume.Device, Target: prefix + cfg.Volume.Path, FSType: "ext4", Flags: unix.MS_NOATIME, Storage: true})
	}
	return ms
}

// StorageDevices are the block devices StorageMounts needs.
func StorageDevices(cfg Config) []string {
	var devs []string
	for _, m := range StorageMounts(cfg) {
		if strings.HasPrefix(m.Source, "/") {
			devs = append(devs, m.Source)
		}
	}
	return devs
}

// apply makes m's directories and mounts it.
func (m Mount) apply() error {
	for _, d := range append(m.Mkdir, m.Target) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("mount %s: %w", m, err)
		}
	}
	if err := unix.Mount(m.Source, m.Target, m.FSType, m.Flags, m.Data); err != nil {
		return fmt.Errorf("mount %s: %w", m, err)
	}
	return nil
}

// MountTable is what the guest has mounted, in order, with the paths the
// initramfs sees (a chrooted guest leaves its chroot to unmount them).
type MountTable struct {
	mounts []Mount
}

// Mounts returns the mounts in the order they were made (moves count as
// made when moved).
func (t *MountTable) Mounts() []Mount { return append([]Mount(nil), t.mounts...) }

// Add records a mount.
func (t *MountTable) Add(m Mount) { t.mounts = append(t.mounts, m) }

// Moved records that the mount at from, with everything below it, now is at
// to. They move to the end of the order: they must be unmounted before
// whatever they were moved into.
func (t *MountTable) Moved(from, to string) {
	var stay, moved []Mount
	for _, m := range t.mounts {
		if m.Target == from || strings.HasPrefix(m.Target, from+"/") {
			m.Target = to + strings.TrimPrefix(m.Target, from)
			moved = append(moved, m)
		} else {
			stay = append(stay, m)
		}
	}
	t.mounts = append(stay, moved...)
}

// mount applies m and records it.
func (t *MountTable) mount(m Mount) error {
	if err := m.apply(); err != nil {
		return err
	}
	t.Add(m)
	return nil
}

// move moves the mount at from to to.
func (t *MountTable) move(from, to string) error {
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(from, to, "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move %s to %s: %w", from, to, err)
	}
	t.Moved(from, to)
	return nil
}

// waitFor calls check every interval until it succeeds, ctx ends or timeout
// passes, and returns check's last error.
func waitFor(ctx context.Context, timeout, interval time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-t.C:
		}
	}
}

// WaitForBlockDevices waits (there is no udev: devtmpfs makes the nodes as
// the drivers find the devices) until every path is a block device.
func WaitForBlockDevices(ctx context.Context, paths []string, timeout time.Duration) error {
	return waitFor(ctx, timeout, 20*time.Millisecond, func() error {
		var missing []string
		for _, p := range paths {
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
				missing = append(missing, p)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("block devices %s did not appear within %s", strings.Join(missing, ", "), timeout)
		}
		return nil
	})
}

// mountedAlready tells whether a mount failed because that file system is
// there already (a kernel that mounted devtmpfs itself).
func mountedAlready(err error) bool { return errors.Is(err, unix.EBUSY) }
