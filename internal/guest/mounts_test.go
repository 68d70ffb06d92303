package guest_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kibotos/kibotos/internal/guest"
)

func targets(ms []guest.Mount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Target)
	}
	return out
}

func TestStorageMounts(t *testing.T) {
	vol := &guest.VolumeMount{Device: "/dev/vdc", Path: "/data"}
	for _, tc := range []struct {
		name    string
		cfg     guest.Config
		targets []string
		devices []string
	}{
		{"nothing", guest.Config{}, nil, nil},
		{"root and layer", guest.Config{Root: "/dev/vda", RootFSType: "ext4", Layer: "/dev/vdb"},
			[]string{"/mnt/root", "/mnt/layer", "/newroot", "/newroot/tmp", "/newroot/run"},
			[]string{"/dev/vda", "/dev/vdb"}},
		{"root, layer and volume", guest.Config{Root: "/dev/vda", RootFSType: "ext4", Layer: "/dev/vdb", Volume: vol},
			[]string{"/mnt/root", "/mnt/layer", "/newroot", "/newroot/tmp", "/newroot/run", "/newroot/data"},
			[]string{"/dev/vda", "/dev/vdb", "/dev/vdc"}},
		{"a volume in the initramfs", guest.Config{Root: "/dev/vda", Volume: vol},
			[]string{"/data"}, []string{"/dev/vdc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := guest.StorageMounts(tc.cfg)
			if got := targets(ms); !reflect.DeepEqual(got, tc.targets) {
				t.Errorf("targets %q, want %q", got, tc.targets)
			}
			if got := guest.StorageDevices(tc.cfg); !reflect.DeepEqual(got, tc.devices) {
				t.Errorf("devices %q, want %q", got, tc.devices)
			}
		})
	}
}

func TestTheOverlayStacksTheLayerOnTheRoot(t *testing.T) {
	ms := guest.StorageMounts(guest.Config{Root: "/dev/vda", RootFSType: "erofs", Layer: "/dev/vdb",
		Volume: &guest.VolumeMount{Device: "/dev/vdc", Path: "/home/u"}})
	byTarget := map[string]guest.Mount{}
	for _, m := range ms {
		byTarget[m.Target] = m
	}
	root := byTarget["/mnt/root"]
	if root.Source != "/dev/vda" || root.FSType != "erofs" || root.Flags&unix.MS_RDONLY == 0 || !root.Storage {
		t.Errorf("root %+v", root)
	}
	layer := byTarget["/mnt/layer"]
	if layer.Source != "/dev/vdb" || layer.FSType != "ext4" || layer.Flags&unix.MS_RDONLY != 0 || !layer.Storage {
		t.Errorf("layer %+v", layer)
	}
	ov := byTarget["/newroot"]
	if ov.FSType != "overlay" || ov.Data != "lowerdir=/mnt/root,upperdir=/mnt/layer/upper,workdir=/mnt/layer/work" ||
		!reflect.DeepEqual(ov.Mkdir, []string{"/mnt/layer/upper", "/mnt/layer/work"}) || !ov.Storage {
		t.Errorf("overlay %+v", ov)
	}
	for _, p := range []string{"/newroot/tmp", "/newroot/run"} {
		if m := byTarget[p]; m.FSType != "tmpfs" || m.Storage {
			t.Errorf("%s: %+v", p, m)
		}
	}
	if v := byTarget["/newroot/home/u"]; v.Source != "/dev/vdc" || v.FSType != "ext4" || v.Flags&unix.MS_RDONLY != 0 || !v.Storage {
		t.Errorf("volume %+v", v)
	}
}

