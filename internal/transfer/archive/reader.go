package archive

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/kibotos/kibotos/internal/node/blockfile"
)

// Sink receives one part as it is read: Truncate to its logical size
// first, then WriteAt for its non-zero blocks only, so a fresh file stays
// as sparse as the source. *os.File is one.
type Sink interface {
	io.WriterAt
	Truncate(size int64) error
}

// Open gives the Sink of a part the manifest lists, called in part order
// after the manifest was validated; a nil Sink discards the part (it is
// still verified).
type Open func(index int, p Part) (Sink, error)

// Read reads and verifies an archive from r: header, manifest, each part
// and the trailer, then that nothing follows. It returns the manifest once
// all of it checked out; any error means the archive is refused (what was
// written to sinks is then the caller's to discard). open may be nil to
// verify only.
func Read(r io.Reader, lim Limits, open Open) (*Manifest, error) {
	lim = lim.withDefaults()
	in := &reader{r: bufio.NewReaderSize(r, 256<<10), h: sha256.New()}
	m, err := in.header(lim)
	if err != nil {
		return nil, err
	}
	for i, p := range m.Parts {
		var sink Sink
		if open != nil {
			if sink, err = open(i, p); err != nil {
				return nil, fmt.Errorf("part %s: %w", p.Name, err)
			}
		}
		if err := in.part(uint32(i), p, sink); err != nil {
			return nil, fmt.Errorf("part %s: %w", p.Name, err)
		}
	}
	if err := in.trailer(uint32(len(m.Parts))); err != nil {
		return nil, err
	}
	return m, nil
}

// Verify reads and verifies an archive without keeping its parts.
func Verify(r io.Reader, lim Limits) (*Manifest, error) { return Read(r, lim, nil) }

// reader reads the archive, hashing what the trailer's digest covers.
type reader struct {
	r *bufio.Reader
	// h hashes every byte read; nil where nothing is hashed (a manifest
	// Locate reads, a body ReadBody reads, whose digest is its own).
	h hash.Hash
	// n counts the bytes read.
	n int64
}

// full reads exactly len(b) bytes into b, hashing and counting them.
func (in *reader) full(b []byte) error {
	if _, err := io.ReadFull(in.r, b); err != nil {
		return truncated(err)
	}
	if in.h != nil {
		in.h.Write(b)
	}
	in.n += int64(len(b))
	return nil
}

// truncated is err of a read that ended early as ErrTruncated.
func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return ErrTruncated
	}
	return err
}

func (in *reader) header(lim Limits) (*Manifest, error) {
	var b [headerSize]byte
	// The magic and version first, so that an unknown version is refused
	// as one rather than as whatever its header might hold.
	if err := in.full(b[:len(magic)+2]); err != nil {
		return nil, err
	}
	if string(b[:len(magic)]) != magic {
		return nil, ErrNotArchive
	}
	if v := binary.BigEndian.Uint16(b[8:]); v != Version {
		return nil, &VersionError{Version: v}
	}
	if err := in.full(b[len(magic)+2:]); err != nil {
		return nil, err
	}
	if reserved := binary.BigEndian.Uint16(b[10:]); reserved != 0 {
		return nil, fmt.Errorf("%w: reserved header field is %d, not 0", ErrFraming, reserved)
	}
	n := binary.BigEndian.Uint32(b[12:])
	if n > lim.MaxManifestBytes {
		return nil, fmt.Errorf("%w: manifest of %d bytes, at most %d", ErrLimit, n, lim.MaxManifestBytes)
	}
	body := make([]byte, n)
	if err := in.full(body); err != nil {
		return nil, err
	}
	return decodeManifest(body, lim)
}

func decodeManifest(body []byte, lim Limits) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	m := &Manifest{}
	if err := dec.Decode(m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the manifest object", ErrManifest)
	}
	if err := m.validate(lim); err != nil {
		return nil, err
	}
	return m, nil
}

// frame reads a frame's tag, telling a part from the trailer.
func (in *reader) frame() (string, error) {
	var tag [4]byte
	if err := in.full(tag[:]); err != nil {
		return "", err
	}
	switch t := string(tag[:]); t {
	case partTag, trailerTag:
		return t, nil
	default:
		return "", fmt.Errorf("%w: frame tag %q", ErrFraming, tag[:])
	}
}

