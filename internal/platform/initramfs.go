package platform

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// OrderFile is where the initramfs lists the modules to load, one per line,
// relative to /lib/modules/<version>/, dependencies first.
const OrderFile = "lib/modules/kibotos.order"

// InfoFile describes the platform to the guest (its kernel version).
const InfoFile = "etc/kibotos-platform.json"

// initramfsFile is one entry of the initramfs, with its content either in
// memory or in a file on the host.
type initramfsFile struct {
	cpioEntry
	data []byte
	src  string
}

type initramfsInput struct {
	version string
	guest   string   // host path of the guest binary, /init
	modDir  string   // host path of lib/modules/<version>
	modules []string // relative to modDir, load order
}

// initramfsEntries lays out the initramfs, sorted by name so that parents
// come before their children and the archive is reproducible.
func initramfsEntries(in initramfsInput) ([]initramfsFile, error) {
	info, err := json.Marshal(struct {
		KernelVersion string `json:"kernel_version"`
	}{in.version})
	if err != nil {
		return nil, err
	}
	order := strings.Join(in.modules, "\n") + "\n"
	files := []initramfsFile{
		regular("init", 0o755, in.guest, nil),
		regular(OrderFile, 0o644, "", []byte(order)),
		regular(InfoFile, 0o644, "", append(info, '\n')),
		// The kernel opens /dev/console for /init's stdio before anything
		// could mount devtmpfs.
		{cpioEntry: cpioEntry{Name: "dev/console", Mode: modeChar | 0o600, RdevMajor: 5, RdevMinor: 1}},
	}
	for _, m := range in.modules {
		name := path.Join("lib/modules", in.version, m)
		files = append(files, regular(name, 0o644, filepath.Join(in.modDir, filepath.FromSlash(m)), nil))
	}
	dirs := map[string]bool{"dev": true, "proc": true, "sys": true}
	for _, f := range files {
		for d := path.Dir(f.Name); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		files = append(files, initramfsFile{cpioEntry: cpioEntry{Name: d, Mode: modeDir | 0o755}})
	}
	slices.SortFunc(files, func(a, b initramfsFile) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
}

func regular(name string, perm uint32, src string, data []byte) initramfsFile {
	return initramfsFile{cpioEntry: cpioEntry{Name: name, Mode: modeReg | perm}, src: src, data: data}
}

// writeInitramfs writes the entries as a gzip-compressed newc cpio archive.
// The gzip header carries no name and no time, for reproducibility.
func writeInitramfs(w io.Writer, files []initramfsFile, progress Progress) error {
	zw := gzip.NewWriter(w)
	cw := newCpioWriter(zw)
	for i, f := range files {
		if err := addFile(cw, f); err != nil {
			return fmt.Errorf("initramfs: %s: %w", f.Name, err)
		}
		progress.report("initramfs", int64(i+1), int64(len(files)))
	}
	if err := cw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func addFile(cw *cpioWriter, f initramfsFile) error {
	if f.src == "" {
		f.Size = int64(len(f.data))
		if err := cw.WriteHeader(f.cpioEntry); err != nil {
			return err
		}
		_, err := cw.Write(f.data)
		return err
	}
	src, err := os.Open(f.src)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", f.src)
	}
	f.Size = st.Size()
	if err := cw.WriteHeader(f.cpioEntry); err != nil {
		return err
	}
	// CopyN: a file that grows while we copy must not overrun its header.
	_, err = io.CopyN(cw, src, f.Size)
	return err
}
