package apispec_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	_ "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
)

// The reference pages, generated from the original operator.proto and
// ctrl.proto. KIBOTOS_SPEC_DIR overrides where they are read from.
const (
	operatorPage = "000_c7c3d93d6d5aef9b.txt"
	ctrlPage     = "003_2b8491ad08a683d0.txt"
)

// specDir is $KIBOTOS_SPEC_DIR, else the shared reference beside the
// repository, else the repository's copy in docs/reference.
func specDir() string {
	if dir := os.Getenv("KIBOTOS_SPEC_DIR"); dir != "" {
		return dir
	}
	shared := filepath.Join("..", "..", "..", "shared", "spec")
	if _, err := os.Stat(shared); err == nil {
		return shared
	}
	return filepath.Join("..", "..", "docs", "reference")
}

func readPage(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(specDir(), name))
	if err != nil {
		t.Fatalf("the API reference is needed (set KIBOTOS_SPEC_DIR): %v", err)
	}
	return string(b)
}

// names are every message, enum, service and method name of pkg.
func names(pkg string) map[string]protoreflect.Descriptor {
	out := map[string]protoreflect.Descriptor{}
	protoregistry.GlobalFiles.RangeFilesByPackage(protoreflect.FullName(pkg), func(fd protoreflect.FileDescriptor) bool {
		for i := 0; i < fd.Messages().Len(); i++ {
			out[string(fd.Messages().Get(i).Name())] = fd.Messages().Get(i)
		}
		for i := 0; i < fd.Enums().Len(); i++ {
			out[string(fd.Enums().Get(i).Name())] = fd.Enums().Get(i)
		}
		for i := 0; i < fd.Services().Len(); i++ {
			sd := fd.Services().Get(i)
			out[string(sd.Name())] = sd
			for j := 0; j < sd.Methods().Len(); j++ {
				out[string(sd.Methods().Get(j).Name())] = sd.Methods().Get(j)
			}
		}
		return true
	})
	return out
}

// split cuts a run of concatenated names ("GetStoragePoolResponseSetStoragePoolCapacity")
// into known names, longest first; ok is false when some part is unknown.
func split(s string, known map[string]protoreflect.Descriptor) ([]string, bool) {
	if s == "" {
		return nil, true
	}
	for end := len(s); end > 0; end-- {
		if _, found := known[s[:end]]; !found {
			continue
		}
		if rest, ok := split(s[end:], known); ok {
			return append([]string{s[:end]}, rest...), true
		}
	}
	return nil, false
}

var (
	camelLine = regexp.MustCompile(`^[A-Z][A-Za-z0-9]+$`)
	enumValue = regexp.MustCompile(`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)= (\d+)`)
	fieldLine = regexp.MustCompile(`^\s*• ([a-z][a-z0-9_]*[^=]*)= (\d+)$`)
	rpcPath   = regexp.MustCompile(`/(kibotos\.operator\.v1\.[A-Za-z]+)/([A-Za-z]+?)一元调用`)
)

// pageWords are heading lines of the page chrome, not API names.
var pageWords = map[string]bool{"Kibotos": true}

func TestEveryNamedMessageEnumAndMethodExists(t *testing.T) {
	for page, pkg := range map[string]string{operatorPage: "kibotos.operator.v1", ctrlPage: "kibotos.ctrl.v1"} {
		known := names(pkg)
		checked := 0
		for _, line := range strings.Split(readPage(t, page), "\n") {
			line = strings.TrimSpace(line)
			if !camelLine.MatchString(line) || pageWords[line] {
				continue
			}
			if _, ok := split(line, known); !ok {
				t.Errorf("%s: %q names something %s does not define", page, line, pkg)
			}
			checked++
		}
		if checked < 20 {
			t.Errorf("%s: only %d names found; is the page the right one?", page, checked)
		}
	}
}

