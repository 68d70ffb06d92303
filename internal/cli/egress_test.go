package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/testenv"
)

// The egress and resolver commands: a password read from a file, shown
// only as set; updates that change the flags given; the API's refusals as
// errors.
func TestEgressAndResolverCommands(t *testing.T) {
	c := testenv.New(t, testenv.FastFleet())
	secret := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(secret, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := kibotosAll(t, c, "egress", "create", "--protocol", "socks5", "--endpoint", "proxy.example:1080",
		"--username", "alice", "--password-file", secret, "--label", "team=a", "-o", "json")
	created := &ctrlv1.CreateEgressResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), created) != nil || !created.GetEgress().GetPasswordSet() || strings.Contains(out, "s3cret") {
		t.Fatalf("egress create: exit %d\n%s%s", code, out, errOut)
	}
	id := created.GetEgress().GetEgressId()
	// --no-password removes a stored password: a create has none to remove.
	if code, _, errOut = kibotosAll(t, c, "egress", "create", "--protocol", "socks5", "--endpoint", "proxy.example:1080", "--no-password"); code == 0 || !strings.Contains(errOut, "unknown flag: --no-password") {
		t.Errorf("egress create --no-password: exit %d, %s", code, errOut)
	}
	code, out, errOut = kibotosAll(t, c, "egress", "list", "-l", "team=a")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "SOCKS5") || !strings.Contains(out, "set") || strings.Contains(out, "s3cret") {
		t.Errorf("egress list: exit %d\n%s%s", code, out, errOut)
	}
	// The stored password is never returned, so an update must resend it.
	if code, _, errOut = kibotosAll(t, c, "egress", "update", id, "--udp"); code == 0 || !strings.Contains(errOut, "--password-file") {
		t.Errorf("update without the password: exit %d, %s", code, errOut)
	}
	code, out, errOut = kibotosAll(t, c, "egress", "update", id, "--udp", "--password-file", secret, "--drain-seconds", "5", "-o", "json")
	updated := &ctrlv1.UpdateEgressResponse{}
	if code != 0 || protojson.Unmarshal([]byte(out), updated) != nil || updated.GetEgress().GetRevision() != 2 || !updated.GetEgress().GetSpec().GetUdpEnabled() ||
		updated.GetEgress().GetSpec().GetEndpoint() != "proxy.example:1080" {
		t.Errorf("egress update: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut = kibotosAll(t, c, "egress", "update", id, "--no-password", "--expected-revision", "1"); code == 0 || !strings.Contains(errOut, "failed_precondition") {
		t.Errorf("update at a stale revision: exit %d, %s", code, errOut)
	}
	if code, _, errOut = kibotosAll(t, c, "egress", "create", "--protocol", "socks5", "--endpoint", "proxy.example"); code == 0 || !strings.Contains(errOut, "spec.endpoint") {
		t.Errorf("create without a port: exit %d, %s", code, errOut)
	}

	code, out, errOut = kibotosAll(t, c, "resolver", "create", "--protocol", "https", "--url", "https://dns.example/dns-query", "-q")
	rid := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(rid, "rsv-") {
		t.Fatalf("resolver create: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = kibotosAll(t, c, "resolver", "update", rid, "--protocol", "tls", "--address", "192.0.2.53:853")
	if code != 0 || !strings.Contains(out, "TLS") || !strings.Contains(out, "192.0.2.53:853") || strings.Contains(out, "dns-query") {
		t.Errorf("resolver update: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut = kibotosAll(t, c, "resolver", "get", rid); code != 0 || !strings.Contains(out, "RESOLVER") {
		t.Errorf("resolver get: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{{"egress", "delete", id}, {"resolver", "delete", rid}} {
		if code, out, errOut = kibotosAll(t, c, args...); code != 0 {
			t.Errorf("%s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}
	if code, _, errOut = kibotosAll(t, c, "resolver", "get", "rsv-none"); code == 0 || !strings.Contains(errOut, "not_found") {
		t.Errorf("resolver get of none: exit %d, %s", code, errOut)
	}
}
