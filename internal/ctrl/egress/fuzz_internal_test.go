package egress

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	nodeegress "github.com/kibotos/kibotos/internal/node/netslot/egress"
	"github.com/kibotos/kibotos/internal/node/netslot/resolver"
)

// noPath is a resolver path that is never dialled here.
type noPath struct{}

func (noPath) DialTCP(context.Context, netip.AddrPort) (net.Conn, error) { return nil, net.ErrClosed }
func (noPath) DialUDP(context.Context, netip.AddrPort) (net.Conn, error) { return nil, net.ErrClosed }

// FuzzSpecs: for any EgressSpec and ResolverSpec, ctrl's checks never panic
// and refuse only with invalid_argument naming a field of the spec; every
// spec ctrl accepts, the node's egress dialer and resolver upstream accept
// too (ctrl stores nothing a node cannot use), and its endpoint or address
// is a host the API's rule allows: an IP address without zone or a host
// name, and a port from 1 to 65535.
func FuzzSpecs(f *testing.F) {
	f.Add(uint8(1), "proxy.example:1080", "", "", false, "u", "p", true)
	f.Add(uint8(2), "[2001:db8::1]:3128", "", "proxy.example", true, "u:x", "", false)
	f.Add(uint8(2), "1.2.3.4:0", "", "", false, "", "p", false)
	f.Add(uint8(1), "[1.2.3.4]:080", "", "", false, "", "", false)
	f.Add(uint8(1), "[fe80::1%eth0]:80", "", "", false, "", "", false)
	f.Add(uint8(1), "-a.b:1", "", "", false, "\x7f", "", false)
	f.Add(uint8(4), "", "https://dns.example/dns-query", "dns.example", false, "", "", false)
	f.Add(uint8(4), "", "https://u@dns.example:8443/q#f", "", false, "", "", false)
	f.Add(uint8(4), "", "https://[::1]:0/", "", false, "", "", false)
	f.Add(uint8(4), "", "https://%61/", "", false, "", "", false)
	f.Add(uint8(3), "9.9.9.9:853", "", "dns.quad9.net", true, "", "", false)
	f.Add(uint8(1), "9.9.9.9:53", "", "", false, "", "", false)
	f.Add(uint8(9), "a:1", "", "", false, "", "", false)
	f.Fuzz(func(t *testing.T, protocol uint8, address, url, serverName string, tls bool, username, password string, udp bool) {
		for _, s := range []string{address, url, serverName, username, password} {
			if !utf8.ValidString(s) {
				return // no request carries it: the wire refuses invalid UTF-8 in a string
			}
		}
		es := &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol(protocol % 4), Endpoint: address, Tls: tls, ServerName: serverName,
			Username: username, Password: password, UdpEnabled: udp}
		if err := checkEgressSpec("spec", es); err != nil {
			checkRefusal(t, err)
		} else {
			checkHostPortShape(t, es.GetEndpoint())
			_, err := nodeegress.New(nodeegress.Config{Spec: es,
				Lookup: func(context.Context, string, string) ([]netip.Addr, error) { return nil, nil },
				Check:  func(netip.Addr) error { return nil },
				Dial:   func(context.Context, netip.AddrPort) (net.Conn, error) { return nil, net.ErrClosed }})
			if err != nil {
				t.Fatalf("ctrl accepts %v, the node refuses it: %v", es, err)
			}
		}

		rs := &ctrlv1.ResolverSpec{Protocol: ctrlv1.ResolverProtocol(protocol % 6), Address: address, Url: url, ServerName: serverName}
		if err := checkResolverSpec("spec", rs); err != nil {
			checkRefusal(t, err)
			return
		}
		if rs.GetProtocol() != ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS {
			checkHostPortShape(t, rs.GetAddress())
		}
		_, err := resolver.New(resolver.Config{Spec: rs, Path: noPath{},
			Lookup: func(context.Context, string, string) ([]netip.Addr, error) { return nil, nil }})
		if err != nil {
			t.Fatalf("ctrl accepts %v, the node refuses it: %v", rs, err)
		}
	})
}

func checkRefusal(t *testing.T, err error) {
	t.Helper()
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.HasPrefix(apierr.FieldOf(err), "spec.") {
		t.Fatalf("%v; want invalid_argument naming a field of the spec", err)
	}
}

// checkHostPortShape restates the host:port rule without the validator.
func checkHostPortShape(t *testing.T, v string) {
	t.Helper()
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		t.Fatalf("accepted %q, which is not host:port: %v", v, err)
	}
	if len(port) == 0 || len(port) > 5 || port[0] == '0' || strings.Trim(port, "0123456789") != "" || len(port) == 5 && port > "65535" {
		t.Fatalf("accepted %q, whose port is not 1 to 65535", v)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			t.Fatalf("accepted %q, an address with a zone", v)
		}
		return
	}
	if len(host) == 0 || len(host) > 253 {
		t.Fatalf("accepted %q, whose host is %d bytes", v, len(host))
	}
	for _, label := range strings.Split(host, ".") {
		if len(label) == 0 || len(label) > 63 || strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") ||
			strings.Trim(strings.ToLower(label), "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			t.Fatalf("accepted %q, whose host is neither an address nor a host name", v)
		}
	}
}
