package capability_test

import (
	"testing"

	"github.com/kibotos/kibotos/internal/capability"
)

// Every provider's capability is Provider of its name, the name its
// records and logs use.
func TestProvidersAreNamedByProvider(t *testing.T) {
	for name, c := range map[string]string{"qemu": capability.QEMU, "sim": capability.Sim} {
		if capability.Provider(name) != c {
			t.Errorf("capability of provider %s is %q, not %q", name, c, capability.Provider(name))
		}
	}
	if len(capability.Providers) != 2 {
		t.Errorf("Providers %v: want QEMU and Sim", capability.Providers)
	}
}
