package blockfile

import (
	"io"
	"os"
)

// ZeroBlock is the unit a sparse copy checks for zeros (4 KiB): a block of
// zeros in a data extent is written back as a hole.
const ZeroBlock = zeroBlock

// Extent is one data region of a sparse file, in whole ZeroBlocks (the
// last one may end at the file's size).
type Extent struct{ Off, Len int64 }

// DataExtents lists f's data regions with SEEK_DATA/SEEK_HOLE, as Copy
// reads them: adjacent regions merged, rounded out to whole ZeroBlocks. A
// filesystem without SEEK_DATA reports the whole file as data.
func DataExtents(f *os.File, size int64) ([]Extent, error) {
	exts, err := dataExtents(f, size)
	if err != nil {
		return nil, err
	}
	out := make([]Extent, len(exts))
	for i, e := range exts {
		out[i] = Extent{Off: e.off, Len: e.len}
	}
	return out, nil
}

// WriteNonZero writes buf at off, leaving its ZeroBlocks (counted from
// buf's start) unwritten, so that a file truncated to its size first keeps
// them as holes.
func WriteNonZero(out io.WriterAt, buf []byte, off int64) error { return writeNonZero(out, buf, off) }
