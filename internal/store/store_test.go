package store_test

import (
	"testing"

	"github.com/kibotos/kibotos/internal/store/storetest"
)

// The conformance suite, once per database kind.
func TestStore(t *testing.T) {
	for _, b := range storetest.Backends() {
		t.Run(b.Name, func(t *testing.T) { storetest.Run(t, b) })
	}
}
