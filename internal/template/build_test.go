package template_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/zstd"

	"github.com/kibotos/kibotos/internal/template"
)

type entry struct {
	name, content, link string
	dir                 bool
}

func tarBytes(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.content)), Typeflag: tar.TypeReg}
		switch {
		case e.dir:
			h = &tar.Header{Name: e.name, Mode: 0o755, Typeflag: tar.TypeDir}
		case e.link != "":
			h = &tar.Header{Name: e.name, Linkname: e.link, Typeflag: tar.TypeSymlink}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.content)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func layerOf(t *testing.T, entries ...entry) v1.Layer {
	t.Helper()
	b := tarBytes(t, entries...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// image has two layers: the second deletes /srv/gone with a whiteout and
// empties /opt with an opaque whiteout.
func image(t *testing.T, arch string) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image,
		layerOf(t, entry{name: "srv/", dir: true}, entry{name: "srv/keep", content: "kept\n"}, entry{name: "srv/gone", content: "x"},
			entry{name: "opt/", dir: true}, entry{name: "opt/old", content: "old"}),
		layerOf(t, entry{name: "srv/.wh.gone"}, entry{name: "opt/.wh..wh..opq"}, entry{name: "opt/new", content: "new"}))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config.Env, cf.Config.WorkingDir, cf.Config.User, cf.Config.Cmd = []string{"A=1"}, "/srv", "1000", []string{"sh"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

func build(t *testing.T, src template.Source) (*template.Built, error) {
	t.Helper()
	work := t.TempDir()
	return template.Build(context.Background(), src, work, filepath.Join(work, "root.img"), 0, nil)
}

func checkFlattened(t *testing.T, b *template.Built) {
	t.Helper()
	listing := debugfs(t, b.Path, "ls -l /srv") + debugfs(t, b.Path, "ls -l /opt")
	for _, want := range []string{"keep", "new"} {
		if !strings.Contains(listing, want) {
			t.Errorf("%s missing from the image: %s", want, listing)
		}
	}
	for _, gone := range []string{"gone", "old", ".wh."} {
		if strings.Contains(listing, gone) {
			t.Errorf("%s is in the image, whiteouts not applied: %s", gone, listing)
		}
	}
	if c := b.Config; c == nil || c.WorkingDir != "/srv" || c.User != "1000" || len(c.Env) != 1 || c.Env[0] != "A=1" || len(c.Cmd) != 1 {
		t.Errorf("config %+v", c)
	}
	if b.Architecture != "amd64" {
		t.Errorf("architecture %q", b.Architecture)
	}
}

func TestBuildFromADockerTarballSelectsByTag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "images.tar")
	app, _ := name.NewTag("example.test/app:1")
	other, _ := name.NewTag("example.test/other:2")
	if err := tarball.MultiWriteToFile(path, map[name.Tag]v1.Image{app: image(t, "amd64"), other: image(t, "amd64")}); err != nil {
		t.Fatal(err)
	}
	if kind, err := template.ArchiveKind(path); err != nil || kind != "docker" {
		t.Fatalf("ArchiveKind = %q, %v", kind, err)
	}
	if _, err := build(t, template.Source{OCIArchive: path, Platform: "linux/amd64"}); err == nil {
		t.Error("an archive of two images built without an image name")
	}
	b, err := build(t, template.Source{OCIArchive: path, ImageName: "example.test/app:1", Platform: "linux/amd64"})
	if err != nil {
		t.Fatal(err)
	}
	checkFlattened(t, b)
}

func TestBuildFromAnOCILayoutDirectoryAndTar(t *testing.T) {
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"arm64", "amd64"} {
		if err := p.AppendImage(image(t, arch), layout.WithPlatform(v1.Platform{OS: "linux", Architecture: arch})); err != nil {
			t.Fatal(err)
		}
	}
	b, err := build(t, template.Source{OCILayout: dir, Platform: "linux/amd64"})
	if err != nil {
		t.Fatal(err)
	}
	checkFlattened(t, b)

	// The same layout as a tar, as UploadTemplateSource receives it.
	archive := filepath.Join(t.TempDir(), "layout.tar")
	var entries []entry
	_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		rel, _ := filepath.Rel(dir, path)
		if rel == "." || err != nil {
			return err
		}
		if info.IsDir() {
			entries = append(entries, entry{name: rel + "/", dir: true})
			return nil
		}
		content, err := os.ReadFile(path)
		entries = append(entries, entry{name: rel, content: string(content)})
		return err
	})
	if err := os.WriteFile(archive, tarBytes(t, entries...), 0o644); err != nil {
		t.Fatal(err)
	}
	if kind, err := template.ArchiveKind(archive); err != nil || kind != "oci" {
		t.Fatalf("ArchiveKind = %q, %v", kind, err)
	}
	if b, err = build(t, template.Source{OCIArchive: archive, Platform: "linux/amd64"}); err != nil {
		t.Fatal(err)
	}
	checkFlattened(t, b)
}

func TestBuildRefusesAnImageOfAnotherPlatform(t *testing.T) {
	path := filepath.Join(t.TempDir(), "arm.tar")
	tag, _ := name.NewTag("example.test/arm:1")
	if err := tarball.WriteToFile(path, tag, image(t, "arm64")); err != nil {
		t.Fatal(err)
	}
	if _, err := build(t, template.Source{OCIArchive: path, Platform: "linux/amd64"}); err == nil || !strings.Contains(err.Error(), "linux/arm64") {
		t.Errorf("build of an arm64 image for linux/amd64: %v", err)
	}
}

func TestBuildFromAZstdTar(t *testing.T) {
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = zw.Write(tarBytes(t, entry{name: "etc/", dir: true}, entry{name: "etc/motd", content: "zstd\n"}))
	zw.Close()
	path := filepath.Join(t.TempDir(), "root.tar.zst")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if kind, err := template.ArchiveKind(path); err != nil || kind != "rootfs" {
		t.Fatalf("ArchiveKind = %q, %v", kind, err)
	}
	b, err := build(t, template.Source{Tar: path, Architecture: "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	if got := debugfs(t, b.Path, "cat /etc/motd"); !strings.Contains(got, "zstd") || b.Architecture != "arm64" || b.Config != nil {
		t.Errorf("built %+v with /etc/motd %q", b, got)
	}
}

// A tar cannot write through a symbolic link it made, which could point
// anywhere on the builder.
func TestBuildRefusesWritingThroughASymlink(t *testing.T) {
	outside := t.TempDir()
	path := filepath.Join(t.TempDir(), "evil.tar")
	if err := os.WriteFile(path, tarBytes(t, entry{name: "escape", link: outside}, entry{name: "escape/planted", content: "x"}), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := build(t, template.Source{Tar: path}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("build: %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		t.Error("the tar wrote outside the root")
	}
}

func TestBuildTooSmallAnImageFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.tar")
	if err := os.WriteFile(path, tarBytes(t, entry{name: "big", content: strings.Repeat("x", 3<<20)}), 0o644); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if _, err := template.Build(context.Background(), template.Source{Tar: path}, work, filepath.Join(work, "root.img"), 1<<20, nil); err == nil {
		t.Error("a 1 MiB image held 3 MiB of content")
	}
}
