package template

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The unpack fuzz target builds tar layers from the fuzz input, read as a
// little program of entries, so that every input is a well-formed stream
// and the search spends its time on what unpack does with names, links and
// modes rather than on archive/tar's own parsing.

// fuzzNames are the path components names are made of; fuzzTargets the
// link targets. A raw name or target comes from the input itself; a raw
// target has its ".." defused and an absolute one is anchored in the
// sandbox, so that even a broken unpack could not reach beyond it.
var (
	fuzzNames   = []string{"a", "b", "c", "..", ".", "", ".wh.a", ".wh..wh..opq", "victim", "outside"}
	fuzzTargets = []string{"a", "b", "a/b", ".", "..", "../outside", "../outside/victim", "../outside/b",
		"{outside}", "{outside}/victim", "{outside}/b", "{outside}/new", "{dir}", "{dir}/a", ""}
)

type fuzzEntry struct {
	typ        byte
	name, link string
	mode       int64
	body       []byte
}

type fuzzReader struct{ data []byte }

func (r *fuzzReader) next() byte {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return b
}

func (r *fuzzReader) raw(n int) string {
	n = min(n, len(r.data))
	s := string(r.data[:n])
	r.data = r.data[n:]
	return s
}

func (r *fuzzReader) name() string {
	b := r.next()
	if b&0x80 != 0 {
		return r.raw(int(b & 0x3f))
	}
	parts := make([]string, int(b%3)+1)
	for i := range parts {
		parts[i] = fuzzNames[int(r.next())%len(fuzzNames)]
	}
	n := strings.Join(parts, "/")
	if b&0x40 != 0 {
		n = "/" + n
	}
	return n
}

func (r *fuzzReader) target(sandbox, dir string) string {
	b := r.next()
	var t string
	if b&0x80 != 0 {
		t = strings.ReplaceAll(r.raw(int(b&0x3f)), "..", "__")
		if strings.HasPrefix(t, "/") {
			t = sandbox + t
		}
		return t
	}
	t = fuzzTargets[int(b)%len(fuzzTargets)]
	t = strings.ReplaceAll(t, "{outside}", filepath.Join(sandbox, "outside"))
	return strings.ReplaceAll(t, "{dir}", dir)
}

// fuzzLayers reads data as entries, split into layers by a break.
func fuzzLayers(data []byte, sandbox, dir string) [][]fuzzEntry {
	r := &fuzzReader{data: data}
	layers := [][]fuzzEntry{nil}
	for len(r.data) > 0 {
		op := r.next()
		if op%8 == 4 {
			layers = append(layers, nil)
			continue
		}
		e := fuzzEntry{typ: tar.TypeReg, name: r.name(), mode: (int64(r.next())<<8 | int64(r.next())) & 0o7777}
		switch op % 8 {
		case 0:
			e.typ = tar.TypeDir
		case 1:
			e.body = []byte(r.raw(int(r.next() % 32)))
		case 2:
			e.typ, e.link = tar.TypeSymlink, r.target(sandbox, dir)
		case 3:
			e.typ, e.link = tar.TypeLink, r.name()
		case 5: // a whiteout of the name
			e.name = path.Join(path.Dir(e.name), ".wh."+path.Base(e.name))
		case 6: // an opaque directory
			e.name = path.Join(e.name, ".wh..wh..opq")
		case 7:
			e.typ = tar.TypeFifo
		}
		layers[len(layers)-1] = append(layers[len(layers)-1], e)
	}
	return layers
}

