package platform

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// provider returns the module to load for a soft dependency: a module name
// or an alias (crypto-crc32c). It returns "" when the kernel has it built
// in, or when nothing provides it: a soft dependency is not required.
func (t *moduleTree) provider(s string) (string, error) {
	if t.builtin[s] {
		return "", nil
	}
	if t.files[s] != "" {
		return s, nil
	}
	if err := t.indexAliases(); err != nil {
		return "", err
	}
	ps := t.aliases[s]
	if len(ps) == 0 || slices.ContainsFunc(ps, func(p string) bool { return t.builtin[p] }) {
		return "", nil
	}
	// Several modules may provide one alias (crc32c_generic, crc32c_intel).
	// The generic one works on every CPU, including QEMU's default TCG CPU,
	// where crc32c_intel (SSE4.2) would fail to load; the kernel picks the
	// fastest implementation among those loaded anyway.
	for _, p := range ps {
		if strings.HasSuffix(p, "_generic") {
			return p, nil
		}
	}
	return ps[0], nil
}

// indexAliases reads the aliases of every uncompressed module and of the
// built-in modules (modules.builtin.modinfo). Only soft dependencies need
// it, so it runs once, on first need.
func (t *moduleTree) indexAliases() error {
	if t.aliases != nil {
		return nil
	}
	idx := map[string][]string{}
	for name, rel := range t.files {
		if !strings.HasSuffix(rel, ".ko") {
			continue // compressed: resolve fails clearly if it is needed
		}
		info, err := readModinfo(filepath.Join(t.dir, rel))
		if err != nil {
			return err
		}
		for _, a := range info.aliases {
			idx[a] = append(idx[a], name)
		}
	}
	if err := t.indexBuiltinAliases(idx); err != nil {
		return err
	}
	for _, ps := range idx {
		slices.Sort(ps) // map iteration above is random
	}
	t.aliases = idx
	return nil
}

// indexBuiltinAliases reads "module.alias=value" strings, NUL-separated.
func (t *moduleTree) indexBuiltinAliases(idx map[string][]string) error {
	data, err := os.ReadFile(filepath.Join(t.dir, "modules.builtin.modinfo"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, kv := range strings.Split(string(data), "\x00") {
		key, v, _ := strings.Cut(kv, "=")
		if mod, ok := strings.CutSuffix(key, ".alias"); ok && !strings.Contains(mod, ".") {
			idx[modName(v)] = append(idx[modName(v)], modName(mod))
		}
	}
	return nil
}
