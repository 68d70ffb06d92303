package guest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ModulesDir is where the initramfs carries kernel modules: one directory
// named for the kernel release, and ModuleOrderFile.
const ModulesDir = "/lib/modules"

// ModuleOrderFile lists, one a line, the modules to load in order, as paths
// relative to the release directory. Blank lines and lines starting with #
// are ignored.
const ModuleOrderFile = "kibotos.order"

// ParseModuleOrder reads a module order list.
func ParseModuleOrder(r io.Reader) ([]string, error) {
	var mods []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		mods = append(mods, line)
	}
	return mods, sc.Err()
}

// ReleaseDir returns the directory of dir (ModulesDir) that holds the
// modules: the one named release (the running kernel's, from uname) if it
// exists, else the only directory there.
func ReleaseDir(dir, release string) (string, error) {
	if release != "" {
		if fi, err := os.Stat(filepath.Join(dir, release)); err == nil && fi.IsDir() {
			return filepath.Join(dir, release), nil
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) != 1 {
		return "", fmt.Errorf("%s holds %d release directories (%s), none named %q", dir, len(dirs), strings.Join(dirs, ", "), release)
	}
	return filepath.Join(dir, dirs[0]), nil
}

// ModuleName is the kernel's name of a module file:
// kernel/drivers/block/virtio_blk.ko.xz is virtio_blk.
func ModuleName(path string) string {
	base := filepath.Base(path)
	if i := strings.Index(base, ".ko"); i > 0 {
		base = base[:i]
	}
	return normalizeModuleName(base)
}

// ModuleResult is what happened to one module.
type ModuleResult struct {
	Name string
	Path string
	// Loaded is true when the module was loaded now or already was
	// (AlreadyLoaded).
	Loaded        bool
	AlreadyLoaded bool
	Err           error
}

// LoadModules loads the modules listed in dir/ModuleOrderFile, in order,
// from the release directory (ReleaseDir), passing each the parameters the
// kernel command line gives it. A module that fails is reported and the
// rest are still loaded: a missing optional module must not stop a boot.
// The error is for a missing or unreadable list only.
func LoadModules(dir, release string, cmdline []Param) ([]ModuleResult, error) {
	f, err := os.Open(filepath.Join(dir, ModuleOrderFile))
	if err != nil {
		return nil, err
	}
	mods, err := ParseModuleOrder(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	if len(mods) == 0 {
		return nil, nil
	}
	base, err := ReleaseDir(dir, release)
	if err != nil {
		return nil, err
	}
	results := make([]ModuleResult, 0, len(mods))
	for _, m := range mods {
		path := m
		if !filepath.IsAbs(path) {
			path = filepath.Join(base, m)
		}
		r := ModuleResult{Name: ModuleName(path), Path: path}
		r.Err = loadModule(path, ModuleParams(cmdline, r.Name))
		switch {
		case r.Err == nil:
			r.Loaded = true
		case errors.Is(r.Err, unix.EEXIST):
			r.Loaded, r.AlreadyLoaded, r.Err = true, true, nil
		}
		results = append(results, r)
	}
	return results, nil
}

// loadModule loads one module file with finit_module. A compressed module
// (.ko.xz, .ko.zst, .ko.gz) is handed to the kernel to decompress, which
// needs a kernel built with CONFIG_MODULE_DECOMPRESS.
func loadModule(path, params string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	flags := 0
	if !strings.HasSuffix(path, ".ko") {
		flags |= unix.MODULE_INIT_COMPRESSED_FILE
	}
	if err := unix.FinitModule(int(f.Fd()), params, flags); err != nil {
		return fmt.Errorf("finit_module: %w", err)
	}
	return nil
}
