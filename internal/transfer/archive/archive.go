// Package archive is the Transfer archive format: one stream holding a
// manifest (what was exported: the Workspace spec or Volume, template and
// platform revisions by digest, the list of parts) and the parts one after
// another, block-file parts sparse (only their data extents travel, and
// holes stay holes when they are written back). docs/TRANSFER-FORMAT.md
// describes the bytes.
//
// The reader verifies as it streams: each part's size and digest against
// the manifest, the framing, the extents, and the whole archive's digest in
// its trailer. Every way an archive can be wrong is a distinct error
// (errors.Is with the Err values below), and everything the reader holds
// or writes is bounded by Limits, so a hostile archive costs at most those
// bounds.
//
// The package knows nothing of ctrl: the Workspace spec is carried as
// opaque JSON that the caller encodes and decodes.
package archive

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Version is the format version this package writes and the only one it
// reads. A reader refuses any other with ErrVersion: a new version is a new
// reader, never a guess.
const Version uint16 = 1

// magic opens every archive.
const magic = "KBTOSARC"

// Frame tags of a part and of the trailer.
const (
	partTag    = "PART"
	trailerTag = "END."
)

// Sizes on the wire, all integers big-endian.
const (
	headerSize      = len(magic) + 2 + 2 + 4 // magic, version, reserved, manifest length
	partHeaderSize  = 4 + 4 + 8              // tag, index, size
	extentHeaderLen = 8 + 8                  // offset, length
	trailerSize     = 4 + 4 + 32             // tag, part count, sha256
)

// Errors of a refused archive. Each returned error wraps exactly one.
var (
	// ErrNotArchive: the stream does not start with the archive magic.
	ErrNotArchive = errors.New("not a Kibotos transfer archive")
	// ErrVersion: the archive's format version is not one this reader knows.
	ErrVersion = errors.New("unsupported archive format version")
	// ErrTruncated: the stream ended before the archive did.
	ErrTruncated = errors.New("archive is truncated")
	// ErrManifest: the manifest is not valid JSON or breaks a rule of the format.
	ErrManifest = errors.New("invalid archive manifest")
	// ErrLimit: the archive exceeds a bound of the reader's Limits.
	ErrLimit = errors.New("archive exceeds a limit")
	// ErrFraming: a part or trailer frame is malformed (tag, index, count).
	ErrFraming = errors.New("malformed archive framing")
	// ErrPartMissing: the archive ends before every part the manifest lists.
	ErrPartMissing = errors.New("archive part missing")
	// ErrPartExtra: the archive holds a part the manifest does not list.
	ErrPartExtra = errors.New("archive part not in the manifest")
	// ErrPartSize: a part is larger or smaller than the manifest declares.
	ErrPartSize = errors.New("archive part size differs from the manifest")
	// ErrExtent: a block part's extent is empty, overlaps another or lies
	// outside the part's logical size.
	ErrExtent = errors.New("invalid archive extent")
	// ErrDigest: a part's or the whole archive's content does not match its digest.
	ErrDigest = errors.New("archive digest mismatch")
	// ErrTrailingData: bytes follow the archive's trailer.
	ErrTrailingData = errors.New("data after the archive trailer")
	// ErrSourceChanged: a part's source changed while the writer read it.
	ErrSourceChanged = errors.New("archive source changed while it was written")
)

// VersionError is the ErrVersion of a given archive.
type VersionError struct{ Version uint16 }

func (e *VersionError) Error() string {
	return fmt.Sprintf("%v %d: this reader knows version %d only", ErrVersion, e.Version, Version)
}

func (e *VersionError) Unwrap() error { return ErrVersion }

// PartKind is how a part is encoded.
type PartKind string

const (
	// KindBlock is a sparse block file: its data extents, each with its
	// offset, restored into a file of LogicalSize whose other bytes are holes.
	KindBlock PartKind = "block"
	// KindBlob is a plain byte stream (e.g. a template image).
	KindBlob PartKind = "blob"
)

// SourceKind says what an archive was exported from.
type SourceKind string

const (
	SourceWorkspace SourceKind = "workspace"
	SourceVolume    SourceKind = "volume"
)

