package archive

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
)

// Span is where one part's body lies in an archive: Offset is the body's
// first byte (after its PART frame header), Size its length.
type Span struct {
	Offset int64
	Size   uint64
}

// Locate reads an archive's header and manifest from r (a verified archive
// file: it does not re-verify digests) and returns the manifest and the span
// of each part's body, in manifest order, computed from the manifest's part
// sizes. It checks the header and manifest as Read does (ErrNotArchive,
// ErrVersion, ErrManifest, ErrLimit, ErrTruncated) and that each part's
// PART frame at its computed place has the right tag, index and size
// (ErrFraming otherwise), so a caller never serves bytes from the wrong place.
// The trailer's tag and part count must follow the last body likewise, so
// that every span lies within r (a file ending before is ErrTruncated).
func Locate(r io.ReaderAt, lim Limits) (*Manifest, []Span, error) {
	lim = lim.withDefaults()
	in := &reader{r: bufio.NewReader(io.NewSectionReader(r, 0, math.MaxInt64))}
	m, err := in.header(lim)
	if err != nil {
		return nil, nil, err
	}
	spans := make([]Span, len(m.Parts))
	off := uint64(in.n)
	for i, p := range m.Parts {
		want := partFrame(uint32(i), p.Size)
		if err := frameAt(r, off, want[:]); err != nil {
			return nil, nil, fmt.Errorf("part %s: %w", p.Name, err)
		}
		off += partHeaderSize
		if p.Size > math.MaxInt64-off {
			return nil, nil, fmt.Errorf("part %s: %w: a body of %d bytes at %d ends beyond any file", p.Name, ErrTruncated, p.Size, off)
		}
		spans[i] = Span{Offset: int64(off), Size: p.Size}
		off += p.Size
	}
	want := trailerFrame(uint32(len(m.Parts)))
	if err := frameAt(r, off, want[:]); err != nil {
		return nil, nil, fmt.Errorf("trailer: %w", err)
	}
	return m, spans, nil
}

// frameAt checks that r holds the frame header want at off: ErrFraming if
// it holds another, ErrTruncated if it ends before.
func frameAt(r io.ReaderAt, off uint64, want []byte) error {
	if off > math.MaxInt64-uint64(len(want)) {
		return fmt.Errorf("%w: a frame at %d lies beyond any file", ErrTruncated, off)
	}
	got := make([]byte, len(want))
	if n, err := r.ReadAt(got, int64(off)); n < len(got) {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("frame at %d: %w", off, truncated(err))
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%w: at %d the frame header is %x, want %x", ErrFraming, off, got, want)
	}
	return nil
}

// ReadBody reads exactly p.Size bytes of part p's body from r (no frame
// header: what Span covers, or what Body.Stream wrote) and verifies it as
// Read verifies a part: a block part's extents (ErrExtent, ErrPartSize),
// its digest against p.Digest (ErrDigest), a short stream (ErrTruncated).
// It writes into sink as Read does: Truncate to p.LogicalSize first, then
// only the non-zero 4 KiB blocks, so a fresh file stays sparse. sink may be
// nil to verify only. Bytes after p.Size in r are not read.
//
// p is validated against lim first, as a manifest's part is (ErrManifest,
// ErrLimit), so that nothing is read or truncated for a part Read would refuse.
func ReadBody(r io.Reader, p Part, sink Sink, lim Limits) error {
	if err := p.validate(lim.withDefaults()); err != nil {
		return err // it names the part
	}
	if p.Size > math.MaxInt64 || p.LogicalSize > math.MaxInt64 {
		return fmt.Errorf("part %s: %w: size %d, logical size %d, at most %d", p.Name, ErrLimit, p.Size, p.LogicalSize, int64(math.MaxInt64))
	}
	in := &reader{r: bufio.NewReaderSize(io.LimitReader(r, int64(p.Size)), 256<<10)}
	if err := in.body(p, sink); err != nil {
		return fmt.Errorf("part %s: %w", p.Name, err)
	}
	return nil
}
