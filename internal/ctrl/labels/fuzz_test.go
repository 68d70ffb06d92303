package labels_test

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/labels"
)

// Kubernetes' own patterns (k8s.io/apimachinery/pkg/util/validation), the
// oracle the hand-written checks of this package must agree with.
var (
	k8sName      = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	k8sSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

func oracleQualifiedName(s string) bool {
	name := s
	if prefix, rest, ok := strings.Cut(s, "/"); ok {
		if len(prefix) == 0 || len(prefix) > 253 || !k8sSubdomain.MatchString(prefix) {
			return false
		}
		name = rest
	}
	return len(name) <= 63 && k8sName.MatchString(name)
}

func oracleLabelValue(s string) bool { return s == "" || len(s) <= 63 && k8sName.MatchString(s) }

// FuzzSelector: for any text, Parse never panics and refuses only with
// invalid_argument naming label_selector; what it accepts prints as a
// canonical text that parses back to the same selector, matches the same
// label maps, and is unchanged by repeating the selector. For any key and
// value, ValidateLabels and ValidateAnnotations agree with Kubernetes'
// patterns, and a valid pair selects exactly as "k=v", "k!=v", "k" and "!k"
// say.
func FuzzSelector(f *testing.F) {
	for _, s := range []string{
		"", "a=b", "a==b", "a!=b", "!a", "a", "a in (x,y)", "a notin (y,x)", "a in ()", "a in (x,)", "a=,b",
		"app.kubernetes.io/name=web,tier in (fe,be),!legacy", "in in (in)", "notin notin (notin)", "a>1", "a in (x",
		"a=b=c", "a in x", "!!a", "a,,b", "/a", "a/", "A/b", "a/b/c", "a==", "a=b,", ",", "a in (x y)", "\x00", "é=1",
	} {
		f.Add(s, "app.kubernetes.io/name", "web")
	}
	f.Add("a", "", "")
	f.Add("a", "a-", "b")
	f.Add("a", "a", "-b")
	f.Add("a", "x/a", "")
	f.Add("a", "Ab.c/a", "")
	f.Add("a", strings.Repeat("a", 63), strings.Repeat("b", 64))
	f.Add("a", strings.Repeat("a.", 126)+"a/b", "v\x00")
	f.Add("a", "k", "\xff")
	f.Fuzz(func(t *testing.T, sel, key, value string) {
		checkSelector(t, sel, key, value)
		checkValidators(t, key, value)
		checkPairSelectors(t, key, value)
	})
}

func checkSelector(t *testing.T, sel, key, value string) {
	s, err := labels.Parse(sel)
	if err != nil {
		if connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "label_selector" {
			t.Fatalf("Parse(%q): %v; want invalid_argument naming label_selector", sel, err)
		}
		return
	}
	canon := s.String()
	again, err := labels.Parse(canon)
	if err != nil {
		t.Fatalf("Parse(%q) printed %q, which does not parse: %v", sel, canon, err)
	}
	if again.String() != canon || !reflect.DeepEqual(again, s) {
		t.Fatalf("Parse(%q) printed %q, which parses as %q", sel, canon, again.String())
	}
	if s.Empty() != (canon == "") {
		t.Fatalf("Parse(%q): Empty() = %v, String() = %q", sel, s.Empty(), canon)
	}
	twice := sel
	if strings.TrimSpace(sel) != "" {
		twice = sel + "," + sel
	}
	if d, err := labels.Parse(twice); err != nil || d.String() != canon {
		t.Fatalf("Parse(%q) = %q, %v; want %q as for %q", twice, d.String(), err, canon, sel)
	}
	for _, m := range []map[string]string{nil, {key: value}, {key: ""}, {"a": "b", key: value}, {"a": "x"}} {
		if s.Matches(m) != again.Matches(m) {
			t.Fatalf("%q and its canonical %q disagree on %v", sel, canon, m)
		}
	}
}

func checkValidators(t *testing.T, key, value string) {
	m := map[string]string{key: value}
	lerr := labels.ValidateLabels("spec.labels", m)
	if want := oracleQualifiedName(key) && oracleLabelValue(value); (lerr == nil) != want {
		t.Fatalf("ValidateLabels(%q: %q) = %v; Kubernetes says valid = %v", key, value, lerr, want)
	}
	aerr := labels.ValidateAnnotations("spec.annotations", m)
	want := oracleQualifiedName(key) && utf8.ValidString(value) && !strings.ContainsRune(value, 0) &&
		len(key)+len(value) <= labels.MaxAnnotationsBytes
	if (aerr == nil) != want {
		t.Fatalf("ValidateAnnotations(%q: %q) = %v; want valid = %v", key, value, aerr, want)
	}
	for _, err := range []error{lerr, aerr} {
		if err != nil && (connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.HasPrefix(apierr.FieldOf(err), "spec.")) {
			t.Fatalf("validator error %v; want invalid_argument naming the map", err)
		}
	}
}

// checkPairSelectors: a valid key and value select by the four simple
// forms exactly as their definitions say.
func checkPairSelectors(t *testing.T, key, value string) {
	if !oracleQualifiedName(key) || !oracleLabelValue(value) {
		return
	}
	other := value + "x"
	if len(other) > 63 || !oracleLabelValue(other) {
		other = "x"
	}
	if other == value {
		other = "y"
	}
	for _, tc := range []struct {
		sel                          string
		withValue, withOther, absent bool
	}{
		{key + "=" + value, true, false, false},
		{key + "!=" + value, false, true, true},
		{key, true, true, false},
		{"!" + key, false, false, true},
		{key + " in (" + value + "," + other + ")", true, true, false},
		{key + " notin (" + value + ")", false, true, true},
	} {
		s, err := labels.Parse(tc.sel)
		if err != nil {
			t.Fatalf("Parse(%q) of a valid key and value: %v", tc.sel, err)
		}
		for _, c := range []struct {
			m    map[string]string
			want bool
		}{{map[string]string{key: value}, tc.withValue}, {map[string]string{key: other}, tc.withOther}, {nil, tc.absent}} {
			if got := s.Matches(c.m); got != c.want {
				t.Fatalf("Parse(%q).Matches(%v) = %v, want %v", tc.sel, c.m, got, c.want)
			}
		}
	}
}
