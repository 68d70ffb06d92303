package archive_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kibotos/kibotos/internal/transfer/archive"
)

// Each part's span, fed to ReadBody alone (as ctrl serves one part of an
// archive it holds and a node writes it into a fresh file), restores the
// part as Extract does: same content, same holes.
func TestLocateAndReadBodyRestore(t *testing.T) {
	src, blob, buf, w := writeSample(t, t.TempDir())
	ar := bytes.NewReader(buf.Bytes())
	m, spans, err := archive.Locate(ar, archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 2 || len(m.Parts) != 2 || m.Parts[0] != w.Manifest.Parts[0] || m.Parts[1] != w.Manifest.Parts[1] {
		t.Fatalf("located %+v, %v; wrote %+v", m.Parts, spans, w.Manifest.Parts)
	}
	if end := spans[1].Offset + int64(spans[1].Size) + 40; end != int64(buf.Len()) {
		t.Fatalf("the last span and the trailer end at %d, the archive at %d", end, buf.Len())
	}

	out := t.TempDir()
	for i, s := range spans {
		p := m.Parts[i]
		if s.Size != p.Size {
			t.Fatalf("span %d of %d bytes, part %s of %d", i, s.Size, p.Name, p.Size)
		}
		f, err := os.OpenFile(filepath.Join(out, p.Name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if err := archive.ReadBody(io.NewSectionReader(ar, s.Offset, int64(s.Size)), p, f, archive.Limits{}); err != nil {
			t.Fatalf("part %s: %v", p.Name, err)
		}
		// From the span to the end of the archive: the next frame is left unread.
		rest := io.NewSectionReader(ar, s.Offset, int64(buf.Len())-s.Offset)
		if err := archive.ReadBody(rest, p, nil, archive.Limits{}); err != nil {
			t.Fatalf("part %s followed by more: %v", p.Name, err)
		}
		if pos, _ := rest.Seek(0, io.SeekCurrent); pos != int64(s.Size) {
			t.Fatalf("part %s: ReadBody read %d bytes of a %d-byte body", p.Name, pos, s.Size)
		}
	}
	sameRestored(t, out, src, blob)
}

func TestReadBodyRefusals(t *testing.T) {
	r := valid()
	parts := manifestOf(r).Parts
	block, blob := r.bodies[0], r.bodies[1]
	flip := func(b []byte, i int, bit byte) []byte {
		b = bytes.Clone(b)
		b[i] ^= bit
		return b
	}
	cases := []struct {
		name string
		part archive.Part
		body []byte
		lim  archive.Limits
		want error
	}{
		{"a flipped data byte of a block part", parts[0], flip(block, 16+100, 1), archive.Limits{}, archive.ErrDigest},
		{"a flipped extent length", parts[0], flip(block, 8, 0x80), archive.Limits{}, archive.ErrExtent},
		{"a flipped extent offset", parts[0], flip(block, 16+4096, 0x80), archive.Limits{}, archive.ErrExtent},
		{"a flipped byte of a blob", parts[1], flip(blob, 3, 1), archive.Limits{}, archive.ErrDigest},
		{"a block body one byte short", parts[0], block[:len(block)-1], archive.Limits{}, archive.ErrTruncated},
		{"a blob one byte short", parts[1], blob[:len(blob)-1], archive.Limits{}, archive.ErrTruncated},
		{"extents under-filling the body", func() archive.Part { p := parts[0]; p.Extents = 1; return p }(), block, archive.Limits{}, archive.ErrPartSize},
		{"a part name reaching out", func() archive.Part { p := parts[1]; p.Name = "../x"; return p }(), blob, archive.Limits{}, archive.ErrManifest},
		{"a blob with extents", func() archive.Part { p := parts[1]; p.Extents = 1; return p }(), blob, archive.Limits{}, archive.ErrManifest},
		{"a logical size over the limit", parts[0], block, archive.Limits{MaxLogicalSize: 1 << 10}, archive.ErrLimit},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "part"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			err = archive.ReadBody(bytes.NewReader(c.body), c.part, f, c.lim)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if errors.Is(c.want, archive.ErrManifest) || errors.Is(c.want, archive.ErrLimit) {
				if fi, _ := f.Stat(); fi.Size() != 0 {
					t.Fatalf("a part refused before reading truncated its sink to %d", fi.Size())
				}
			}
		})
	}
	for i, p := range parts {
		if err := archive.ReadBody(bytes.NewReader(r.bodies[i]), p, nil, archive.Limits{}); err != nil {
			t.Fatalf("the valid body of %s is refused: %v", p.Name, err)
		}
	}
}

func TestLocateRefusals(t *testing.T) {
	good := valid().encode(t)
	// resized declares part i one byte longer in the manifest and, when
	// inFrame, in its frame too, so that the frame after it is one byte off.
	resized := func(i int, inFrame bool) []byte {
		r := valid()
		m := manifestOf(r)
		m.Parts[i].Size++
		if m.Parts[i].Kind == archive.KindBlob {
			m.Parts[i].LogicalSize++
		}
		r.manifest = *m
		if inFrame {
			r.frameSize = map[int]uint64{i: m.Parts[i].Size}
		}
		return r.encode(t)
	}
	cases := []struct {
		name  string
		bytes []byte
		lim   archive.Limits
		want  error
	}{
		{"not an archive", append([]byte("PK\x03\x04"), good[4:]...), archive.Limits{}, archive.ErrNotArchive},
		{"unknown version", func() []byte { r := valid(); r.version = 2; return r.encode(t) }(), archive.Limits{}, archive.ErrVersion},
		{"truncated in the header", good[:5], archive.Limits{}, archive.ErrTruncated},
		{"truncated in the manifest", good[:40], archive.Limits{}, archive.ErrTruncated},
		{"truncated in the last body", good[:len(good)-41], archive.Limits{}, archive.ErrTruncated},
		{"manifest over the limit", good, archive.Limits{MaxManifestBytes: 64}, archive.ErrLimit},
		{"manifest declares another size than the frame", resized(0, false), archive.Limits{}, archive.ErrFraming},
		{"manifest declares another size for the last part", resized(1, false), archive.Limits{}, archive.ErrFraming},
		{"the next frame is not where the sizes put it", resized(0, true), archive.Limits{}, archive.ErrFraming},
		{"the trailer is not where the sizes put it", resized(1, true), archive.Limits{}, archive.ErrFraming},
		{"a frame with another index", func() []byte { b := bytes.Clone(good); i := bytes.Index(b, []byte("PART")); b[i+7] = 1; return b }(), archive.Limits{}, archive.ErrFraming},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, spans, err := archive.Locate(bytes.NewReader(c.bytes), c.lim)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v (spans %v), want %v", err, spans, c.want)
			}
		})
	}
}
