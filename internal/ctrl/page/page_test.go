package page_test

import (
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/kibotos/kibotos/internal/ctrl/page"
)

func TestTokensAreBoundToTheirFilter(t *testing.T) {
	tok := page.Token("vol-7", "app=web")
	if after, err := page.After(tok, "app=web"); err != nil || after != "vol-7" {
		t.Errorf("After = %q, %v", after, err)
	}
	if _, err := page.After(tok, "app=db"); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("other filter: %v, want invalid_argument", err)
	}
	if _, err := page.After("garbage!", ""); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("garbage: %v", err)
	}
	if after, err := page.After("", "x"); err != nil || after != "" {
		t.Errorf("empty token: %q %v", after, err)
	}
}

func TestSize(t *testing.T) {
	for in, want := range map[uint32]int{0: 100, 1: 1, 1000: 1000, 5000: 1000} {
		if got := page.Size(in); got != want {
			t.Errorf("Size(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestCollectFiltersAcrossBatchesAndPagesToTheEnd(t *testing.T) {
	var items []string
	for i := 0; i < 50; i++ {
		items = append(items, fmt.Sprintf("k%02d", i))
	}
	fetch := func(after string, n int) ([]string, error) {
		var out []string
		for _, it := range items {
			if it > after && len(out) < n {
				out = append(out, it)
			}
		}
		return out, nil
	}
	even := func(s string) bool { return (s[2]-'0')%2 == 0 }
	var all []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("does not end")
		}
		got, next, err := page.Collect(4, after, "even", func(s string) string { return s }, even, fetch)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, got...)
		if next == "" {
			break
		}
		if after, err = page.After(next, "even"); err != nil {
			t.Fatal(err)
		}
	}
	if len(all) != 25 || strings.Join(all[:3], ",") != "k00,k02,k04" {
		t.Errorf("collected %v", all)
	}
}
