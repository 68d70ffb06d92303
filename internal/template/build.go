package template

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Source is what a root image is built from: exactly one of Tar,
// OCIArchive, OCILayout and Reference.
type Source struct {
	// Tar is a root filesystem tar (uncompressed, gzip or zstd): its entries
	// are the paths under "/".
	Tar string
	// OCIArchive is a tar of an OCI image layout or a `docker save`
	// tarball; OCILayout an OCI image layout directory; Reference an image
	// in a registry, pulled with the credentials of the Docker
	// configuration ($DOCKER_CONFIG, ~/.docker/config.json).
	OCIArchive, OCILayout, Reference string
	// Platform selects an image of a multi-platform index, "os/arch" or
	// "os/arch/variant"; empty is linux and this machine's architecture.
	Platform string
	// ImageName selects one image of an archive or layout that holds
	// several: its org.opencontainers.image.ref.name annotation (or
	// io.containerd.image.name) or its Docker repo tag.
	ImageName string
	// Architecture is the architecture of a Tar's content; empty is this
	// machine's.
	Architecture string
}

// Config is the part of an OCI image configuration a Workspace can use.
type Config struct {
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
}

// Built is a built root image and what its source said.
type Built struct {
	*Image
	Architecture string `json:"architecture"`
	// Config is the image configuration; nil for a tar.
	Config *Config `json:"config,omitempty"`
	// ResolvedDigest is the manifest digest a Reference resolved to.
	ResolvedDigest string `json:"resolved_digest,omitempty"`
}

// Build phases, as Progress reports them.
const (
	PhaseFetching  = "fetching"
	PhaseUnpacking = "unpacking"
	PhaseWriting   = "writing"
)

// BuildProgress is called as a build advances; total is 0 when unknown.
type BuildProgress func(phase string, done, total int64)

func (p BuildProgress) report(phase string, done, total int64) {
	if p != nil {
		p(phase, done, total)
	}
}

// Build unpacks src (an image's layers in order, whiteouts applied) into a
// fresh directory and writes it as an ext4 image at out, of size bytes (0:
// sized to the content). work is where the directory is made.
func Build(ctx context.Context, src Source, work, out string, size int64, progress BuildProgress) (*Built, error) {
	dir, err := os.MkdirTemp(work, "root-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var b *Built
	if src.Tar != "" {
		b = &Built{Architecture: src.Architecture}
		if b.Architecture == "" {
			b.Architecture = runtime.GOARCH
		}
		st, err := os.Stat(src.Tar)
		if err != nil {
			return nil, err
		}
		progress.report(PhaseUnpacking, 0, st.Size())
		if err := unpackFile(src.Tar, dir, func(n int64) { progress.report(PhaseUnpacking, n, st.Size()) }); err != nil {
			return nil, err
		}
	} else if b, err = unpackImage(ctx, src, work, dir, progress); err != nil {
		return nil, err
	}
	progress.report(PhaseWriting, 0, 0)
	if b.Image, err = FromDirSize(ctx, dir, out, size); err != nil {
		return nil, err
	}
	progress.report(PhaseWriting, b.Size, b.Size)
	return b, nil
}

// unpackImage resolves an OCI image and unpacks its flattened filesystem.
func unpackImage(ctx context.Context, src Source, work, dir string, progress BuildProgress) (*Built, error) {
	want, err := platformOf(src.Platform)
	if err != nil {
		return nil, err
	}
	progress.report(PhaseFetching, 0, 0)
	img, resolved, err := resolveImage(ctx, src, work, want)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image configuration: %w", err)
	}
	if got := (v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}); !got.Satisfies(*want) {
		return nil, fmt.Errorf("the image is for %s, not %s (select another with a platform)", got.String(), want.String())
	}
	var total int64
	if layers, err := img.Layers(); err == nil {
		for _, l := range layers {
			if n, err := l.Size(); err == nil {
				total += n
			}
		}
	}
	progress.report(PhaseUnpacking, 0, 0)
	rc := mutate.Extract(img)
	defer rc.Close()
	cr := &countingReader{r: rc, report: func(n int64) { progress.report(PhaseUnpacking, n, 0) }}
	if err := unpack(cr, dir); err != nil {
		return nil, fmt.Errorf("unpack the image's layers: %w", err)
	}
	c := cf.Config
	return &Built{
		Architecture: cf.Architecture, ResolvedDigest: resolved,
		Config: &Config{Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd},
	}, nil
}

func platformOf(s string) (*v1.Platform, error) {
	if s == "" {
		return &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, nil
	}
	return v1.ParsePlatform(s)
}

