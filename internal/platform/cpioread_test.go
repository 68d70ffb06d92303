package platform_test

import (
	"bytes"
	"fmt"
	"strconv"
)

// cpioFile is an entry read back from a newc archive.
type cpioFile struct {
	Name                 string
	Ino, Mode, UID, GID  uint32
	Nlink, Mtime         uint32
	RdevMajor, RdevMinor uint32
	Data                 []byte
}

// readCpio is a small, strict newc reader: it is the test's independent
// view of the format (no cpio(1) needed).
func readCpio(archive []byte) ([]cpioFile, error) {
	var files []cpioFile
	off := 0
	for {
		if off%4 != 0 || off+110 > len(archive) {
			return nil, fmt.Errorf("bad header offset %d", off)
		}
		h := archive[off : off+110]
		if string(h[:6]) != "070701" {
			return nil, fmt.Errorf("bad magic %q at %d", h[:6], off)
		}
		var f [13]uint32
		for i := range f {
			v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
			if err != nil {
				return nil, fmt.Errorf("field %d at %d: %w", i, off, err)
			}
			f[i] = uint32(v)
		}
		namesize, size := int(f[11]), int(f[6])
		nameEnd := off + 110 + namesize
		if nameEnd > len(archive) || archive[nameEnd-1] != 0 {
			return nil, fmt.Errorf("bad name at %d", off)
		}
		name := string(archive[off+110 : nameEnd-1])
		dataOff := align4(nameEnd)
		if dataOff+size > len(archive) {
			return nil, fmt.Errorf("%s: data beyond the archive", name)
		}
		if name == "TRAILER!!!" {
			if rest := archive[dataOff:]; len(bytes.Trim(rest, "\x00")) != 0 {
				return nil, fmt.Errorf("data after the trailer")
			}
			return files, nil
		}
		files = append(files, cpioFile{Name: name, Ino: f[0], Mode: f[1], UID: f[2], GID: f[3],
			Nlink: f[4], Mtime: f[5], RdevMajor: f[9], RdevMinor: f[10],
			Data: archive[dataOff : dataOff+size]})
		off = align4(dataOff + size)
	}
}

func align4(n int) int { return (n + 3) &^ 3 }