// Mounts moved into the new root count as mounted last, so that they are
// unmounted before the overlay they now sit in.
func TestMountTableMoves(t *testing.T) {
	var tab guest.MountTable
	for _, m := range append(guest.PseudoMounts(), guest.StorageMounts(guest.Config{Root: "/dev/vda", Layer: "/dev/vdb"})...) {
		tab.Add(m)
	}
	for _, p := range guest.MovedIntoNewRoot {
		tab.Moved(p, guest.NewRoot+p)
	}
	want := []string{"/mnt/root", "/mnt/layer", "/newroot", "/newroot/tmp", "/newroot/run",
		"/newroot/dev", "/newroot/dev/pts", "/newroot/dev/shm", "/newroot/proc", "/newroot/sys"}
	if got := targets(tab.Mounts()); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

type fakeUnmounter struct {
	busy     map[string]bool // unmount fails with EBUSY
	stuck    map[string]bool // remount read-only fails too
	calls    []string
	detached []string
}

func (f *fakeUnmounter) Unmount(target string, detach bool) error {
	if detach {
		f.detached = append(f.detached, target)
		return nil
	}
	f.calls = append(f.calls, "umount "+target)
	if f.busy[target] {
		return unix.EBUSY
	}
	return nil
}

func (f *fakeUnmounter) RemountReadOnly(target string) error {
	f.calls = append(f.calls, "remount-ro "+target)
	if f.stuck[target] {
		return errors.New("stuck")
	}
	return nil
}

func TestTeardown(t *testing.T) {
	var tab guest.MountTable
	for _, m := range append(guest.PseudoMounts(), guest.StorageMounts(guest.Config{Root: "/dev/vda", Layer: "/dev/vdb",
		Volume: &guest.VolumeMount{Device: "/dev/vdc", Path: "/data"}})...) {
		tab.Add(m)
	}
	for _, p := range guest.MovedIntoNewRoot {
		tab.Moved(p, guest.NewRoot+p)
	}
	for _, tc := range []struct {
		name    string
		busy    []string
		stuck   []string
		calls   []string
		durable bool
		message []string
	}{
		{
			name:    "all unmount",
			calls:   []string{"umount /newroot/data", "umount /newroot", "umount /mnt/layer", "umount /mnt/root"},
			durable: true, message: []string{"unmounted 4 file systems"},
		},
		{
			name:    "a busy volume is remounted read-only",
			busy:    []string{"/newroot/data"},
			calls:   []string{"umount /newroot/data", "remount-ro /newroot/data", "umount /newroot", "umount /mnt/layer", "umount /mnt/root"},
			message: []string{"unmount /newroot/data: device or resource busy; remounted read-only"},
		},
		{
			name: "a stuck overlay keeps the layer busy",
			busy: []string{"/newroot", "/mnt/layer", "/mnt/root"}, stuck: []string{"/newroot"},
			calls:   []string{"umount /newroot/data", "umount /newroot", "remount-ro /newroot", "umount /mnt/layer", "remount-ro /mnt/layer", "umount /mnt/root"},
			message: []string{"remount read-only: stuck", "unmount /mnt/layer: device or resource busy; remounted read-only"},
		},
		{
			name:    "a busy read-only root does not matter",
			busy:    []string{"/mnt/root"},
			calls:   []string{"umount /newroot/data", "umount /newroot", "umount /mnt/layer", "umount /mnt/root"},
			durable: true, message: []string{"unmounted 3 file systems"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeUnmounter{busy: map[string]bool{}, stuck: map[string]bool{}}
			for _, p := range tc.busy {
				f.busy[p] = true
			}
			for _, p := range tc.stuck {
				f.stuck[p] = true
			}
			res := guest.Teardown(tab.Mounts(), f, t.Logf)
			if !reflect.DeepEqual(f.calls, tc.calls) {
				t.Errorf("calls %q\nwant  %q", f.calls, tc.calls)
			}
			wantDetached := []string{"/newroot/sys", "/newroot/proc", "/newroot/dev/shm", "/newroot/dev/pts", "/newroot/dev", "/newroot/run", "/newroot/tmp"}
			if !reflect.DeepEqual(f.detached, wantDetached) {
				t.Errorf("detached %q\nwant     %q", f.detached, wantDetached)
			}
			if res.Durable != tc.durable {
				t.Errorf("durable %t, want %t", res.Durable, tc.durable)
			}
			for _, m := range tc.message {
				if !strings.Contains(res.Message, m) {
					t.Errorf("message %q lacks %q", res.Message, m)
				}
			}
		})
	}
}

func TestTeardownOfNothingIsDurable(t *testing.T) {
	res := guest.Teardown(nil, &fakeUnmounter{}, t.Logf)
	if !res.Durable || res.Message != "no storage to unmount" {
		t.Errorf("%+v", res)
	}
}
