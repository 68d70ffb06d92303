package platform_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/platform"
)

func TestOrderDeps(t *testing.T) {
	graph := map[string][]string{
		"ext4":        {"crc16", "jbd2", "mbcache"},
		"jbd2":        {"crc32c"},
		"virtio_blk":  {"virtio", "virtio_ring"},
		"virtio_mmio": {"virtio", "virtio_ring"},
		"virtio_ring": {"virtio"},
	}
	deps := func(n string) ([]string, error) { return graph[n], nil }
	got, err := platform.OrderDeps([]string{"virtio_mmio", "ext4", "virtio_blk", "ext4"}, deps)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"virtio", "virtio_ring", "virtio_mmio", "crc16", "crc32c", "jbd2", "mbcache", "ext4", "virtio_blk"}
	if !slices.Equal(got, want) {
		t.Errorf("order\n got %v\nwant %v", got, want)
	}
	checkTopological(t, got, graph)
}

// checkTopological fails unless every module comes after its dependencies.
func checkTopological(t *testing.T, order []string, graph map[string][]string) {
	t.Helper()
	for i, n := range order {
		for _, d := range graph[n] {
			if j := slices.Index(order, d); j < 0 || j > i {
				t.Errorf("%s at %d, its dependency %s at %d", n, i, d, j)
			}
		}
	}
}

func TestOrderDepsErrors(t *testing.T) {
	cyclic := map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}}
	_, err := platform.OrderDeps([]string{"a"}, func(n string) ([]string, error) { return cyclic[n], nil })
	if err == nil || !strings.Contains(err.Error(), "a -> b -> c -> a") {
		t.Errorf("cycle: got %v", err)
	}
	boom := errors.New("boom")
	_, err = platform.OrderDeps([]string{"a"}, func(string) ([]string, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Errorf("deps error: got %v", err)
	}
}

const fakeVersion = "6.1.0-99-amd64"

// fakeTree writes lib/modules/<version> with modules made of nothing but a
// .modinfo section: "name" -> modinfo strings (depends, softdep, alias).
func fakeTree(t *testing.T, mods map[string][]string, builtin ...string) string {
	t.Helper()
	dir := t.TempDir()
	for file, info := range mods {
		p := filepath.Join(dir, "kernel", filepath.FromSlash(file))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		info = append(info, "vermagic="+fakeVersion+" SMP preempt mod_unload modversions ")
		if err := os.WriteFile(p, fakeModule(info), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var lines []string
	for _, b := range builtin {
		lines = append(lines, "kernel/"+b+".ko")
	}
	err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// fakeModule is a minimal relocatable ELF with a .modinfo section.
func fakeModule(modinfo []string) []byte {
	info := []byte(strings.Join(modinfo, "\x00") + "\x00")
	shstr := []byte("\x00.modinfo\x00.shstrtab\x00")
	infoOff := uint64(64)
	strOff := infoOff + uint64(len(info))
	shOff := (strOff + uint64(len(shstr)) + 7) &^ 7
	hdr := elf.Header64{Type: uint16(elf.ET_REL), Machine: uint16(elf.EM_X86_64), Version: 1,
		Shoff: shOff, Ehsize: 64, Shentsize: 64, Shnum: 3, Shstrndx: 2}
	copy(hdr.Ident[:], []byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), 1})
	sections := []elf.Section64{{},
		{Name: 1, Type: uint32(elf.SHT_PROGBITS), Off: infoOff, Size: uint64(len(info)), Addralign: 1},
		{Name: 10, Type: uint32(elf.SHT_STRTAB), Off: strOff, Size: uint64(len(shstr)), Addralign: 1},
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, hdr)
	b.Write(info)
	b.Write(shstr)
	b.Write(make([]byte, int(shOff)-b.Len()))
	binary.Write(&b, binary.LittleEndian, sections)
	return b.Bytes()
}

func TestResolveModules(t *testing.T) {
	dir := fakeTree(t, map[string][]string{
		"drivers/virtio/virtio.ko":        {"depends="},
		"drivers/virtio/virtio_ring.ko":   {"depends="},
		"drivers/virtio/virtio_mmio.ko":   {"depends=virtio,virtio_ring"},
		"drivers/net/virtio_net.ko":       {"depends=virtio_ring,virtio,net_failover"},
		"drivers/net/net_failover.ko":     {"depends=failover"},
		"net/core/failover.ko":            {"depends="},
		"fs/ext4/ext4.ko":                 {"softdep=pre: crypto-crc32c", "depends=jbd2,mbcache,crc16"},
		"fs/jbd2/jbd2.ko":                 {"softdep=pre: crypto-crc32c", "depends="},
		"fs/mbcache.ko":                   {"depends="},
		"lib/crc16.ko":                    {"depends="},
		"crypto/crc32c_generic.ko":        {"alias=crypto-crc32c", "alias=crc32c", "depends="},
		"arch/x86/crypto/crc32c-intel.ko": {"alias=crypto-crc32c", "alias=crc32c", "depends="},
		"drivers/gpu/virtio-gpu.ko":       {"depends=virtio,virtio_ring"},
		"fs/overlayfs/overlay.ko.xz":      nil,
	}, "lib/crc32", "fs/fuse")
	// '-' and '_' name the same module; built-in modules need no file.
	got, err := platform.ResolveModules(dir, fakeVersion, []string{"virtio-mmio", "virtio_gpu", "ext4", "fuse", "virtio_net"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"kernel/drivers/virtio/virtio.ko", "kernel/drivers/virtio/virtio_ring.ko", "kernel/drivers/virtio/virtio_mmio.ko",
		"kernel/drivers/gpu/virtio-gpu.ko",
		// The soft dependency goes to the generic provider of the alias.
		"kernel/lib/crc16.ko", "kernel/crypto/crc32c_generic.ko", "kernel/fs/jbd2/jbd2.ko", "kernel/fs/mbcache.ko", "kernel/fs/ext4/ext4.ko",
		"kernel/net/core/failover.ko", "kernel/drivers/net/net_failover.ko", "kernel/drivers/net/virtio_net.ko",
	}
	if !slices.Equal(got, want) {
		t.Errorf("order\n got %v\nwant %v", got, want)
	}

	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"nosuch"}, "module nosuch: not in kernel"},
		{[]string{"overlay"}, "compressed"},
	} {
		_, err := platform.ResolveModules(dir, fakeVersion, tc.names)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ResolveModules(%v): got %v, want an error containing %q", tc.names, err, tc.want)
		}
	}
}

func TestResolveModulesChecksDependenciesAndVersion(t *testing.T) {
	dir := fakeTree(t, map[string][]string{"a.ko": {"depends=missing"}})
	_, err := platform.ResolveModules(dir, fakeVersion, []string{"a"})
	if err == nil || !strings.Contains(err.Error(), "depends on missing") {
		t.Errorf("missing dependency: got %v", err)
	}
	_, err = platform.ResolveModules(dir, "6.1.0-1-amd64", []string{"a"})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("for kernel %q", fakeVersion)) {
		t.Errorf("other kernel's module: got %v", err)
	}
}
