package archive_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kibotos/kibotos/internal/node/blockfile"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// sparseFile makes a file of size with data written at the given offsets
// (random bytes of the given lengths) and returns it open.
func sparseFile(t testing.TB, path string, size int64, writes map[int64]int64) *os.File {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, n := range writes {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func workspaceManifest() archive.Manifest {
	return archive.Manifest{
		Source:       archive.Source{Kind: archive.SourceWorkspace, ID: "ws-1", Spec: json.RawMessage(`{"template":{"name":"base"}}`)},
		Template:     &archive.Revision{Name: "base", Revision: "3", Digest: "sha256:" + hex.EncodeToString(make([]byte, 32))},
		Completeness: "complete",
		CreatedAt:    time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC),
	}
}

// usedBytes is how much of f the filesystem allocated.
func usedBytes(t testing.TB, f *os.File) int64 {
	t.Helper()
	exts, err := blockfile.DataExtents(f, size(t, f))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range exts {
		n += e.Len
	}
	return n
}

func size(t testing.TB, f *os.File) int64 {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// A few MiB at offsets of a 1 GiB sparse file: the archive holds only the
// used blocks, and the restored file has the same content and holes.
func TestRoundTripSparseBlockFile(t *testing.T) {
	dir := t.TempDir()
	src, blob, buf, w := writeSample(t, dir)
	used := usedBytes(t, src)
	if used > 4*mib || used < 3*mib {
		t.Fatalf("source uses %d bytes; the test meant a few MiB", used)
	}
	if got := int64(buf.Len()); got > used+64*kib {
		t.Fatalf("archive is %d bytes for %d used bytes: not sparse", got, used)
	}
	if uint64(buf.Len()) != w.Size {
		t.Fatalf("Written.Size %d, wrote %d", w.Size, buf.Len())
	}
	sum := sha256.Sum256(buf.Bytes())
	if w.Digest != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("Written.Digest %s is not the archive's sha256", w.Digest)
	}
	p := w.Manifest.Parts[0]
	if p.LogicalSize != uint64(gib) || p.DataBytes() != uint64(used) || p.Extents != 4 {
		t.Fatalf("rootfs part %+v: want logical size 1 GiB, %d data bytes in 4 extents", p, used)
	}

	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := archive.Extract(bytes.NewReader(buf.Bytes()), out, archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Source.Spec) != `{"template":{"name":"base"}}` || m.Template.Revision != "3" || len(m.Parts) != 2 {
		t.Fatalf("manifest read back as %+v", m)
	}
	sameRestored(t, out, src, blob)
}

// writeSample writes in dir a 1 GiB sparse file holding a few MiB of data
// in 4 places and a small blob, and an archive of them as the parts rootfs
// (block) and template-image (blob).
func writeSample(t *testing.T, dir string) (src, blob *os.File, buf *bytes.Buffer, w *archive.Written) {
	t.Helper()
	writes := map[int64]int64{0: mib, 300 * mib: 2 * mib, 700*mib + 4*kib: 512 * kib, gib - 64*kib: 64 * kib}
	src = sparseFile(t, filepath.Join(dir, "src"), gib, writes)
	blob = sparseFile(t, filepath.Join(dir, "image"), 10*kib+3, map[int64]int64{0: 10*kib + 3})
	buf = &bytes.Buffer{}
	w, err := archive.Write(context.Background(), buf, workspaceManifest(),
		[]archive.Input{{Name: "rootfs", Kind: archive.KindBlock, File: src}, {Name: "template-image", Kind: archive.KindBlob, File: blob}})
	if err != nil {
		t.Fatal(err)
	}
	return src, blob, buf, w
}

// sameRestored checks that dir holds the part rootfs as src, content and
// holes, and the part template-image as blob.
func sameRestored(t *testing.T, dir string, src, blob *os.File) {
	t.Helper()
	restored, err := os.Open(filepath.Join(dir, "rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close()
	sameSparseContent(t, src, restored)
	restoredBlob, err := os.ReadFile(filepath.Join(dir, "template-image"))
	if err != nil {
		t.Fatal(err)
	}
	wantBlob, _ := os.ReadFile(blob.Name())
	if !bytes.Equal(restoredBlob, wantBlob) {
		t.Fatal("blob part restored with other content")
	}
}

// sameSparseContent checks that b has a's size, holes and content: the
// same data extents (as SEEK_DATA reports them) holding the same bytes.
// Outside them both read as zeros by definition of a hole.
func sameSparseContent(t *testing.T, a, b *os.File) {
	t.Helper()
	if size(t, a) != size(t, b) {
		t.Fatalf("restored size %d, source %d", size(t, b), size(t, a))
	}
	ea, err := blockfile.DataExtents(a, size(t, a))
	if err != nil {
		t.Fatal(err)
	}
	eb, err := blockfile.DataExtents(b, size(t, b))
	if err != nil {
		t.Fatal(err)
	}
	if len(ea) != len(eb) {
		t.Fatalf("restored extents %v, source %v", eb, ea)
	}
	for i := range ea {
		if ea[i] != eb[i] {
			t.Fatalf("restored extents %v, source %v", eb, ea)
		}
		ba, bb := make([]byte, ea[i].Len), make([]byte, ea[i].Len)
		if _, err := a.ReadAt(ba, ea[i].Off); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ReadAt(bb, eb[i].Off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ba, bb) {
			t.Fatalf("extent %v restored with other content", ea[i])
		}
	}
}

// A block of zeros inside a data extent is written back as a hole.
func TestZeroBlocksBecomeHoles(t *testing.T) {
	dir := t.TempDir()
	src := sparseFile(t, filepath.Join(dir, "src"), 16*mib, map[int64]int64{0: 4 * kib, 64 * kib: 4 * kib})
	if _, err := src.WriteAt(make([]byte, 60*kib), 4*kib); err != nil { // explicit zeros between
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := archive.Write(context.Background(), &buf, workspaceManifest(), []archive.Input{{Name: "disk", Kind: archive.KindBlock, File: src}}); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := archive.Extract(&buf, out, archive.Limits{}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(out, "disk"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := usedBytes(t, f); got != 8*kib {
		t.Fatalf("restored file uses %d bytes; want the two non-zero 4 KiB blocks", got)
	}
}

// --- hand-built archives, to make every way of lying ---

type ext struct {
	off  uint64
	data []byte
}

func blockBody(exts ...ext) []byte {
	var b []byte
	for _, e := range exts {
		b = binary.BigEndian.AppendUint64(b, e.off)
		b = binary.BigEndian.AppendUint64(b, uint64(len(e.data)))
		b = append(b, e.data...)
	}
	return b
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// raw is an archive spelt out: a manifest (as the test means it, truthful
// or not), the bodies framed in order, and a trailer.
type raw struct {
	version  uint16
	manifest any
	bodies   [][]byte
	// frameSize overrides a body's frame size when set.
	frameSize map[int]uint64
	// trailerParts overrides the trailer's part count when not -1.
	trailerParts int
}

func (r raw) encode(t testing.TB) []byte {
	t.Helper()
	mj, err := json.Marshal(r.manifest)
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	b = append(b, "KBTOSARC"...)
	b = binary.BigEndian.AppendUint16(b, r.version)
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(mj)))
	b = append(b, mj...)
	for i, body := range r.bodies {
		n, ok := r.frameSize[i]
		if !ok {
			n = uint64(len(body))
		}
		b = append(b, "PART"...)
		b = binary.BigEndian.AppendUint32(b, uint32(i))
		b = binary.BigEndian.AppendUint64(b, n)
		b = append(b, body...)
	}
	parts := len(r.bodies)
	if r.trailerParts >= 0 {
		parts = r.trailerParts
	}
	b = append(b, "END."...)
	b = binary.BigEndian.AppendUint32(b, uint32(parts))
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// valid is a small truthful archive: a sparse block part and a blob.
func valid() raw {
	block := blockBody(ext{0, bytes.Repeat([]byte{1}, 4096)}, ext{8192, bytes.Repeat([]byte{2}, 100)})
	blob := []byte("template image bytes")
	m := workspaceManifest()
	m.Parts = []archive.Part{
		{Name: "rootfs", Kind: archive.KindBlock, Size: uint64(len(block)), LogicalSize: 1 << 20, Extents: 2, Digest: digest(block)},
		{Name: "image", Kind: archive.KindBlob, Size: uint64(len(blob)), LogicalSize: uint64(len(blob)), Digest: digest(blob)},
	}
	return raw{version: 1, manifest: m, bodies: [][]byte{block, blob}, trailerParts: -1}
}

func manifestOf(r raw) *archive.Manifest {
	m := r.manifest.(archive.Manifest)
	m.Parts = append([]archive.Part(nil), m.Parts...)
	return &m
}

func TestValidHandBuiltArchive(t *testing.T) {
	if _, err := archive.Verify(bytes.NewReader(valid().encode(t)), archive.Limits{}); err != nil {
		t.Fatalf("the valid archive is refused: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	withPart := func(i int, f func(p *archive.Part)) raw {
		r := valid()
		m := manifestOf(r)
		f(&m.Parts[i])
		r.manifest = *m
		return r
	}
	withBlock := func(exts ...ext) raw {
		r := valid()
		r.bodies = [][]byte{blockBody(exts...), r.bodies[1]}
		m := manifestOf(r)
		m.Parts[0].Size, m.Parts[0].Extents, m.Parts[0].Digest = uint64(len(r.bodies[0])), uint32(len(exts)), digest(r.bodies[0])
		r.manifest = *m
		return r
	}
	good := valid().encode(t)
	cases := []struct {
		name  string
		bytes func() []byte
		lim   archive.Limits
		want  error
	}{
		{"not an archive", func() []byte { return append([]byte("PK\x03\x04"), good[4:]...) }, archive.Limits{}, archive.ErrNotArchive},
		{"unknown version", func() []byte { r := valid(); r.version = 2; return r.encode(t) }, archive.Limits{}, archive.ErrVersion},
		{"truncated in the header", func() []byte { return good[:5] }, archive.Limits{}, archive.ErrTruncated},
		{"truncated in a part", func() []byte { return good[:len(good)-70] }, archive.Limits{}, archive.ErrTruncated},
		{"truncated in the trailer", func() []byte { return good[:len(good)-1] }, archive.Limits{}, archive.ErrTruncated},
		{"empty", func() []byte { return nil }, archive.Limits{}, archive.ErrTruncated},
		{"part content differs from its digest", func() []byte {
			r := valid()
			r.bodies[1] = []byte("template image BYTES")
			return r.encode(t)
		}, archive.Limits{}, archive.ErrDigest},
		{"archive differs from its trailer digest", func() []byte {
			b := bytes.Clone(good)
			b[len(b)-1] ^= 1
			return b
		}, archive.Limits{}, archive.ErrDigest},
		{"part missing", func() []byte { r := valid(); r.bodies = r.bodies[:1]; return r.encode(t) }, archive.Limits{}, archive.ErrPartMissing},
		{"extra part", func() []byte { r := valid(); r.bodies = append(r.bodies, []byte("x")); return r.encode(t) }, archive.Limits{}, archive.ErrPartExtra},
		{"part larger than declared", func() []byte {
			return withPart(1, func(p *archive.Part) { p.Size--; p.LogicalSize-- }).encode(t)
		}, archive.Limits{}, archive.ErrPartSize},
		{"part smaller than declared", func() []byte {
			return withPart(1, func(p *archive.Part) { p.Size++; p.LogicalSize++ }).encode(t)
		}, archive.Limits{}, archive.ErrPartSize},
		{"extents hold fewer bytes than the frame", func() []byte {
			r := withPart(0, func(p *archive.Part) { p.Extents = 1 })
			return r.encode(t)
		}, archive.Limits{}, archive.ErrPartSize},
		{"extent overruns the frame", func() []byte {
			r := valid()
			body := bytes.Clone(r.bodies[0])
			binary.BigEndian.PutUint64(body[8:], 5000) // first extent claims more than it holds
			r.bodies[0] = body
			return withDigest(r, 0).encode(t)
		}, archive.Limits{}, archive.ErrPartSize},
		{"extent outside the logical size", func() []byte {
			return withBlock(ext{1<<20 - 10, make([]byte, 20)}).encode(t)
		}, archive.Limits{}, archive.ErrExtent},
		{"overlapping extents", func() []byte {
			return withBlock(ext{0, make([]byte, 4096)}, ext{4000, make([]byte, 10)}).encode(t)
		}, archive.Limits{}, archive.ErrExtent},
		{"extents out of order", func() []byte {
			return withBlock(ext{8192, make([]byte, 10)}, ext{0, make([]byte, 10)}).encode(t)
		}, archive.Limits{}, archive.ErrExtent},
		{"empty extent", func() []byte { return withBlock(ext{0, nil}).encode(t) }, archive.Limits{}, archive.ErrExtent},
		{"manifest over the limit", func() []byte { return good }, archive.Limits{MaxManifestBytes: 64}, archive.ErrLimit},
		{"too many parts", func() []byte { return good }, archive.Limits{MaxParts: 1}, archive.ErrLimit},
		{"too many extents", func() []byte { return good }, archive.Limits{MaxExtents: 1}, archive.ErrLimit},
		{"logical size over the limit", func() []byte { return good }, archive.Limits{MaxLogicalSize: 1 << 10}, archive.ErrLimit},
		{"data after the trailer", func() []byte { return append(bytes.Clone(good), 0) }, archive.Limits{}, archive.ErrTrailingData},
		{"trailer miscounts the parts", func() []byte { r := valid(); r.trailerParts = 3; return r.encode(t) }, archive.Limits{}, archive.ErrFraming},
		{"frame size differs from the manifest", func() []byte {
			r := valid()
			r.frameSize = map[int]uint64{1: 3}
			return r.encode(t)
		}, archive.Limits{}, archive.ErrPartSize},
		{"manifest with an unknown field", func() []byte {
			r := valid()
			r.manifest = map[string]any{"source": map[string]any{"kind": "volume"}, "parts": []any{}, "surprise": 1}
			r.bodies = nil
			return r.encode(t)
		}, archive.Limits{}, archive.ErrManifest},
		{"part name reaching out", func() []byte {
			return withPart(1, func(p *archive.Part) { p.Name = "../escape" }).encode(t)
		}, archive.Limits{}, archive.ErrManifest},
		{"repeated part name", func() []byte {
			return withPart(1, func(p *archive.Part) { p.Name = "rootfs" }).encode(t)
		}, archive.Limits{}, archive.ErrManifest},
		{"unknown part kind", func() []byte {
			return withPart(1, func(p *archive.Part) { p.Kind = "tar" }).encode(t)
		}, archive.Limits{}, archive.ErrManifest},
		{"unknown source kind", func() []byte {
			r := valid()
			m := manifestOf(r)
			m.Source.Kind = "node"
			r.manifest = *m
			return r.encode(t)
		}, archive.Limits{}, archive.ErrManifest},
	}
	all := []error{archive.ErrNotArchive, archive.ErrVersion, archive.ErrTruncated, archive.ErrManifest, archive.ErrLimit,
		archive.ErrFraming, archive.ErrPartMissing, archive.ErrPartExtra, archive.ErrPartSize, archive.ErrExtent,
		archive.ErrDigest, archive.ErrTrailingData}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			_, err := archive.Extract(bytes.NewReader(c.bytes()), out, c.lim)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			for _, other := range all {
				if other != c.want && errors.Is(err, other) {
					t.Fatalf("%v is also %v: the errors are not distinct", err, other)
				}
			}
			if left, _ := os.ReadDir(out); len(left) != 0 {
				t.Fatalf("a refused archive left %d files", len(left))
			}
		})
	}
}

// withDigest sets part i's digest to its body's.
func withDigest(r raw, i int) raw {
	m := manifestOf(r)
	m.Parts[i].Digest = digest(r.bodies[i])
	r.manifest = *m
	return r
}

func TestUnknownVersionSaysWhich(t *testing.T) {
	r := valid()
	r.version = 7
	_, err := archive.Verify(bytes.NewReader(r.encode(t)), archive.Limits{})
	var v *archive.VersionError
	if !errors.As(err, &v) || v.Version != 7 {
		t.Fatalf("got %v, want a VersionError of version 7", err)
	}
}

// Changing any one byte of an archive, or cutting it anywhere, is refused.
func TestEveryByteFlipAndCutRefused(t *testing.T) {
	good := valid().encode(t)
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x20
		if _, err := archive.Verify(bytes.NewReader(b), archive.Limits{}); err == nil {
			t.Fatalf("flipping byte %d was accepted", i)
		}
		if _, err := archive.Verify(bytes.NewReader(good[:i]), archive.Limits{}); err == nil {
			t.Fatalf("cut at %d was accepted", i)
		}
	}
}
