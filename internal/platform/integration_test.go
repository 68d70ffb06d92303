package platform_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kibotos/kibotos/internal/platform"
)

// kernelCache is where downloaded kernels stay between test runs.
func kernelCache(t *testing.T) string {
	if dir := os.Getenv("KIBOTOS_CACHE"); dir != "" {
		return filepath.Join(dir, "debian-kernel")
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "kibotos", "debian-kernel")
}

// progressLog records the last report of each step.
type progressLog struct {
	mu   sync.Mutex
	last map[string][2]int64
}

func (p *progressLog) report(step string, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[string][2]int64{}
	}
	p.last[step] = [2]int64{done, total}
}

// TestBuildDebianKernel builds a platform from Debian's current kernel.
// It needs apt-get and network access to Debian's mirrors, which CI has:
// it does not skip.
func TestBuildDebianKernel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	var dl progressLog
	deb, err := platform.DownloadDebianKernel(ctx, kernelCache(t), dl.report)
	if err != nil {
		t.Fatal(err)
	}
	if d := dl.last["download"]; d[0] != d[1] || d[1] <= 0 {
		t.Errorf("download progress ends at %v", d)
	}
	t.Logf("kernel package %s (%v)", filepath.Base(deb), time.Since(start).Round(time.Millisecond))

	guest := filepath.Join(t.TempDir(), "kibotos-guest")
	guestData := []byte("\x7fELF not really a guest agent\n")
	if err := os.WriteFile(guest, guestData, 0o755); err != nil {
		t.Fatal(err)
	}
	var manifests []*platform.Manifest
	var outs []string
	for i := range 2 {
		var prog progressLog
		out := t.TempDir()
		start := time.Now()
		m, err := platform.Build(ctx, platform.BuildInput{KernelDeb: deb, GuestBinary: guest, Progress: prog.report}, out)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("build %d: %v, digest %s", i+1, time.Since(start).Round(time.Millisecond), m.Digest)
		for _, step := range []string{"extract", "vmlinux", "modules", "initramfs"} {
			if p, ok := prog.last[step]; !ok || p[0] != p[1] || p[1] <= 0 {
				t.Errorf("progress of %s ends at %v (reported: %v)", step, p, ok)
			}
		}
		manifests, outs = append(manifests, m), append(outs, out)
	}
	m := manifests[0]
	if !reflect.DeepEqual(manifests[0], manifests[1]) {
		t.Errorf("two builds differ:\n%+v\n%+v", manifests[0], manifests[1])
	}
	if m.Digest != platform.Digest(m.VmlinuxSHA256, m.InitramfsSHA256) || !strings.HasPrefix(m.Digest, "sha256:") {
		t.Errorf("digest %s does not follow from the artifacts", m.Digest)
	}
	t.Logf("kernel %s, modules:\n%s", m.KernelVersion, strings.Join(m.Modules, "\n"))
	checkOutputDir(t, outs[0], m)
	checkVmlinux(t, filepath.Join(outs[0], m.Vmlinux))
	checkModuleOrder(t, m.Modules)
	checkInitramfs(t, filepath.Join(outs[0], m.Initramfs), m, guestData)
}

func checkOutputDir(t *testing.T, out string, m *platform.Manifest) {
	t.Helper()
	ents, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"initramfs.cpio.gz", "platform.json", "vmlinux"}; !slices.Equal(names, want) {
		t.Errorf("output dir holds %v, want %v", names, want)
	}
	data, err := os.ReadFile(filepath.Join(out, platform.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var onDisk platform.Manifest
	if err := json.Unmarshal(data, &onDisk); err != nil || !reflect.DeepEqual(&onDisk, m) {
		t.Errorf("platform.json %s (%v) is not the returned manifest %+v", data, err, m)
	}
}

func checkVmlinux(t *testing.T, name string) {
	t.Helper()
	f, err := elf.Open(name)
	if err != nil {
		t.Fatalf("vmlinux: %v", err)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 || f.Type != elf.ET_EXEC {
		t.Errorf("vmlinux: %v %v", f.Machine, f.Type)
	}
	if !slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_NOTE }) {
		t.Error("vmlinux has no note segment (PVH entry)")
	}
}

// checkModuleOrder checks known dependencies of Debian 6.1's modules.
func checkModuleOrder(t *testing.T, modules []string) {
	t.Helper()
	index := map[string]int{}
	for i, m := range modules {
		name := strings.ReplaceAll(strings.TrimSuffix(path.Base(m), ".ko"), "-", "_")
		index[name] = i + 1 // 0 = absent
	}
	before := [][2]string{
		{"virtio", "virtio_mmio"}, {"virtio_ring", "virtio_mmio"},
		{"virtio", "virtio_blk"}, {"virtio", "virtio_console"},
		{"failover", "net_failover"}, {"net_failover", "virtio_net"},
		{"jbd2", "ext4"}, {"mbcache", "ext4"}, {"crc16", "ext4"},
		// ext4 and jbd2 need crc32c (a soft dependency) to mount with metadata_csum.
		{"crc32c_generic", "jbd2"}, {"crc32c_generic", "ext4"},
	}
	for _, b := range before {
		if index[b[0]] == 0 || index[b[1]] == 0 || index[b[0]] > index[b[1]] {
			t.Errorf("%s (position %d) must come before %s (position %d)", b[0], index[b[0]], b[1], index[b[1]])
		}
	}
	for _, m := range platform.DefaultModules {
		if index[m] == 0 {
			t.Errorf("default module %s is missing", m)
		}
	}
}

func checkInitramfs(t *testing.T, name string, m *platform.Manifest, guest []byte) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	files, err := readCpio(archive)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]cpioFile{}
	for i, f := range files {
		if i > 0 && files[i-1].Name >= f.Name {
			t.Errorf("entries not sorted: %s after %s", f.Name, files[i-1].Name)
		}
		if dir := path.Dir(f.Name); dir != "." && byName[dir].Mode&0o170000 != platform.ModeDir {
			t.Errorf("%s comes before its directory %s", f.Name, dir)
		}
		if f.UID != 0 || f.GID != 0 || f.Mtime != 0 {
			t.Errorf("%s: uid %d gid %d mtime %d", f.Name, f.UID, f.GID, f.Mtime)
		}
		byName[f.Name] = f
	}
	for _, d := range []string{"dev", "proc", "sys", "lib", "lib/modules/" + m.KernelVersion} {
		if byName[d].Mode != platform.ModeDir|0o755 {
			t.Errorf("directory /%s: mode %o", d, byName[d].Mode)
		}
	}
	if init := byName["init"]; init.Mode != platform.ModeReg|0o755 || !bytes.Equal(init.Data, guest) {
		t.Errorf("/init: mode %o, %d bytes", init.Mode, len(init.Data))
	}
	if order := string(byName["lib/modules/kibotos.order"].Data); order != strings.Join(m.Modules, "\n")+"\n" {
		t.Errorf("kibotos.order:\n%s", order)
	}
	if info := string(byName["etc/kibotos-platform.json"].Data); !strings.Contains(info, `"kernel_version":"`+m.KernelVersion+`"`) {
		t.Errorf("kibotos-platform.json: %s", info)
	}
	for _, mod := range m.Modules {
		f := byName[path.Join("lib/modules", m.KernelVersion, mod)]
		if _, err := elf.NewFile(bytes.NewReader(f.Data)); err != nil {
			t.Errorf("module %s: %v", mod, err)
		}
	}
}