// part reads part index, declared as p, into sink.
func (in *reader) part(index uint32, p Part, sink Sink) error {
	tag, err := in.frame()
	if err != nil {
		return err
	}
	if tag == trailerTag {
		return ErrPartMissing
	}
	var b [partHeaderSize - 4]byte
	if err := in.full(b[:]); err != nil {
		return err
	}
	if got := binary.BigEndian.Uint32(b[:4]); got != index {
		return fmt.Errorf("%w: part frame %d where part %d belongs", ErrFraming, got, index)
	}
	if size := binary.BigEndian.Uint64(b[4:]); size != p.Size {
		return fmt.Errorf("%w: frame of %d bytes, the manifest declares %d", ErrPartSize, size, p.Size)
	}
	return in.body(p, sink)
}

// body reads and verifies the body of part p, its frame header already
// read, into sink: Truncate to its logical size first, then its non-zero
// blocks. It takes p.Size bytes of in at most.
func (in *reader) body(p Part, sink Sink) (err error) {
	if sink != nil {
		if err := sink.Truncate(int64(p.LogicalSize)); err != nil {
			return err
		}
	}
	body := &partBody{in: in, left: p.Size, sum: sha256.New(), sink: sink}
	if p.Kind == KindBlock {
		err = body.extents(p)
	} else {
		err = body.data(0, p.Size)
	}
	if err != nil {
		return err
	}
	if body.left != 0 {
		return fmt.Errorf("%w: %d bytes of the frame hold no extent", ErrPartSize, body.left)
	}
	if digestString(body.sum.Sum(nil)) != p.Digest {
		return fmt.Errorf("%w: content differs from %s", ErrDigest, p.Digest)
	}
	return nil
}

// partBody is the rest of one part's body.
type partBody struct {
	in   *reader
	left uint64
	sum  hash.Hash
	sink Sink
	buf  []byte
}

// take reads n bytes of the body (n ≤ left, checked by the caller).
func (b *partBody) take(n int) ([]byte, error) {
	if cap(b.buf) < n {
		b.buf = make([]byte, n)
	}
	buf := b.buf[:n]
	if err := b.in.full(buf); err != nil {
		return nil, err
	}
	b.sum.Write(buf)
	b.left -= uint64(n)
	return buf, nil
}

// extents reads a block part's extents: each in order after the one
// before, within the logical size, and all of them within the frame.
func (b *partBody) extents(p Part) error {
	var end uint64
	for i := range p.Extents {
		if b.left < extentHeaderLen {
			return fmt.Errorf("%w: the frame ends before extent %d", ErrPartSize, i)
		}
		hdr, err := b.take(extentHeaderLen)
		if err != nil {
			return err
		}
		off, n := binary.BigEndian.Uint64(hdr[:8]), binary.BigEndian.Uint64(hdr[8:])
		switch {
		case n == 0:
			return fmt.Errorf("%w: extent %d is empty", ErrExtent, i)
		case off < end:
			return fmt.Errorf("%w: extent %d at %d overlaps or precedes the one before (ending at %d)", ErrExtent, i, off, end)
		case off > p.LogicalSize || n > p.LogicalSize-off:
			return fmt.Errorf("%w: extent %d [%d, +%d) lies outside the logical size %d", ErrExtent, i, off, n, p.LogicalSize)
		case n > b.left:
			return fmt.Errorf("%w: extent %d of %d bytes overruns the frame (%d left)", ErrPartSize, i, n, b.left)
		}
		if err := b.data(off, n); err != nil {
			return err
		}
		end = off + n
	}
	return nil
}

// data reads n bytes of content that belong at off.
func (b *partBody) data(off, n uint64) error {
	for n > 0 {
		k := min(n, readChunk)
		buf, err := b.take(int(k))
		if err != nil {
			return err
		}
		if b.sink != nil {
			if err := blockfile.WriteNonZero(b.sink, buf, int64(off)); err != nil {
				return err
			}
		}
		off, n = off+k, n-k
	}
	return nil
}

// trailer reads the trailer (after all parts were read) and checks that
// nothing follows it.
func (in *reader) trailer(parts uint32) error {
	tag, err := in.frame()
	if err != nil {
		return err
	}
	if tag == partTag {
		return ErrPartExtra
	}
	var count [4]byte
	if err := in.full(count[:]); err != nil {
		return err
	}
	if got := binary.BigEndian.Uint32(count[:]); got != parts {
		return fmt.Errorf("%w: the trailer counts %d parts, the manifest %d", ErrFraming, got, parts)
	}
	want := in.h.Sum(nil)
	var sum [sha256.Size]byte
	if err := in.full(sum[:]); err != nil {
		return err
	}
	if !bytes.Equal(sum[:], want) {
		return fmt.Errorf("%w: the archive's content differs from its trailer digest", ErrDigest)
	}
	if _, err := in.r.ReadByte(); !errors.Is(err, io.EOF) {
		if err != nil {
			return err
		}
		return ErrTrailingData
	}
	return nil
}
