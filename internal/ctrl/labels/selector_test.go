package labels_test

import (
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/ctrl/labels"
)

func TestParseCanonical(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"", ""},
		{"   ", ""},
		{"a=b", "a=b"},
		{"a==b", "a=b"},
		{"a = b", "a=b"},
		{" a == b ", "a=b"},
		{"a!=b", "a!=b"},
		{"a != b", "a!=b"},
		{"a", "a"},
		{"!a", "!a"},
		{"! a", "!a"},
		{"a=", "a="},
		{"a!=", "a!="},
		{"a==", "a="},
		{"a=,b", "a=,b"},
		{"a in (x,y)", "a in (x,y)"},
		{"a in(y, x)", "a in (x,y)"},
		{"a\tin\n( y ,x , y )", "a in (x,y)"},
		{"a notin (y,x)", "a notin (x,y)"},
		{"a in (x)", "a=x"},
		{"a notin (x)", "a!=x"},
		{"a in ()", "a="},
		{"a in (x,)", "a in (,x)"},
		{"a in (,x)", "a in (,x)"},
		{"a in (x,,y)", "a in (,x,y)"},
		{"a in (in,notin)", "a in (in,notin)"},
		{"a=in", "a=in"},
		{"in", "in"},
		{"notin in (a)", "notin=a"},
		{"c=d,a=b", "a=b,c=d"},
		{"b,!a,a in (x,y),a", "a,!a,a in (x,y),b"},
		{"a=b,a=b,a==b,a in (b)", "a=b"},
		{"a!=b,a=b", "a=b,a!=b"},
		{"app.kubernetes.io/name=web,tier in (fe,be),!legacy", "app.kubernetes.io/name=web,!legacy,tier in (be,fe)"},
		{"A_b.c=D-e_f.1", "A_b.c=D-e_f.1"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			s, err := labels.Parse(tc.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.in, err)
			}
			if got := s.String(); got != tc.want {
				t.Fatalf("Parse(%q).String() = %q, want %q", tc.in, got, tc.want)
			}
			if s.Empty() != (tc.want == "") {
				t.Fatalf("Empty() = %v", s.Empty())
			}
			// The canonical form parses back to itself.
			again, err := labels.Parse(s.String())
			if err != nil {
				t.Fatalf("reparse %q: %v", s.String(), err)
			}
			if again.String() != tc.want {
				t.Fatalf("reparse %q gives %q", tc.want, again.String())
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		",",
		"a,",
		",a",
		"a,,b",
		"!",
		"!!a",
		"!a=b",
		"a b",
		"a=b c",
		"a=b=c",
		"a===b",
		"a=(b)",
		"a=b)",
		"a in",
		"a in x",
		"a in (x",
		"a in (x y)",
		"a in (x,(y))",
		"a notin x,y",
		"a in (x) b",
		"=b",
		"!=b",
		"in (x)",
		"a>1",
		"a<1",
		"a gt 1",
		"(a)",
		"a)",
		"-a=b",
		"a-=b",
		"a=-b",
		"a=b-",
		"a=" + strings.Repeat("v", 64),
		strings.Repeat("k", 64) + "=v",
		"Example.com/a=b",
		"/a",
		"a/b/c",
		"a in (x,-y)",
		"a notin (" + strings.Repeat("v", 64) + ")",
		"a=\xff",
		"ä=b",
		"a=b\x00",
		"!-a",
	} {
		t.Run(in, func(t *testing.T) {
			s, err := labels.Parse(in)
			checkInvalid(t, err, "label_selector")
			if !s.Empty() {
				t.Fatalf("failed Parse returned a non-empty selector %q", s)
			}
		})
	}
}

func TestMatches(t *testing.T) {
	web := map[string]string{"app": "web", "tier": "fe", "empty": ""}
	db := map[string]string{"app": "db", "tier": "be"}
	bare := map[string]string{}
	for _, tc := range []struct {
		selector      string
		web, db, bare bool
		comment       string
	}{
		{"", true, true, true, "empty selects all"},
		{"app=web", true, false, false, ""},
		{"app==web", true, false, false, ""},
		{"app!=web", false, true, true, "!= matches objects without the key"},
		{"app", true, true, false, ""},
		{"!app", false, false, true, ""},
		{"tier in (fe,be)", true, true, false, ""},
		{"tier in (fe)", true, false, false, ""},
		{"tier notin (fe)", false, true, true, "notin matches objects without the key"},
		{"tier notin (fe,be)", false, false, true, ""},
		{"app=web,tier=fe", true, false, false, "requirements are ANDed"},
		{"app=web,tier=be", false, false, false, ""},
		{"app,!empty", false, true, false, ""},
		{"empty=", true, false, false, "an empty value matches only a present empty label"},
		{"empty in ()", true, false, false, ""},
		{"empty!=", false, true, true, ""},
		{"empty in (x,)", true, false, false, ""},
		{"app in (web,)", true, false, false, ""},
		{"missing!=x,app notin (db)", true, false, true, ""},
		{"APP=web", false, false, false, "keys are case-sensitive"},
		{"app=Web", false, false, false, "values are case-sensitive"},
	} {
		t.Run(tc.selector, func(t *testing.T) {
			s, err := labels.Parse(tc.selector)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range []struct {
				name   string
				labels map[string]string
				want   bool
			}{{"web", web, tc.web}, {"db", db, tc.db}, {"bare", bare, tc.bare}} {
				if got := s.Matches(o.labels); got != o.want {
					t.Errorf("%q matches %s = %v, want %v %s", tc.selector, o.name, got, o.want, tc.comment)
				}
			}
			if got := s.Matches(nil); got != tc.bare {
				t.Errorf("%q matches nil = %v, want %v", tc.selector, got, tc.bare)
			}
		})
	}
}

func TestZeroSelector(t *testing.T) {
	var s labels.Selector
	if !s.Empty() || s.String() != "" || !s.Matches(map[string]string{"a": "b"}) || !s.Matches(nil) {
		t.Fatal("the zero Selector must select everything and print as empty")
	}
}
