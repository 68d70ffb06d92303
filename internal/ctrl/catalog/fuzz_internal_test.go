package catalog

import (
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/command"
	"github.com/kibotos/kibotos/internal/ctrl/pool"
	"github.com/kibotos/kibotos/internal/node/blockfile"
)

// The oracles below restate each documented rule byte by byte, without the
// regular expressions the validators use.

func allBytes(s, set string) bool {
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(set, rune(s[i])) {
			return false
		}
	}
	return true
}

const (
	lower  = "abcdefghijklmnopqrstuvwxyz"
	upper  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	digits = "0123456789"
)

func lenIn(s string, lo, hi int) bool { return len(s) >= lo && len(s) <= hi }

// wantKey: 1–63 of lowercase letters, digits, '.' and '-', a letter first.
func wantKey(s string) bool {
	return lenIn(s, 1, 63) && allBytes(s, lower+digits+".-") && allBytes(s[:1], lower)
}

// wantTemplate: 1–63 of lowercase letters, digits and '-', a letter first,
// not ending with '-'.
func wantTemplate(s string) bool {
	return lenIn(s, 1, 63) && allBytes(s, lower+digits+"-") && allBytes(s[:1], lower) && s[len(s)-1] != '-'
}

// wantRevision: 1–63 of lowercase letters, digits, '.', '_' and '-'.
func wantRevision(s string) bool { return lenIn(s, 1, 63) && allBytes(s, lower+digits+"._-") }

// wantArch: 1–32 lowercase letters and digits.
func wantArch(s string) bool { return lenIn(s, 1, 32) && allBytes(s, lower+digits) }

// wantCommandID: 1–128 of [A-Za-z0-9._:-].
func wantCommandID(s string) bool { return lenIn(s, 1, 128) && allBytes(s, lower+upper+digits+"._:-") }

// wantPool: 1–63 of lowercase letters, digits, '-' and '.', beginning and
// ending with a letter or digit.
func wantPool(s string) bool {
	return lenIn(s, 1, 63) && allBytes(s, lower+digits+"-.") && allBytes(s[:1], lower+digits) && allBytes(s[len(s)-1:], lower+digits)
}

// wantObjectID: 1–200 of [A-Za-z0-9._-], no leading dot.
func wantObjectID(s string) bool {
	return lenIn(s, 1, 200) && allBytes(s, lower+upper+digits+"._-") && s[0] != '.'
}

// FuzzNames: every name rule of the API agrees with its documented rule
// for any string — the catalog's PlatformKey, Template, revision and
// architecture names, command_id, storage pool names, and the object ids
// that name a node's block files — and refuses with invalid_argument naming
// the field. A block file object id that is accepted names a file directly
// inside its pool directory, never "." or ".." or a path.
func FuzzNames(f *testing.F) {
	for _, s := range []string{
		"", "a", "a-", "-a", "a.b", "a_b", "A", "0a", "a:b", ".", "..", ".a", "a..b", "a/b", "../x", "x86_64", "amd64", "a\x00",
		"é", "ws-0123456789abcdef", "vol-1", "default", "pool.local", strings.Repeat("a", 63), strings.Repeat("a", 64),
		strings.Repeat("c", 128), strings.Repeat("c", 129), strings.Repeat("o", 200), strings.Repeat("o", 201),
	} {
		f.Add(s)
	}
	rules := []struct {
		name  string
		check func(string) error
		want  func(string) bool
	}{
		{"platform_key", func(s string) error { return checkName("platform_key", s, keyPattern, keyRule) }, wantKey},
		{"template", func(s string) error { return checkName("template", s, templatePattern, templateRule) }, wantTemplate},
		{"revision", func(s string) error { return checkName("revision", s, revisionPattern, revisionRule) }, wantRevision},
		{"architecture", func(s string) error { return checkName("architecture", s, archPattern, "an architecture") }, wantArch},
		{"command.command_id", func(s string) error {
			return command.ValidateID("command.command_id", &ctrlv1.CommandMetadata{CommandId: s})
		}, wantCommandID},
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range rules {
			err := r.check(s)
			if (err == nil) != r.want(s) {
				t.Fatalf("%s %q: %v; want valid = %v", r.name, s, err, r.want(s))
			}
			if err != nil && (connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != r.name) {
				t.Fatalf("%s %q: %v; want invalid_argument naming %s", r.name, s, err, r.name)
			}
		}
		if got := pool.ValidName(s); got != wantPool(s) {
			t.Fatalf("pool.ValidName(%q) = %v", s, got)
		}
		err := blockfile.ValidObjectID(s)
		if (err == nil) != wantObjectID(s) {
			t.Fatalf("blockfile.ValidObjectID(%q) = %v", s, err)
		}
		if err == nil {
			dir := "/var/lib/kibotos/pool"
			p := filepath.Join(dir, s)
			if filepath.Dir(p) != dir || filepath.Base(p) != s || s == "." || s == ".." {
				t.Fatalf("the accepted object id %q names %s, not a file in %s", s, p, dir)
			}
		}
	})
}
