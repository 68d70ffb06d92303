package labels_test

import (
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/labels"
)

// checkInvalid fails unless err is invalid_argument naming wantField, or nil
// when wantField is "".
func checkInvalid(t *testing.T, err error, wantField string) {
	t.Helper()
	if wantField == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want invalid_argument on %s", wantField)
	}
	if code := connect.CodeOf(err); code != connect.CodeInvalidArgument {
		t.Fatalf("code %v, want invalid_argument (%v)", code, err)
	}
	if got := apierr.FieldOf(err); got != wantField {
		t.Fatalf("field %q, want %q (%v)", got, wantField, err)
	}
}

// keyCases are qualified names and whether they are valid; both label and
// annotation keys follow them.
var keyCases = []struct {
	key   string
	valid bool
}{
	{"app", true},
	{"a", true},
	{"A", true},
	{"9", true},
	{"app.kubernetes.io/name", true},
	{"example.com/My_Key-1.x", true},
	{"a-b.c/d", true},
	{"x/y", true},
	{strings.Repeat("n", 63), true},
	{strings.Repeat("n", 64), false},
	{prefix253() + "/n", true},
	{prefix253() + "a/n", false},
	{"example.com/" + strings.Repeat("n", 63), true},
	{"example.com/" + strings.Repeat("n", 64), false},
	{"", false},
	{"/", false},
	{"/name", false},
	{"example.com/", false},
	{"a/b/c", false},
	{"-app", false},
	{"app-", false},
	{"_app", false},
	{".app", false},
	{"app.", false},
	{"ap p", false},
	{"app!", false},
	{"app=x", false},
	{"äpp", false},
	{"app\x00", false},
	{"app\xff", false},
	{"Example.com/name", false}, // prefix is lower case only
	{"exa_mple.com/name", false},
	{"-example.com/name", false},
	{"example-.com/name", false},
	{"example..com/name", false},
	{".example.com/name", false},
	{"example.com./name", false},
	{"example.com/-name", false},
	{"example.com/name_", false},
	{"ex-ample.c-om/name", true},
	{"123.456/name", true},
}

// prefix253 is a DNS subdomain of exactly 253 bytes.
func prefix253() string {
	l := strings.Repeat("a", 63)
	p := l + "." + l + "." + l + "." + strings.Repeat("b", 61)
	if len(p) != 253 {
		panic(len(p))
	}
	return p
}

func TestLabelKeys(t *testing.T) {
	for _, tc := range keyCases {
		t.Run(fmt.Sprintf("%.40q", tc.key), func(t *testing.T) {
			err := labels.ValidateLabels("spec.labels", map[string]string{tc.key: "v"})
			want := ""
			if !tc.valid {
				want = fmt.Sprintf("spec.labels[%q]", tc.key)
			}
			checkInvalid(t, err, want)
		})
	}
}

func TestAnnotationKeys(t *testing.T) {
	for _, tc := range keyCases {
		t.Run(fmt.Sprintf("%.40q", tc.key), func(t *testing.T) {
			err := labels.ValidateAnnotations("annotations", map[string]string{tc.key: "any value at all"})
			want := ""
			if !tc.valid {
				want = fmt.Sprintf("annotations[%q]", tc.key)
			}
			checkInvalid(t, err, want)
		})
	}
}

func TestLabelValues(t *testing.T) {
	for _, tc := range []struct {
		value string
		valid bool
	}{
		{"", true},
		{"v", true},
		{"V1", true},
		{"a-b_c.d", true},
		{"1.2.3", true},
		{strings.Repeat("v", 63), true},
		{strings.Repeat("v", 64), false},
		{"-v", false},
		{"v-", false},
		{"_v", false},
		{"v.", false},
		{"a/b", false},
		{"a b", false},
		{"a:b", false},
		{"é", false},
		{"a\x00b", false},
		{"\xff", false},
	} {
		t.Run(fmt.Sprintf("%q", tc.value), func(t *testing.T) {
			err := labels.ValidateLabels("spec.labels", map[string]string{"app.kubernetes.io/name": tc.value})
			want := ""
			if !tc.valid {
				want = `spec.labels["app.kubernetes.io/name"]`
			}
			checkInvalid(t, err, want)
		})
	}
}

func TestLabelCount(t *testing.T) {
	m := map[string]string{}
	for i := range labels.MaxLabels {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	checkInvalid(t, labels.ValidateLabels("labels", m), "")
	m["one-more"] = "v"
	checkInvalid(t, labels.ValidateLabels("labels", m), "labels")
	checkInvalid(t, labels.ValidateLabels("labels", nil), "")
	checkInvalid(t, labels.ValidateLabels("labels", map[string]string{}), "")
}

// TestFirstErrorIsStable checks that with several bad entries the same one
// (the smallest key) is always reported, whatever the map order.
func TestFirstErrorIsStable(t *testing.T) {
	m := map[string]string{"b-": "v", "a": "-", "c": "v", "d!": "v"}
	for range 20 {
		checkInvalid(t, labels.ValidateLabels("labels", m), `labels["a"]`)
		checkInvalid(t, labels.ValidateAnnotations("annotations", m), `annotations["b-"]`)
	}
}

func TestAnnotationValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value string
		valid bool
	}{
		{"empty", "", true},
		{"text", "any text: with spaces, / and = signs", true},
		{"multi-line json", "{\n  \"a\": [1, 2]\n}\n", true},
		{"unicode", "héllo, 世界 🚀", true},
		{"long", strings.Repeat("x", 100_000), true},
		{"control characters", "\t\x01\x7f", true},
		{"nul", "a\x00b", false},
		{"only nul", "\x00", false},
		{"invalid utf-8", "a\xffb", false},
		{"truncated utf-8", "\xe4\xb8", false},
		{"surrogate", "\xed\xa0\x80", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := labels.ValidateAnnotations("spec.annotations", map[string]string{"example.com/note": tc.value})
			want := ""
			if !tc.valid {
				want = `spec.annotations["example.com/note"]`
			}
			checkInvalid(t, err, want)
		})
	}
}

func TestAnnotationSize(t *testing.T) {
	// Two entries whose keys and values add up to exactly the limit.
	k1, k2 := "a", "example.com/b"
	v1 := strings.Repeat("x", 100_000)
	v2 := strings.Repeat("y", labels.MaxAnnotationsBytes-len(k1)-len(v1)-len(k2))
	m := map[string]string{k1: v1, k2: v2}
	checkInvalid(t, labels.ValidateAnnotations("annotations", m), "")

	m[k2] = v2 + "y"
	checkInvalid(t, labels.ValidateAnnotations("annotations", m), "annotations")

	// Keys count toward the limit too.
	m[k2] = v2
	m["c"] = ""
	checkInvalid(t, labels.ValidateAnnotations("annotations", m), "annotations")

	checkInvalid(t, labels.ValidateAnnotations("annotations", nil), "")
}
