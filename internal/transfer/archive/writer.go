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
	m.Parts = make([]Part, len(in))
	bodies := make([]body, len(in))
	for i, p := range in {
		b, err := NewBody(p)
		if err == nil {
			_, err = b.Stream(ctx, io.Discard)
		}
		if err != nil {
			return nil, fmt.Errorf("part %s: %w", p.Name, err)
		}
		m.Parts[i], bodies[i] = b.Part, b
	}
	return frame(ctx, w, m, bodies)
}

// body is a part's body as the framing copies it: a file read through its
// Body's plan (Write), or an encoded body staged in a file (Assemble).
// stream writes it and returns its length, which with its digest the
// framing checks against the manifest's entry.
type body interface {
	stream(ctx context.Context, w io.Writer) (uint64, error)
}

// frame writes the archive of m, whose Parts describe bodies in order.
func frame(ctx context.Context, w io.Writer, m Manifest, bodies []body) (*Written, error) {
	if err := m.validate(Limits{}.withDefaults()); err != nil {
		return nil, err
	}
	mj, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	if len(mj) > DefaultMaxManifestBytes {
		return nil, fmt.Errorf("%w: manifest of %d bytes, at most %d", ErrLimit, len(mj), DefaultMaxManifestBytes)
	}
	out := newHashWriter(w)
	out.header(len(mj))
	out.write(mj)
	for i, b := range bodies {
		if err := out.part(ctx, uint32(i), m.Parts[i], b); err != nil {
			return nil, fmt.Errorf("part %s: %w", m.Parts[i].Name, err)
		}
	}
	if err := out.trailer(uint32(len(bodies))); err != nil {
		return nil, err
	}
	return &Written{Manifest: m, Size: out.n, Digest: digestString(out.whole.Sum(nil))}, nil
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

// part frames and streams one part, checking its length and digest
// against p again: the manifest, already written, vouches for them.
func (h *hashWriter) part(ctx context.Context, index uint32, p Part, b body) error {
	hdr := partFrame(index, p.Size)
	h.write(hdr[:])
	sum := sha256.New()
	n, err := b.stream(ctx, io.MultiWriter(h, sum))
	if err != nil {
		return err
	}
	if d := digestString(sum.Sum(nil)); n != p.Size || d != p.Digest {
		return fmt.Errorf("%w: body of %d bytes, %s; the manifest says %d, %s", ErrSourceChanged, n, d, p.Size, p.Digest)
	}
	return h.err
}

// partFrame is the frame header of part index, size bytes long.
func partFrame(index uint32, size uint64) [partHeaderSize]byte {
	var hdr [partHeaderSize]byte
	copy(hdr[:], partTag)
	binary.BigEndian.PutUint32(hdr[4:], index)
	binary.BigEndian.PutUint64(hdr[8:], size)
	return hdr
}

// trailerFrame is the trailer's tag and part count, before its digest.
func trailerFrame(parts uint32) [trailerSize - sha256.Size]byte {
	var b [trailerSize - sha256.Size]byte
	copy(b[:], trailerTag)
	binary.BigEndian.PutUint32(b[4:], parts)
	return b
}

func (h *hashWriter) trailer(parts uint32) error {
	b := trailerFrame(parts)
	h.write(b[:])
	sum := h.trail.Sum(nil)
	h.write(sum)
	if h.err != nil {
		return h.err
	}
	return h.w.Flush()
}
