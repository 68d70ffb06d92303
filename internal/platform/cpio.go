package platform

import (
	"errors"
	"fmt"
	"io"
	"math"
)

// File type bits of a cpio mode, as in stat(2).
const (
	modeDir  = 0o040000
	modeReg  = 0o100000
	modeChar = 0o020000
)

// cpioEntry is one member of a newc ("070701") cpio archive, the format the
// kernel unpacks into its initial rootfs. Owner and mtime are always 0 so
// that an archive depends on nothing but its contents.
type cpioEntry struct {
	Name      string // without a leading "/", e.g. "lib/modules"
	Mode      uint32 // type bits | permissions
	Size      int64  // bytes of content that follow (regular files only)
	RdevMajor uint32 // device numbers (character devices only)
	RdevMinor uint32
}

// cpioWriter writes a newc archive. Inode numbers are assigned in order of
// writing, so the same entries in the same order give the same bytes.
type cpioWriter struct {
	w       io.Writer
	off     int64 // bytes written, for alignment
	ino     uint32
	pending int64 // content bytes the current entry still expects
}

func newCpioWriter(w io.Writer) *cpioWriter { return &cpioWriter{w: w} }

// WriteHeader starts an entry; for a regular file, Size bytes of content
// must follow through Write.
func (c *cpioWriter) WriteHeader(e cpioEntry) error {
	if c.pending != 0 {
		return fmt.Errorf("cpio: %d bytes missing before %q", c.pending, e.Name)
	}
	if e.Name == "" || e.Name[0] == '/' {
		return fmt.Errorf("cpio: bad name %q", e.Name)
	}
	if e.Mode&0o170000 != modeReg && e.Size != 0 {
		return fmt.Errorf("cpio: %q: only regular files have content", e.Name)
	}
	if e.Size < 0 || e.Size > math.MaxUint32 {
		return fmt.Errorf("cpio: %q: size %d does not fit newc's 32 bits", e.Name, e.Size)
	}
	if err := c.pad(); err != nil {
		return err
	}
	c.ino++
	return c.header(e, c.ino)
}

func (c *cpioWriter) header(e cpioEntry, ino uint32) error {
	nlink := 1
	if e.Mode&0o170000 == modeDir {
		nlink = 2
	}
	// Fields: magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize (with its NUL), check.
	h := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, e.Mode, 0, 0, nlink, 0, e.Size, 0, 0, e.RdevMajor, e.RdevMinor, len(e.Name)+1, 0)
	if err := c.write([]byte(h + e.Name + "\x00")); err != nil {
		return err
	}
	c.pending = e.Size
	return c.pad()
}

// Write adds content to the current entry.
func (c *cpioWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.pending {
		return 0, errors.New("cpio: write beyond the entry's size")
	}
	if err := c.write(p); err != nil {
		return 0, err
	}
	c.pending -= int64(len(p))
	return len(p), nil
}

// Close writes the trailer. It does not close the underlying writer.
func (c *cpioWriter) Close() error {
	if c.pending != 0 {
		return fmt.Errorf("cpio: %d bytes missing at the end", c.pending)
	}
	if err := c.pad(); err != nil {
		return err
	}
	return c.header(cpioEntry{Name: "TRAILER!!!"}, 0)
}

func (c *cpioWriter) write(p []byte) error {
	n, err := c.w.Write(p)
	c.off += int64(n)
	return err
}

// pad aligns to 4 bytes: newc pads both the header+name and the content.
func (c *cpioWriter) pad() error {
	if r := c.off % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}
