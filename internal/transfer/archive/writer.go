package archive

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/kibotos/kibotos/internal/node/blockfile"
)

// readChunk is how much of a part one read takes.
const readChunk = 1 << 20

// Input is one part to write.
type Input struct {
	Name string
	Kind PartKind
	// File is read with ReadAt (and, for a block part, SEEK_DATA and
	// SEEK_HOLE); it must not change while the archive is written.
	File *os.File
}

// Written is a finished archive.
type Written struct {
	// Manifest is the manifest as written, its parts filled in.
	Manifest Manifest
	// Size is the archive's length in bytes.
	Size uint64
	// Digest is "sha256:<hex>" of the whole archive (trailer included):
	// the digest an ImportTransfer declares.
	Digest string
}

// Write writes an archive of m and the parts in to w. It reads each part
// twice: once to describe it in the manifest (which comes first, so that a
// reader can check every bound before it takes any part's bytes), once to
// stream it; a part whose content changed in between fails the write with
// ErrSourceChanged. m.Parts is replaced by the parts of in. The writer
// refuses to write what a reader with the default limits would refuse.
func Write(ctx context.Context, w io.Writer, m Manifest, in []Input) (*Written, error) {
	plans := make([]plan, len(in))
	m.Parts = make([]Part, len(in))
	for i, p := range in {
		var err error
		if plans[i], err = describe(ctx, p); err != nil {
			return nil, fmt.Errorf("part %s: %w", p.Name, err)
		}
		m.Parts[i] = plans[i].part
	}
	if err := m.validate(Limits{}.withDefaults()); err != nil {
		return nil, err
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	if len(body) > DefaultMaxManifestBytes {
		return nil, fmt.Errorf("%w: manifest of %d bytes, at most %d", ErrLimit, len(body), DefaultMaxManifestBytes)
	}
	out := newHashWriter(w)
	out.header(len(body))
	out.write(body)
	for i, p := range plans {
		if err := out.part(ctx, uint32(i), p); err != nil {
			return nil, fmt.Errorf("part %s: %w", p.part.Name, err)
		}
	}
	if err := out.trailer(uint32(len(plans))); err != nil {
		return nil, err
	}
	return &Written{Manifest: m, Size: out.n, Digest: digestString(out.whole.Sum(nil))}, nil
}

// plan is a part as described: what the manifest says and where its bytes are.
type plan struct {
	part Part
	file *os.File
	exts []blockfile.Extent
}

// describe reads p once for its extents, size and digest.
func describe(ctx context.Context, p Input) (plan, error) {
	fi, err := p.File.Stat()
	if err != nil {
		return plan{}, err
	}
	if !fi.Mode().IsRegular() {
		return plan{}, fmt.Errorf("%s is not a regular file", p.File.Name())
	}
	size := fi.Size()
	pl := plan{part: Part{Name: p.Name, Kind: p.Kind, LogicalSize: uint64(size)}, file: p.File}
	switch p.Kind {
	case KindBlock:
		if pl.exts, err = blockfile.DataExtents(p.File, size); err != nil {
			return plan{}, err
		}
		pl.part.Extents = uint32(len(pl.exts))
		if len(pl.exts) > DefaultMaxExtents {
			return plan{}, fmt.Errorf("%w: %d extents, at most %d", ErrLimit, len(pl.exts), DefaultMaxExtents)
		}
	case KindBlob:
		pl.exts = []blockfile.Extent{{Off: 0, Len: size}}
	default:
		return plan{}, fmt.Errorf("kind %q is not block or blob", p.Kind)
	}
	h := sha256.New()
	n, err := pl.stream(ctx, h)
	if err != nil {
		return plan{}, err
	}
	pl.part.Size, pl.part.Digest = n, digestString(h.Sum(nil))
	return pl, nil
}

// stream writes the part's body to w and returns its length.
func (pl plan) stream(ctx context.Context, w io.Writer) (uint64, error) {
	var n uint64
	buf := make([]byte, readChunk)
	for _, e := range pl.exts {
		if pl.part.Kind == KindBlock {
			var hdr [extentHeaderLen]byte
			binary.BigEndian.PutUint64(hdr[:8], uint64(e.Off))
			binary.BigEndian.PutUint64(hdr[8:], uint64(e.Len))
			if _, err := w.Write(hdr[:]); err != nil {
				return 0, err
			}
			n += extentHeaderLen
		}
		for off := e.Off; off < e.Off+e.Len; {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			k := min(int64(len(buf)), e.Off+e.Len-off)
			if _, err := pl.file.ReadAt(buf[:k], off); err != nil {
				return 0, fmt.Errorf("read %s at %d: %w", pl.file.Name(), off, err)
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return 0, err
			}
			off += k
			n += uint64(k)
		}
	}
	return n, nil
}

// hashWriter writes an archive, hashing it for the trailer and whole.
type hashWriter struct {
	w *bufio.Writer
	// trail hashes what the trailer's digest covers; whole the archive.
	trail, whole hash.Hash
	n            uint64
	err          error
}

func newHashWriter(w io.Writer) *hashWriter {
	return &hashWriter{w: bufio.NewWriterSize(w, 256<<10), trail: sha256.New(), whole: sha256.New()}
}

func (h *hashWriter) Write(b []byte) (int, error) {
	h.write(b)
	return len(b), h.err
}

func (h *hashWriter) write(b []byte) {
	if h.err != nil {
		return
	}
	_, h.err = h.w.Write(b)
	h.trail.Write(b)
	h.whole.Write(b)
	h.n += uint64(len(b))
}

func (h *hashWriter) header(manifestLen int) {
	var b [headerSize]byte
	copy(b[:], magic)
	binary.BigEndian.PutUint16(b[8:], Version)
	binary.BigEndian.PutUint32(b[12:], uint32(manifestLen))
	h.write(b[:])
}

// part frames and streams one part, checking its digest again.
func (h *hashWriter) part(ctx context.Context, index uint32, p plan) error {
	var b [partHeaderSize]byte
	copy(b[:], partTag)
	binary.BigEndian.PutUint32(b[4:], index)
	binary.BigEndian.PutUint64(b[8:], p.part.Size)
	h.write(b[:])
	sum := sha256.New()
	n, err := p.stream(ctx, io.MultiWriter(h, sum))
	if err != nil {
		return err
	}
	if n != p.part.Size || digestString(sum.Sum(nil)) != p.part.Digest {
		return ErrSourceChanged
	}
	return h.err
}

func (h *hashWriter) trailer(parts uint32) error {
	var b [8]byte
	copy(b[:], trailerTag)
	binary.BigEndian.PutUint32(b[4:], parts)
	h.write(b[:])
	sum := h.trail.Sum(nil)
	h.write(sum)
	if h.err != nil {
		return h.err
	}
	return h.w.Flush()
}
