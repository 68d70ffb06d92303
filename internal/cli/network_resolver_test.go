package cli_test

import (
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/testenv"
)

// --resolver sends a resolvers entry (the API's refusals of a missing
// Resolver and of one under deny-all name it), and a path that is neither
// direct nor egress:ID is refused before anything is sent.
func TestTheResolverFlag(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	code, _, errOut := kibotosAll(t, c, "workspace", "create", "--network", "public-internet", "--resolver", "rsv-none=direct")
	if code == 0 || !strings.Contains(errOut, "resolvers[0].resolver_id") || !strings.Contains(errOut, "rsv-none") {
		t.Errorf("create with a missing Resolver: exit %d, %s", code, errOut)
	}
	for _, bad := range []string{"rsv-1=egress:", "rsv-1=proxy", "=direct"} {
		code, _, errOut := kibotosAll(t, c, "workspace", "network", "set", "w-none", "--network", "public-internet", "--resolver", bad)
		if code == 0 || !strings.Contains(errOut, "--resolver") {
			t.Errorf("--resolver %q: exit %d, %s", bad, code, errOut)
		}
	}
	if code, _, errOut := kibotosAll(t, c, "workspace", "create", "--network", "deny-all", "--resolver", "rsv-1"); code == 0 || !strings.Contains(errOut, "resolvers") {
		t.Errorf("--resolver under deny-all: exit %d, %s", code, errOut)
	}
}
