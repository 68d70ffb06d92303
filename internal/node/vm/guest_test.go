package vm_test

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/kibotos/kibotos/internal/guest"
	"github.com/kibotos/kibotos/internal/node/netslot"
	"github.com/kibotos/kibotos/internal/node/vm"
)

// attachment is a network attachment that only addresses the guest.
// addressed gives the guest addressing a; GuestParams calls nothing else
// (the embedded nil interface would panic if it did).
type addressed struct {
	netslot.Attachment
	a netslot.Addressing
}

func (a addressed) Guest() netslot.Addressing { return a.a }

func TestGuestParamsNetwork(t *testing.T) {
	v4 := netslot.Addressing{Address: netip.MustParsePrefix("10.0.2.15/24"), Gateway: netip.MustParseAddr("10.0.2.2"),
		Nameserver: netip.MustParseAddr("10.0.2.3")}
	both := v4
	both.AddressV6, both.GatewayV6 = netip.MustParsePrefix("fd6b:6962:6f74::15/64"), netip.MustParseAddr("fe80::1")
	noDNS := both
	noDNS.NoDNS = true
	for _, tc := range []struct {
		name string
		net  netslot.Attachment
		want string
	}{
		{"none", nil, "kibotos.boot_id=b-1"},
		{"IPv4 only", addressed{a: v4}, "kibotos.boot_id=b-1 kibotos.net=10.0.2.15/24,10.0.2.2,10.0.2.3"},
		{"IPv4 and IPv6", addressed{a: both},
			"kibotos.boot_id=b-1 kibotos.net=10.0.2.15/24,10.0.2.2,10.0.2.3 kibotos.net6=fd6b:6962:6f74::15/64,fe80::1"},
		{"no DNS", addressed{a: noDNS},
			"kibotos.boot_id=b-1 kibotos.net=10.0.2.15/24,10.0.2.2,10.0.2.3 kibotos.net6=fd6b:6962:6f74::15/64,fe80::1 kibotos.dns=unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := vm.GuestParams(vm.Spec{BootID: "b-1", Network: tc.net}, func(int) string { return "" })
			if got != tc.want {
				t.Errorf("%q\nwant %q", got, tc.want)
			}
			// The guest reads back what it was given.
			cfg, err := guest.ParseCmdline(got)
			if err != nil {
				t.Fatalf("the guest rejects %q: %v", got, err)
			}
			var want *guest.Net6Config
			if tc.net != nil && tc.net.Guest().AddressV6.IsValid() {
				want = &guest.Net6Config{Address: tc.net.Guest().AddressV6, Gateway: tc.net.Guest().GatewayV6}
			}
			if !reflect.DeepEqual(cfg.Net6, want) {
				t.Errorf("the guest's IPv6 configuration %+v, want %+v", cfg.Net6, want)
			}
		})
	}
}