// resolveImage finds the one image src names.
func resolveImage(ctx context.Context, src Source, work string, want *v1.Platform) (v1.Image, string, error) {
	switch {
	case src.Reference != "":
		ref, err := name.ParseReference(src.Reference)
		if err != nil {
			return nil, "", err
		}
		desc, err := remote.Get(ref, remote.WithContext(ctx), remote.WithPlatform(*want), remote.WithAuthFromKeychain(authn.DefaultKeychain))
		if err != nil {
			return nil, "", fmt.Errorf("pull %s: %w", src.Reference, err)
		}
		img, err := desc.Image()
		return img, desc.Digest.String(), err
	case src.OCILayout != "":
		img, err := fromLayout(src.OCILayout, src.ImageName, want)
		return img, "", err
	case src.OCIArchive != "":
		img, err := fromArchive(src.OCIArchive, work, src.ImageName, want)
		return img, "", err
	}
	return nil, "", errors.New("template: the source names nothing to build from")
}

// ArchiveKind says what a tar file holds: "docker" (a `docker save`
// tarball, with manifest.json), "oci" (an OCI image layout, with
// oci-layout and index.json) or "rootfs" (anything else: a root
// filesystem). A tarball with both manifests is "docker".
func ArchiveKind(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	r, done, err := decompress(f)
	if err != nil {
		return "", err
	}
	defer done()
	tr := tar.NewReader(r)
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("%s is not a tar archive: %w", path, err)
		}
		seen[strings.TrimPrefix(filepath.Clean("/"+h.Name), "/")] = true
	}
	switch {
	case seen["manifest.json"]:
		return "docker", nil
	case seen["oci-layout"] && seen["index.json"]:
		return "oci", nil
	}
	return "rootfs", nil
}

// fromArchive opens the image of a `docker save` tarball or of a tar of an
// OCI layout (unpacked under work first).
func fromArchive(path, work, imageName string, want *v1.Platform) (v1.Image, error) {
	kind, err := ArchiveKind(path)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "docker":
		var tag *name.Tag
		if imageName != "" {
			t, err := name.NewTag(imageName)
			if err != nil {
				return nil, fmt.Errorf("image name %q: %w", imageName, err)
			}
			tag = &t
		}
		return tarball.ImageFromPath(path, tag)
	case "oci":
		dir, err := os.MkdirTemp(work, "layout-")
		if err != nil {
			return nil, err
		}
		// The image's blobs are read lazily from here, during the build:
		// it is removed with the build's work directory.
		if err := unpackFile(path, dir, nil); err != nil {
			return nil, err
		}
		return fromLayout(dir, imageName, want)
	}
	return nil, fmt.Errorf("%s is neither an OCI image layout nor a docker save tarball", filepath.Base(path))
}

// fromLayout selects one image of an OCI layout: by name when given, by
// platform among the images of an index.
func fromLayout(dir, imageName string, want *v1.Platform) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	var found []v1.Image
	if err := collectImages(idx, imageName, want, true, &found); err != nil {
		return nil, err
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0 && imageName != "":
		return nil, fmt.Errorf("the layout holds no image named %q for %s", imageName, want.String())
	case len(found) == 0:
		return nil, fmt.Errorf("the layout holds no image for %s", want.String())
	}
	return nil, fmt.Errorf("the layout holds %d images: select one with an image name", len(found))
}

var nameAnnotations = []string{"org.opencontainers.image.ref.name", "io.containerd.image.name"}

func named(d v1.Descriptor, imageName string) bool {
	for _, a := range nameAnnotations {
		if v := d.Annotations[a]; v == imageName || (v != "" && strings.HasSuffix(imageName, ":"+v)) {
			return true
		}
	}
	return false
}

// collectImages gathers the images of idx that match: the name applies to
// the layout's top-level descriptors, the platform to every image.
func collectImages(idx v1.ImageIndex, imageName string, want *v1.Platform, top bool, found *[]v1.Image) error {
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range m.Manifests {
		if top && imageName != "" && !named(d, imageName) {
			continue
		}
		if d.MediaType.IsIndex() {
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return err
			}
			if err := collectImages(child, "", want, false, found); err != nil {
				return err
			}
			continue
		}
		if !d.MediaType.IsImage() {
			continue
		}
		if d.Platform != nil && !d.Platform.Satisfies(*want) {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		if d.Platform == nil {
			cf, err := img.ConfigFile()
			if err != nil {
				return err
			}
			// Attestation manifests and the like carry no platform.
			if cf.OS == "unknown" || (cf.OS != "" && !(v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}).Satisfies(*want)) {
				continue
			}
		}
		*found = append(*found, img)
	}
	return nil
}
