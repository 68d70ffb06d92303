package archive

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kibotos/kibotos/internal/node/blockfile"
)

// Body is one part's body about to be streamed. Part is what the manifest
// says of it: Name, Kind, LogicalSize, Extents and Size are known before a
// byte of data is read (a block part's size is its extents' lengths plus
// 16 bytes of header each); Digest is empty until Stream filled it in.
type Body struct {
	Part Part
	file *os.File
	// exts are the ranges of file the body carries: a block part's data
	// extents, or the whole of a blob.
	exts []blockfile.Extent
}

// NewBody plans in without reading its data: a block part's data extents
// (as Write finds them), a blob part's length. It refuses what Write refuses
// (too many extents: ErrLimit; bad kind; not a regular file).
func NewBody(in Input) (*Body, error) {
	fi, err := in.File.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", in.File.Name())
	}
	size := fi.Size()
	b := &Body{Part: Part{Name: in.Name, Kind: in.Kind, LogicalSize: uint64(size)}, file: in.File}
	switch in.Kind {
	case KindBlock:
		if b.exts, err = blockfile.DataExtents(in.File, size); err != nil {
			return nil, err
		}
		if len(b.exts) > DefaultMaxExtents {
			return nil, fmt.Errorf("%w: %d extents, at most %d", ErrLimit, len(b.exts), DefaultMaxExtents)
		}
		b.Part.Extents = uint32(len(b.exts))
		b.Part.Size = uint64(len(b.exts)) * extentHeaderLen
	case KindBlob:
		b.exts = []blockfile.Extent{{Off: 0, Len: size}}
	default:
		return nil, fmt.Errorf("kind %q is not block or blob", in.Kind)
	}
	for _, e := range b.exts {
		b.Part.Size += uint64(e.Len)
	}
	return b, nil
}

// Stream writes the body to w, hashing it, and returns its digest
// ("sha256:<hex>"); it also sets b.Part.Digest. A body whose length differs
// from b.Part.Size (the file changed since NewBody) is ErrSourceChanged.
func (b *Body) Stream(ctx context.Context, w io.Writer) (string, error) {
	sum := sha256.New()
	n, err := b.stream(ctx, io.MultiWriter(w, sum))
	if err != nil {
		return "", err
	}
	if n != b.Part.Size {
		return "", fmt.Errorf("%w: streamed %d bytes of a %d-byte body", ErrSourceChanged, n, b.Part.Size)
	}
	if err := b.unchanged(); err != nil {
		return "", err
	}
	b.Part.Digest = digestString(sum.Sum(nil))
	return b.Part.Digest, nil
}

// unchanged plans the file again once it was streamed. The extents read
// were fixed by NewBody, so a file that grew or had holes filled meanwhile
// streams the planned length all the same; only a new plan shows that the
// body it would make now, which the manifest must describe, is another.
func (b *Body) unchanged() error {
	now, err := NewBody(Input{Name: b.Part.Name, Kind: b.Part.Kind, File: b.file})
	if err != nil {
		return err
	}
	if now.Part.Size != b.Part.Size || now.Part.LogicalSize != b.Part.LogicalSize {
		return fmt.Errorf("%w: %s now makes a body of %d bytes (logical size %d), planned %d (%d)", ErrSourceChanged,
			b.file.Name(), now.Part.Size, now.Part.LogicalSize, b.Part.Size, b.Part.LogicalSize)
	}
	return nil
}

// stream writes the body, each block extent after its header, and returns
// its length.
func (b *Body) stream(ctx context.Context, w io.Writer) (uint64, error) {
	var n uint64
	buf := make([]byte, readChunk)
	for _, e := range b.exts {
		if b.Part.Kind == KindBlock {
			var hdr [extentHeaderLen]byte
			binary.BigEndian.PutUint64(hdr[:8], uint64(e.Off))
			binary.BigEndian.PutUint64(hdr[8:], uint64(e.Len))
			if _, err := w.Write(hdr[:]); err != nil {
				return 0, err
			}
			n += extentHeaderLen
		}
		if err := copyAt(ctx, w, b.file, e.Off, e.Len, buf); err != nil {
			return 0, err
		}
		n += uint64(e.Len)
	}
	return n, nil
}

// copyAt writes f's bytes [off, off+n) to w a buffer at a time, checking
// ctx between reads. f ending before them means it changed (shrank) since
// its length was taken.
func copyAt(ctx context.Context, w io.Writer, f *os.File, off, n int64, buf []byte) error {
	for end := off + n; off < end; {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := min(int64(len(buf)), end-off)
		if _, err := f.ReadAt(buf[:k], off); err != nil {
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("%w: %s ends before %d", ErrSourceChanged, f.Name(), off+k)
			}
			return fmt.Errorf("read %s at %d: %w", f.Name(), off, err)
		}
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		off += k
	}
	return nil
}