func tarOf(t *testing.T, entries []fuzzEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Typeflag: e.typ, Name: e.name, Linkname: e.link, Mode: e.mode, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			t.Skipf("no tar holds %+v: %v", h, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// snapshot describes every file under base except those under skip: type
// and permission bits, owner, link target and content.
func snapshot(t *testing.T, base, skip string) map[string]string {
	out := map[string]string{}
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%v %d:%d", fi.Mode(), st.Uid, st.Gid)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			desc += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzUnpack: whatever entries the layers of an image or a template tar
// hold — names with "..", "." and absolute paths, symbolic links to
// anywhere, hard links, whiteouts and opaque directories, any modes —
// unpacking them (through mutate.Extract, which flattens an image's
// layers, as Build does) never panics and never creates, changes, or
// changes the mode or owner of anything outside the target directory;
// and no whiteout file is left in it.
func FuzzUnpack(f *testing.F) {
	e := func(op byte, rest ...byte) []byte { return append([]byte{op}, rest...) }
	nameA, nameAB := []byte{0, 0}, []byte{1, 0, 1} // "a", "a/b"
	mode := func(m int) []byte { return []byte{byte(m >> 8), byte(m)} }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	targetOutside := byte(8) // {outside}
	f.Add(cat(e(0), nameA, mode(0o755), e(1), nameAB, mode(0o644), []byte{3, 'x', 'y', 'z'}))
	// A directory replaced by a link to the outside: its deferred mode must
	// not follow the link.
	f.Add(cat(e(0), nameA, mode(0o700), e(2), nameA, mode(0o777), []byte{targetOutside}))
	f.Add(cat(e(0), nameA, mode(0o755), e(0), nameAB, mode(0o700), e(2), nameA, mode(0o777), []byte{targetOutside}))
	// Writing through a link, absolute and ".." names.
	f.Add(cat(e(2), nameA, mode(0o777), []byte{targetOutside}, e(1), nameAB, mode(0o644), []byte{1, 'x'}))
	f.Add(cat(e(1), []byte{0x80 | 16}, []byte("../../outside/vi"), mode(0o644), []byte{1, 'x'}))
	f.Add(cat(e(1), []byte{0x40 | 4, 3, 3, 8}, mode(0o644), []byte{1, 'x'})) // /../../victim
	// A hard link to a link, then a write to it.
	f.Add(cat(e(2), nameA, mode(0o777), []byte{9}, e(3), []byte{0, 1}, mode(0o644), nameA, e(1), []byte{0, 1}, mode(0o644), []byte{1, 'x'}))
	// Layers with a whiteout and an opaque directory.
	f.Add(cat(e(0), nameA, mode(0o755), e(1), nameAB, mode(0o644), []byte{0}, e(4), e(5), nameAB, mode(0), e(6), nameA, mode(0)))
	f.Add(cat(e(1), []byte{0x80 | 6}, []byte(".wh.xy"), mode(0o644), []byte{0}))

	f.Fuzz(func(t *testing.T, data []byte) {
		sandbox := t.TempDir()
		dir := filepath.Join(sandbox, "dir")
		outside := filepath.Join(sandbox, "outside")
		for _, d := range []string{dir, outside + "/b"} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range []string{outside + "/victim", outside + "/a"} {
			if err := os.WriteFile(p, []byte("v"), 0o640); err != nil {
				t.Fatal(err)
			}
		}
		before := snapshot(t, sandbox, dir)

		layers := fuzzLayers(data, sandbox, dir)
		var stream io.Reader
		if len(layers) == 1 {
			// A template tar, read as Build reads one.
			r, done, err := decompress(bytes.NewReader(tarOf(t, layers[0])))
			if err != nil {
				t.Fatal(err)
			}
			defer done()
			stream = r
		} else {
			ls := make([]v1.Layer, len(layers))
			for i, entries := range layers {
				b := tarOf(t, entries)
				l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
				if err != nil {
					t.Fatal(err)
				}
				ls[i] = l
			}
			img, err := mutate.AppendLayers(empty.Image, ls...)
			if err != nil {
				t.Fatal(err)
			}
			rc := mutate.Extract(img)
			defer rc.Close()
			stream = rc
		}
		err := unpack(stream, dir)

		after := snapshot(t, sandbox, dir)
		for p, was := range before {
			if now, ok := after[p]; !ok || now != was {
				t.Fatalf("unpack (err %v) changed %s outside its target: was %q, now %q", err, p, was, now)
			}
		}
		for p, now := range after {
			if _, ok := before[p]; !ok {
				t.Fatalf("unpack (err %v) created %s (%s) outside its target", err, p, now)
			}
		}
		if len(layers) > 1 {
			_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				// A directory may have the name: one only a deeper entry
				// names (".wh.a/b") is made as its parent.
				if err == nil && strings.HasPrefix(d.Name(), ".wh.") && !d.IsDir() {
					t.Fatalf("the whiteout %s is left in the image", p)
				}
				return nil
			})
		}
	})
}
