// Package page makes and reads list page tokens. A token is bound to the
// filter of the list that made it: used with another filter it is
// invalid_argument, so a caller cannot page one list with another's cursor.
package page

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"

	"github.com/kibotos/kibotos/internal/ctrl/apierr"
)

// DefaultSize and MaxSize bound page_size: zero selects DefaultSize and more
// than MaxSize is cut down to it.
const (
	DefaultSize = 100
	MaxSize     = 1000
)

// Size is the page size to use for a requested page_size.
func Size(requested uint32) int {
	switch {
	case requested == 0:
		return DefaultSize
	case requested > MaxSize:
		return MaxSize
	}
	return int(requested)
}

type token struct {
	After  string `json:"a"`
	Filter string `json:"f"`
}

func filterHash(filter string) string {
	sum := sha256.Sum256([]byte(filter))
	return hex.EncodeToString(sum[:8])
}

// Token is the page token that continues after key, for filter (a canonical
// text of every request field that narrows the list).
func Token(after, filter string) string {
	b, _ := json.Marshal(token{After: after, Filter: filterHash(filter)})
	return base64.RawURLEncoding.EncodeToString(b)
}

// After reads a page token made for filter; an empty token starts at the
// beginning.
func After(pageToken, filter string) (string, error) {
	if pageToken == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(pageToken)
	var t token
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil {
		return "", apierr.Invalid("page_token", "is not a token this list made")
	}
	if t.Filter != filterHash(filter) {
		return "", apierr.Invalid("page_token", "was made for another filter; a page token is bound to the filter of the list that made it")
	}
	return t.After, nil
}

// Collect pages through a keyed source, keeping the items keep accepts, until
// it has size items. fetch returns up to n items after a key, in key order.
// It returns the page and the token for the next one ("" at the end).
func Collect[T any](size int, after, filter string, key func(T) string, keep func(T) bool, fetch func(after string, n int) ([]T, error)) ([]T, string, error) {
	var out []T
	for {
		batch, err := fetch(after, size+1)
		if err != nil {
			return nil, "", err
		}
		for _, item := range batch {
			if !keep(item) {
				after = key(item)
				continue
			}
			if len(out) == size {
				return out, Token(key(out[len(out)-1]), filter), nil
			}
			out = append(out, item)
			after = key(item)
		}
		if len(batch) < size+1 {
			return out, "", nil
		}
	}
}