func TestEveryOperatorMethodHasItsPathAndMessages(t *testing.T) {
	text := readPage(t, operatorPage)
	matches := rpcPath.FindAllStringSubmatch(text, -1)
	if len(matches) != 20 {
		t.Errorf("the reference prints %d NodeRegistrationService paths, want 20", len(matches))
	}
	for _, m := range matches {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(m[1] + "." + m[2]))
		if err != nil {
			t.Errorf("/%s/%s: %v", m[1], m[2], err)
			continue
		}
		md := d.(protoreflect.MethodDescriptor)
		if md.IsStreamingClient() || md.IsStreamingServer() {
			t.Errorf("%s is printed as a unary call", md.FullName())
		}
		if got, want := string(md.Input().Name()), m[2]+"Request"; got != want {
			t.Errorf("%s takes %s, want %s", md.FullName(), got, want)
		}
		if got, want := string(md.Output().Name()), m[2]+"Response"; got != want {
			t.Errorf("%s returns %s, want %s", md.FullName(), got, want)
		}
	}
}

func TestEveryEnumValueHasItsNumber(t *testing.T) {
	for page, pkg := range map[string]string{operatorPage: "kibotos.operator.v1", ctrlPage: "kibotos.ctrl.v1"} {
		matches := enumValue.FindAllStringSubmatch(readPage(t, page), -1)
		if len(matches) < 10 {
			t.Errorf("%s: only %d enum values found", page, len(matches))
		}
		for _, m := range matches {
			d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(pkg + "." + m[1]))
			if err != nil {
				t.Errorf("%s: enum value %s: %v", page, m[1], err)
				continue
			}
			if got := fmt.Sprint(d.(protoreflect.EnumValueDescriptor).Number()); got != m[2] {
				t.Errorf("%s: %s = %s, the reference prints %s", page, m[1], got, m[2])
			}
		}
	}
}

// typeText renders a field's type the way the reference prints it after the
// field name: "uint32", "optionalbool", "repeatedstring", "map<string, string>",
// "google.protobuf.Timestamp".
func typeText(fd protoreflect.FieldDescriptor) string {
	if fd.IsMap() {
		return fmt.Sprintf("map<%s, %s>", typeText(fd.MapKey()), typeText(fd.MapValue()))
	}
	var name string
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		name = string(fd.Message().FullName())
	case protoreflect.EnumKind:
		name = string(fd.Enum().FullName())
	default:
		name = fd.Kind().String()
	}
	switch {
	case fd.IsList():
		return "repeated" + name
	case fd.HasOptionalKeyword():
		return "optional" + name
	}
	return name
}

func TestEveryNumberedFieldHasItsNameTypeAndNumber(t *testing.T) {
	known := names("kibotos.ctrl.v1")
	var current protoreflect.MessageDescriptor
	seen := map[string]bool{}
	for _, line := range strings.Split(readPage(t, ctrlPage), "\n") {
		trimmed := strings.TrimSpace(line)
		if camelLine.MatchString(trimmed) {
			md, _ := known[trimmed].(protoreflect.MessageDescriptor)
			current = md
			continue
		}
		m := fieldLine.FindStringSubmatch(line)
		if m == nil || enumValue.MatchString(line) {
			continue
		}
		if current == nil {
			t.Errorf("field %q printed outside a message", m[1])
			continue
		}
		var fd protoreflect.FieldDescriptor
		for i := 0; i < current.Fields().Len(); i++ {
			if f := current.Fields().Get(i); fmt.Sprint(f.Number()) == m[2] {
				fd = f
			}
		}
		if fd == nil {
			t.Errorf("%s has no field number %s (%s)", current.Name(), m[2], m[1])
			continue
		}
		if got := string(fd.Name()) + typeText(fd); got != m[1] {
			t.Errorf("%s field %s: the .proto says %q, the reference prints %q", current.Name(), m[2], got, m[1])
		}
		seen[string(current.Name())] = true
	}
	if len(seen) < 10 {
		keys := make([]string, 0, len(seen))
		for k := range seen {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.Errorf("fields were checked in only %d messages: %v", len(seen), keys)
	}
}
