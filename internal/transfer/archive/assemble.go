package archive

import (
	"context"
	"io"
	"os"
)

// Staged is a part whose encoded body is already in File (what Stream
// wrote), with its manifest entry complete (Size, Digest, Extents, LogicalSize).
type Staged struct {
	Part Part
	File *os.File // read with ReadAt from offset 0
}

// Assemble frames an archive of m with the staged parts in order: header,
// manifest (m.Parts replaced by the parts' entries), each part's frame and
// body copied from its file, trailer. Each body is checked again as it is
// copied: a file whose length or sha256 differs from its entry is
// ErrSourceChanged (nothing more is written after). It refuses what a reader
// with default limits would refuse, as Write does. Zero parts is allowed
// (a Workspace archive with no Volume and no layer).
func Assemble(ctx context.Context, w io.Writer, m Manifest, parts []Staged) (*Written, error) {
	m.Parts = make([]Part, len(parts))
	bodies := make([]body, len(parts))
	for i, p := range parts {
		m.Parts[i], bodies[i] = p.Part, p
	}
	return frame(ctx, w, m, bodies)
}

// stream copies the staged body, Size bytes of it and no more, so that
// the frame never holds more than it declares; a file longer than that
// counts one byte more, for the caller to see a length that differs.
func (s Staged) stream(ctx context.Context, w io.Writer) (uint64, error) {
	if err := copyAt(ctx, w, s.File, 0, int64(s.Part.Size), make([]byte, readChunk)); err != nil {
		return 0, err
	}
	var more [1]byte
	if k, _ := s.File.ReadAt(more[:], int64(s.Part.Size)); k > 0 {
		return s.Part.Size + 1, nil
	}
	return s.Part.Size, nil
}
