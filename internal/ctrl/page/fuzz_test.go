package page_test

import (
	"testing"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/ctrl/page"
)

// FuzzPageToken: whatever a caller sends as page_token, After never
// panics and refuses only with invalid_argument naming page_token; a token
// it accepts is one a list could have made (re-made from what After read,
// it reads the same). A token made for a filter reads back the key it was
// made after (any key a list has: keys are valid UTF-8) under that filter,
// and under another filter is refused.
func FuzzPageToken(f *testing.F) {
	f.Add("", "", "", "")
	f.Add(page.Token("vol-7", "app=web"), "app=web", "vol-7", "app=db")
	f.Add(page.Token("", ""), "", "ws-1", "x")
	f.Add(page.Token("k\"ey\\\u2028", "a\x00b"), "a\x00b", "k\"ey\\\u2028", "a\x00c")
	f.Add("garbage!", "", "a", "b")
	f.Add("e30", "", "a", "b")                                        // {}
	f.Add("eyJhIjoxfQ", "", "a", "b")                                 // {"a":1}
	f.Add("bnVsbA", "", "a", "b")                                     // null
	f.Add("eyJhIjoieCIsImYiOiJ4In0=", "", "a", "b")                   // padded
	f.Add("eyJhIjoieCIsImYiOiJ4IiwiYSI6InkifQ", "", "a", "b")         // a repeated key
	f.Add("eyJhIjoieCIsImYiOiJlM2IwYzQ0Mjk4ZmMxYzE0In0", "", "x", "") // {"a":"x","f":<hash of "">}
	f.Fuzz(func(t *testing.T, token, filter, after, otherFilter string) {
		got, err := page.After(token, filter)
		if err != nil {
			if connect.CodeOf(err) != connect.CodeInvalidArgument || apierr.FieldOf(err) != "page_token" {
				t.Fatalf("After(%q, %q): %v; want invalid_argument naming page_token", token, filter, err)
			}
		} else if token != "" {
			remade := page.Token(got, filter)
			if again, err := page.After(remade, filter); err != nil || again != got {
				t.Fatalf("After(%q) read %q; re-made as %q it reads %q, %v", token, got, remade, again, err)
			}
		} else if got != "" {
			t.Fatalf("the empty token reads %q, want the beginning", got)
		}

		tok := page.Token(after, filter)
		if tok == "" {
			t.Fatal("Token made the empty token, which starts over")
		}
		back, err := page.After(tok, filter)
		if err != nil {
			t.Fatalf("After(Token(%q, %q)): %v", after, filter, err)
		}
		if utf8.ValidString(after) && back != after {
			t.Fatalf("Token(%q, %q) reads back %q", after, filter, back)
		}
		if otherFilter != filter {
			if _, err := page.After(tok, otherFilter); connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("a token made for %q read under %q: %v; want invalid_argument", filter, otherFilter, err)
			}
		}
	})
}
