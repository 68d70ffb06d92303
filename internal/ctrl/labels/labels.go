// Package labels holds the Kubernetes-compatible rules for the caller-owned
// labels and annotations of Workspaces, Volumes and the other resources that
// carry them, and the label selector their List calls filter on.
//
// Keys of both maps are Kubernetes qualified names; label values are
// Kubernetes label values; annotation values are any UTF-8 text without
// U+0000. ctrl never interprets either map, so the rules exist only to keep
// the data portable to and from Kubernetes tooling and bounded in size.
//
// Every error is invalid_argument built with apierr.Invalid. Callers pass the
// dotted path of the map in the request ("spec.labels", "labels"), and errors
// name the offending entry, e.g. spec.labels["app.kubernetes.io/name"].
package labels

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

const (
	// MaxLabels is how many labels one resource may carry. Kubernetes sets no
	// count, but labels are indexed for label_selector, so ctrl bounds them;
	// 64 is far above what selectors use in practice.
	MaxLabels = 64
	// MaxAnnotationsBytes bounds the sum of the lengths, in bytes, of every
	// annotation key and value of one resource: 256 KiB, Kubernetes'
	// TotalAnnotationSizeLimitB. Annotations are stored verbatim and never
	// indexed, so only their size needs a limit.
	MaxAnnotationsBytes = 256 << 10

	// maxNameLen is the limit of the name part of a qualified name and of a
	// label value (Kubernetes' validation.LabelValueMaxLength).
	maxNameLen = 63
	// maxPrefixLen is the limit of a DNS-1123 subdomain, the optional prefix
	// of a qualified name.
	maxPrefixLen = 253
)

// ValidateLabels checks a label map: at most MaxLabels entries, each key a
// qualified name and each value a label value. prefix is the map's field path.
func ValidateLabels(prefix string, m map[string]string) error {
	if len(m) > MaxLabels {
		return apierr.Invalid(prefix, "has %d labels; at most %d are allowed", len(m), MaxLabels)
	}
	// Sorted so that a request with several bad entries always reports the
	// same one.
	for _, k := range sortedKeys(m) {
		if msg := checkQualifiedName(k); msg != "" {
			return apierr.Invalid(entryField(prefix, k), "key %s", msg)
		}
		if msg := checkLabelValue(m[k]); msg != "" {
			return apierr.Invalid(entryField(prefix, k), "value %s", msg)
		}
	}
	return nil
}

// ValidateAnnotations checks an annotation map: each key a qualified name,
// each value valid UTF-8 without U+0000, and keys plus values at most
// MaxAnnotationsBytes in total. prefix is the map's field path.
//
// Kubernetes lower-cases annotation keys before checking them, which lets an
// upper-case prefix through; ctrl applies the qualified-name rule as written,
// the same for labels and annotations.
func ValidateAnnotations(prefix string, m map[string]string) error {
	total := 0
	for _, k := range sortedKeys(m) {
		v := m[k]
		if msg := checkQualifiedName(k); msg != "" {
			return apierr.Invalid(entryField(prefix, k), "key %s", msg)
		}
		if msg := checkAnnotationValue(v); msg != "" {
			return apierr.Invalid(entryField(prefix, k), "value %s", msg)
		}
		total += len(k) + len(v)
	}
	if total > MaxAnnotationsBytes {
		return apierr.Invalid(prefix, "keys and values total %d bytes; at most %d are allowed", total, MaxAnnotationsBytes)
	}
	return nil
}

// entryField names one map entry the way the API reference writes paths:
// prefix["key"], the key quoted so that any byte in it stays readable.
func entryField(prefix, key string) string {
	return prefix + "[" + strconv.Quote(key) + "]"
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkQualifiedName returns why s is not a Kubernetes qualified name
// ([prefix/]name), or "" when it is one.
func checkQualifiedName(s string) string {
	name := s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		prefix := s[:i]
		name = s[i+1:]
		if prefix == "" {
			return "has an empty prefix before '/'"
		}
		if msg := checkDNSSubdomain(prefix); msg != "" {
			return "prefix " + msg
		}
		if strings.IndexByte(name, '/') >= 0 {
			return "has more than one '/'"
		}
	}
	if name == "" {
		return "must have a non-empty name"
	}
	if len(name) > maxNameLen {
		return fmt.Sprintf("name is %d bytes; at most %d are allowed", len(name), maxNameLen)
	}
	if msg := checkNameChars(name); msg != "" {
		return "name " + msg
	}
	return ""
}

// checkLabelValue returns why s is not a Kubernetes label value, or "". The
// empty value is valid.
func checkLabelValue(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > maxNameLen {
		return fmt.Sprintf("is %d bytes; at most %d are allowed", len(s), maxNameLen)
	}
	return checkNameChars(s)
}

// checkAnnotationValue returns why s is not an annotation value, or "". NUL
// is refused because C strings, PostgreSQL text and many tools cannot hold it.
func checkAnnotationValue(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "contains U+0000"
	}
	return ""
}

// checkNameChars applies the character rule shared by qualified-name names
// and label values: [A-Za-z0-9] at both ends and [-_.A-Za-z0-9] between.
// s is not empty.
func checkNameChars(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isAlnum(c) {
			continue
		}
		if c != '-' && c != '_' && c != '.' {
			return fmt.Sprintf("has %s at offset %d; only [-_.A-Za-z0-9] are allowed", quoteByte(c), i)
		}
		if i == 0 || i == len(s)-1 {
			return "must begin and end with [A-Za-z0-9]"
		}
	}
	return ""
}

// checkDNSSubdomain returns why s is not a DNS-1123 subdomain (lower-case
// labels of [-a-z0-9] joined by dots, each beginning and ending with
// [a-z0-9], at most 253 bytes in all), or "".
func checkDNSSubdomain(s string) string {
	if len(s) > maxPrefixLen {
		return fmt.Sprintf("is %d bytes; at most %d are allowed", len(s), maxPrefixLen)
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" {
			return "has an empty DNS label"
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			lowerAlnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
			if !lowerAlnum && c != '-' {
				return fmt.Sprintf("has %s; only [-.a-z0-9] are allowed", quoteByte(c))
			}
			if c == '-' && (i == 0 || i == len(label)-1) {
				return "DNS labels must begin and end with [a-z0-9]"
			}
		}
	}
	return ""
}

func isAlnum(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// quoteByte shows one byte of a possibly non-UTF-8 string readably.
func quoteByte(c byte) string {
	if c < utf8.RuneSelf {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}
