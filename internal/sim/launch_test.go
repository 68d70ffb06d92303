package sim_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/catalog"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/sim"
)

// launch_ref: a create binds the PlatformKey's current default Launch
// (launch_binding_version 1); once the key has a new default, an explicit
// StartWorkspace rebinds the Workspace to it and advances
// launch_binding_version; a start with no new default changes neither.
func TestAnExplicitStartRebindsTheLaunch(t *testing.T) {
	c, _ := oneNode(t, nil)
	id := createWithoutVolume(t, c, "create")
	first := waitState(t, c, id, ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE).GetSpec()
	if first.GetLaunchRef() == "" || first.GetLaunchBindingVersion() != 1 {
		t.Fatalf("after the create: launch_ref %q, launch_binding_version %d; want one, 1", first.GetLaunchRef(), first.GetLaunchBindingVersion())
	}
	if same := restart(t, c, id, "1").GetSpec(); same.GetLaunchRef() != first.GetLaunchRef() || same.GetLaunchBindingVersion() != 1 {
		t.Errorf("a start with no new default: launch_ref %q, version %d; want %q, 1", same.GetLaunchRef(), same.GetLaunchBindingVersion(), first.GetLaunchRef())
	}
	newDefaultPlatform(t, c.Ctrl.Catalog())
	second := restart(t, c, id, "2").GetSpec()
	if second.GetLaunchRef() == first.GetLaunchRef() || second.GetLaunchRef() == "" || second.GetLaunchBindingVersion() != 2 {
		t.Errorf("a start after a new default: launch_ref %q (was %q), version %d; want the new one, 2", second.GetLaunchRef(), first.GetLaunchRef(), second.GetLaunchBindingVersion())
	}
}

// newDefaultPlatform registers another platform (other placeholder files)
// as the simulation's PlatformKey's default.
func newDefaultPlatform(t *testing.T, cat *catalog.Catalog) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{platform.VmlinuxFile: "kibotos sim: another placeholder kernel\n", platform.InitramfsFile: "kibotos sim: another placeholder initramfs\n"}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hash := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
	m := &platform.Manifest{KernelVersion: "sim-2", Vmlinux: platform.VmlinuxFile, Initramfs: platform.InitramfsFile,
		VmlinuxSHA256: hash(files[platform.VmlinuxFile]), InitramfsSHA256: hash(files[platform.InitramfsFile])}
	m.Digest = platform.Digest(m.VmlinuxSHA256, m.InitramfsSHA256)
	if _, err := cat.RegisterPlatform(ctx, sim.PlatformKey, m, dir, true); err != nil {
		t.Fatal(err)
	}
}
