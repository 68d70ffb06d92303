package platform

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Debian's kernel package carries no modules.dep (depmod runs when the
// package is installed), so dependencies come from each module's .modinfo.

// moduleTree is the lib/modules/<ver> directory of an unpacked kernel.
type moduleTree struct {
	dir     string
	version string
	files   map[string]string // module name -> path relative to dir
	builtin map[string]bool
	infos   map[string]modInfo
	aliases map[string][]string // alias -> providing modules; built on first need
}

type modInfo struct {
	depends  []string // hard dependencies: symbols the module uses
	softPre  []string // "softdep=pre: ..." names or aliases, e.g. crypto-crc32c
	aliases  []string
	vermagic string
}

// modName is the kernel's name for a module: '-' and '_' are the same to
// it, and the module loader reports '_'.
func modName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// moduleFileName returns the module name of a module file, or "".
func moduleFileName(file string) string {
	base := filepath.Base(file)
	for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		if name, ok := strings.CutSuffix(base, ext); ok {
			return modName(name)
		}
	}
	return ""
}

func openModuleTree(dir, version string) (*moduleTree, error) {
	t := &moduleTree{dir: dir, version: version, files: map[string]string{},
		builtin: map[string]bool{}, infos: map[string]modInfo{}}
	// WalkDir goes in lexical order: of two files with one name, the first wins.
	err := filepath.WalkDir(filepath.Join(dir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if name := moduleFileName(p); name != "" && t.files[name] == "" {
			t.files[name], _ = filepath.Rel(dir, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("module tree: %w", err)
	}
	return t, t.readBuiltin()
}

// readBuiltin reads modules.builtin: modules compiled into the kernel.
func (t *moduleTree) readBuiltin() error {
	data, err := os.ReadFile(filepath.Join(t.dir, "modules.builtin"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if name := moduleFileName(strings.TrimSpace(sc.Text())); name != "" {
			t.builtin[name] = true
		}
	}
	return sc.Err()
}

// resolve returns the module files to load for names, dependencies first.
func (t *moduleTree) resolve(names []string, progress Progress) ([]string, error) {
	var roots []string
	for _, n := range names {
		n = modName(n)
		if t.builtin[n] {
			continue // nothing to load
		}
		if t.files[n] == "" {
			return nil, fmt.Errorf("module %s: not in kernel %s (neither a module file nor built in)", n, t.version)
		}
		roots = append(roots, n)
	}
	deps := func(name string) ([]string, error) {
		progress.report("modules", int64(len(t.infos)), 0)
		return t.deps(name)
	}
	order, err := orderDeps(roots, deps)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(order))
	for i, n := range order {
		paths[i] = filepath.ToSlash(t.files[n])
	}
	progress.report("modules", int64(len(paths)), int64(len(paths)))
	return paths, nil
}

// deps returns the modules that must be loaded before name, sorted: its
// hard dependencies and the modules behind its "pre" soft dependencies
// (ext4 and jbd2 need crypto-crc32c, which the kernel would otherwise ask a
// modprobe that the initramfs does not have for).
func (t *moduleTree) deps(name string) ([]string, error) {
	info, err := t.info(name)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range info.depends {
		if t.builtin[d] {
			continue
		}
		if t.files[d] == "" {
			return nil, fmt.Errorf("module %s depends on %s, which kernel %s does not have", name, d, t.version)
		}
		out = append(out, d)
	}
	for _, s := range info.softPre {
		p, err := t.provider(s)
		if err != nil {
			return nil, fmt.Errorf("module %s: soft dependency %s: %w", name, s, err)
		}
		if p != "" {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// info reads (once) the .modinfo of a module, which must be uncompressed.
func (t *moduleTree) info(name string) (modInfo, error) {
	if info, ok := t.infos[name]; ok {
		return info, nil
	}
	rel := t.files[name]
	if !strings.HasSuffix(rel, ".ko") {
		return modInfo{}, fmt.Errorf("module %s is compressed (%s): only uncompressed .ko modules are supported", name, rel)
	}
	info, err := readModinfo(filepath.Join(t.dir, rel))
	if err != nil {
		return modInfo{}, fmt.Errorf("module %s: %w", name, err)
	}
	if v, _, _ := strings.Cut(info.vermagic, " "); v != t.version {
		return modInfo{}, fmt.Errorf("module %s is for kernel %q, not %s", name, v, t.version)
	}
	t.infos[name] = info
	return info, nil
}

// readModinfo parses the NUL-separated key=value strings of a module's
// .modinfo section.
func readModinfo(file string) (modInfo, error) {
	f, err := elf.Open(file)
	if err != nil {
		return modInfo{}, err
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return modInfo{}, errors.New("no .modinfo section")
	}
	data, err := sec.Data()
	if err != nil {
		return modInfo{}, err
	}
	var info modInfo
	for _, kv := range strings.Split(string(data), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "depends":
			info.depends = appendNames(info.depends, strings.Split(v, ","))
		case "softdep":
			info.softPre = appendNames(info.softPre, softPre(v))
		case "alias":
			info.aliases = append(info.aliases, modName(v))
		case "vermagic":
			info.vermagic = v
		}
	}
	return info, nil
}

// softPre returns the "pre:" names of a softdep value such as
// "pre: crypto-crc32c post: foo".
func softPre(v string) []string {
	var out []string
	pre := false
	for _, f := range strings.Fields(v) {
		switch f {
		case "pre:":
			pre = true
		case "post:":
			pre = false
		default:
			if pre {
				out = append(out, f)
			}
		}
	}
	return out
}

func appendNames(dst, names []string) []string {
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			dst = append(dst, modName(n))
		}
	}
	return dst
}