// Manifest is the archive's table of contents, written before its parts.
type Manifest struct {
	Source Source `json:"source"`
	// Template and Platform name the revisions the Workspace ran on, by
	// digest, so that a restore can check it has them (or use the
	// template image part).
	Template *Revision `json:"template,omitempty"`
	Platform *Revision `json:"platform,omitempty"`
	// Completeness is "complete" or "partial" (see TransferManifest).
	Completeness string    `json:"completeness,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	Parts        []Part    `json:"parts"`
}

// Source is what was exported.
type Source struct {
	Kind SourceKind `json:"kind"`
	// ID is the exported Workspace or Volume id.
	ID string `json:"id,omitempty"`
	// Spec is the Workspace spec or the Volume, as the caller's JSON
	// (protojson in ctrl); opaque here.
	Spec json.RawMessage `json:"spec,omitempty"`
}

// Revision is a template or platform revision.
type Revision struct {
	Name     string `json:"name"`
	Revision string `json:"revision"`
	Digest   string `json:"digest"`
}

// Part describes one part. The writer fills Size, LogicalSize, Extents
// and Digest.
type Part struct {
	// Name is the part's name, also its file name when extracted:
	// lower-case letters, digits, '.', '_' and '-', starting with a letter
	// or digit, at most 64 bytes.
	Name string   `json:"name"`
	Kind PartKind `json:"kind"`
	// Size is the bytes of the part's body on the wire: for a block part
	// its extent headers and data, for a blob its bytes.
	Size uint64 `json:"size"`
	// LogicalSize is the size of the file the part restores: a block
	// file's full (sparse) size; a blob's Size.
	LogicalSize uint64 `json:"logical_size"`
	// Extents is how many extents a block part holds; zero for a blob.
	Extents uint32 `json:"extents,omitempty"`
	// Digest is "sha256:<hex>" of the part's body on the wire.
	Digest string `json:"digest"`
}

// DataBytes is how many bytes of content the part carries (a block
// part's used bytes), without its extent headers.
func (p Part) DataBytes() uint64 { return p.Size - uint64(p.Extents)*extentHeaderLen }

// Limits bound what a reader accepts. A zero field takes its default.
type Limits struct {
	// MaxManifestBytes bounds the manifest's encoded size (default 1 MiB).
	MaxManifestBytes uint32
	// MaxParts bounds the number of parts (default 64).
	MaxParts int
	// MaxExtents bounds the extents of one block part (default 1<<20).
	MaxExtents uint32
	// MaxLogicalSize bounds a part's logical size (default 16 TiB).
	MaxLogicalSize uint64
}

// Default limits.
const (
	DefaultMaxManifestBytes        = 1 << 20
	DefaultMaxParts                = 64
	DefaultMaxExtents              = 1 << 20
	DefaultMaxLogicalSize   uint64 = 16 << 40
)

func (l Limits) withDefaults() Limits {
	if l.MaxManifestBytes == 0 {
		l.MaxManifestBytes = DefaultMaxManifestBytes
	}
	if l.MaxParts == 0 {
		l.MaxParts = DefaultMaxParts
	}
	if l.MaxExtents == 0 {
		l.MaxExtents = DefaultMaxExtents
	}
	if l.MaxLogicalSize == 0 {
		l.MaxLogicalSize = DefaultMaxLogicalSize
	}
	return l
}

var partName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// validate checks m against the format's rules and lim; every failure
// wraps ErrManifest or ErrLimit.
func (m *Manifest) validate(lim Limits) error {
	switch m.Source.Kind {
	case SourceWorkspace, SourceVolume:
	default:
		return fmt.Errorf("%w: source.kind %q is not workspace or volume", ErrManifest, m.Source.Kind)
	}
	for field, r := range map[string]*Revision{"template": m.Template, "platform": m.Platform} {
		if r != nil && !validDigest(r.Digest) {
			return fmt.Errorf("%w: %s.digest %q is not sha256:<64 hex>", ErrManifest, field, r.Digest)
		}
	}
	switch m.Completeness {
	case "", "complete", "partial":
	default:
		return fmt.Errorf("%w: completeness %q is not complete or partial", ErrManifest, m.Completeness)
	}
	if len(m.Parts) > lim.MaxParts {
		return fmt.Errorf("%w: %d parts, at most %d", ErrLimit, len(m.Parts), lim.MaxParts)
	}
	seen := make(map[string]bool, len(m.Parts))
	for i, p := range m.Parts {
		if seen[p.Name] {
			return fmt.Errorf("%w: parts[%d].name %q repeats", ErrManifest, i, p.Name)
		}
		seen[p.Name] = true
		if err := p.validate(lim); err != nil {
			return fmt.Errorf("parts[%d]: %w", i, err)
		}
	}
	return nil
}

func (p Part) validate(lim Limits) error {
	if !partName.MatchString(p.Name) {
		return fmt.Errorf("%w: name %q is not [a-z0-9][a-z0-9._-]{0,63}", ErrManifest, p.Name)
	}
	if !validDigest(p.Digest) {
		return fmt.Errorf("%w: part %s: digest %q is not sha256:<64 hex>", ErrManifest, p.Name, p.Digest)
	}
	if p.LogicalSize > lim.MaxLogicalSize {
		return fmt.Errorf("%w: part %s: logical size %d, at most %d", ErrLimit, p.Name, p.LogicalSize, lim.MaxLogicalSize)
	}
	switch p.Kind {
	case KindBlob:
		if p.Extents != 0 || p.LogicalSize != p.Size {
			return fmt.Errorf("%w: part %s: a blob has no extents and its logical size is its size", ErrManifest, p.Name)
		}
	case KindBlock:
		if p.Extents > lim.MaxExtents {
			return fmt.Errorf("%w: part %s: %d extents, at most %d", ErrLimit, p.Name, p.Extents, lim.MaxExtents)
		}
		headers := uint64(p.Extents) * extentHeaderLen
		if p.Size < headers || p.Size-headers > p.LogicalSize {
			return fmt.Errorf("%w: part %s: size %d cannot hold %d extents within logical size %d",
				ErrManifest, p.Name, p.Size, p.Extents, p.LogicalSize)
		}
	default:
		return fmt.Errorf("%w: part %s: kind %q is not block or blob", ErrManifest, p.Name, p.Kind)
	}
	return nil
}

func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 || strings.ToLower(h) != h {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// digestString formats a sha256 sum.
func digestString(sum []byte) string { return "sha256:" + hex.EncodeToString(sum) }
