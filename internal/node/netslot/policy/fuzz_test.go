package policy_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/ctrl/netpolicy"
	"github.com/kibotos/kibotos/internal/node/netslot/policy"
)

// FuzzParseEntry: the node accepts exactly the entries ctrl stores, and
// reads them as the same prefix, so no stored entry fails on the node and
// none acts on other addresses than ctrl validated.
func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "1.2.3.4/32", "10.0.0.0/8", "10.0.0.1/8", "::/0", "2001:db8::/32",
		"2001:DB8::1", "010.0.0.1", "fe80::1%eth0", "::ffff:1.2.3.4", "::ffff:0102:0304", "::1.2.3.4", "", "/", "1.2.3.4/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := policy.ParseEntry(s)
		want, ctrlErr := netpolicy.ParseEntry(s)
		if (err == nil) != (ctrlErr == nil) {
			t.Fatalf("ParseEntry(%q): node err %v, ctrl err %v", s, err, ctrlErr)
		}
		if err != nil {
			return
		}
		if got != want || got != got.Masked() || got.Addr().Is4In6() || got.Addr().Zone() != "" {
			t.Fatalf("ParseEntry(%q) = %v; ctrl read %v", s, got, want)
		}
	})
}

// FuzzDecide checks what must hold for every policy and flow, against
// oracles outside the engine (net/netip's own classification and a direct
// reading of the lists), not against the registry table itself.
func FuzzDecide(f *testing.F) {
	f.Add(uint8(2), "8.8.8.8", "8.8.0.0/16", "", []byte{8, 8, 8, 8}, uint8(policy.TCP), uint16(443))
	f.Add(uint8(2), "", "", "", []byte{10, 0, 2, 3}, uint8(policy.UDP), uint16(53))
	f.Add(uint8(1), "", "", "", []byte{10, 0, 2, 3}, uint8(policy.UDP), uint16(53))
	f.Add(uint8(2), "0.0.0.0/0", "", "", []byte{169, 254, 169, 254}, uint8(policy.TCP), uint16(80))
	f.Add(uint8(2), "::/0", "::/0", "", []byte{0x26, 0x06, 0x47, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11, 0x11}, uint8(policy.ICMPEcho), uint16(0))
	f.Add(uint8(2), "", "0.0.0.0/0", "", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 1, 1, 1}, uint8(policy.TCP), uint16(443))
	f.Add(uint8(0), "", "", "", []byte{1, 1, 1, 1}, uint8(policy.ICMPEcho), uint16(0))
	f.Add(uint8(2), "", "", "", []byte{192, 0, 9, 20}, uint8(policy.TCP), uint16(7670))
	f.Add(uint8(2), "", "", "", []byte{0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1}, uint8(policy.TCP), uint16(80))
	f.Add(uint8(2), "", "", "10.0.0.0/8", []byte{10, 1, 2, 3}, uint8(policy.TCP), uint16(22))
	f.Add(uint8(2), "", "", "10.0.0.0/8", []byte{10, 1, 2, 3}, uint8(policy.ICMPEcho), uint16(0))
	f.Add(uint8(2), "", "10.0.0.0/8", "10.0.0.0/8", []byte{10, 1, 2, 3}, uint8(policy.TCP), uint16(22))
	f.Add(uint8(2), "10.1.0.0/16", "10.0.0.0/8", "0.0.0.0/0", []byte{10, 1, 2, 3}, uint8(policy.TCP), uint16(22))
	f.Add(uint8(2), "", "", "10.0.2.3", []byte{10, 0, 2, 3}, uint8(policy.TCP), uint16(53))
	f.Fuzz(func(t *testing.T, mode uint8, allow, deny, forward string, dst []byte, proto uint8, port uint16) {
		np := &ctrlv1.NetworkPolicy{Mode: ctrlv1.NetworkPolicyMode(mode), Allow: split(allow), Deny: split(deny)}
		if forward != "" {
			np.Egresses = []*ctrlv1.NetworkPolicyEgress{{EgressId: "eg-office", Destinations: split(forward)}}
		}
		p, err := policy.Compile(np, slotContext)
		if err != nil {
			return
		}
		a, ok := netip.AddrFromSlice(dst)
		if !ok {
			return
		}
		fl := policy.Flow{Proto: policy.Proto(proto), Dst: a, Port: port}
		d := p.Decide(fl)
		if d != p.Decide(fl) {
			t.Fatalf("Decide(%+v) is not deterministic", fl)
		}
		checkDecision(t, np, fl, d)
	})
}

// checkDecision checks d against a direct reading of np: what each kind
// requires of the flow, and that a flow an egresses entry covers never
// leaves directly.
func checkDecision(t *testing.T, np *ctrlv1.NetworkPolicy, fl policy.Flow, d policy.Decision) {
	t.Helper()
	public := np.GetMode() == ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET
	isLinkDNS := public && fl.Port == 53 && slices.Contains(slotContext.LinkDNS, fl.Dst) && fl.Proto != policy.ICMPEcho
	forwarded := public && !isLinkDNS && len(np.GetEgresses()) > 0 && covers(np.GetEgresses()[0].GetDestinations(), fl.Dst) && !deniedByLists(np, fl.Dst)
	switch d.Kind {
	case policy.Direct:
		checkDirect(t, np, fl)
		if forwarded {
			t.Fatalf("%+v left directly though an egresses entry covers it", fl)
		}
	case policy.LinkDNS:
		if !isLinkDNS {
			t.Fatalf("Decide(%+v) = %v under %v", fl, d, np)
		}
	case policy.Forward:
		if !forwarded || fl.Proto != policy.TCP || d.Egress != "eg-office" || !d.Entry.Contains(fl.Dst) {
			t.Fatalf("Decide(%+v) = %v under %v", fl, d, np)
		}
	case policy.Refuse:
		if d.Reason == policy.NoReason {
			t.Fatalf("Decide(%+v) refused without a reason", fl)
		}
		if d.Reason == policy.Forwarded && (!forwarded || fl.Proto != policy.ICMPEcho) {
			t.Fatalf("Decide(%+v) = %v under %v", fl, d, np)
		}
		if forwarded && fl.Proto == policy.TCP {
			t.Fatalf("Decide(%+v) = %v; a covered TCP flow is forwarded", fl, d)
		}
	default:
		t.Fatalf("Decide(%+v) = %v; no such kind", fl, d)
	}
}

func deniedByLists(np *ctrlv1.NetworkPolicy, a netip.Addr) bool {
	return covers(np.GetDeny(), a) && !covers(np.GetAllow(), a)
}

// checkDirect: a flow that leaves directly is TCP or echo under
// PUBLIC_INTERNET, to an address net/netip does not call local, private,
// multicast or unspecified, not the node's or ctrl's, and not refused by
// the lists.
func checkDirect(t *testing.T, np *ctrlv1.NetworkPolicy, fl policy.Flow) {
	t.Helper()
	a := fl.Dst
	switch {
	case np.GetMode() != ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET:
		t.Fatalf("%+v left directly under %v", fl, np.GetMode())
	case fl.Proto != policy.TCP && fl.Proto != policy.ICMPEcho:
		t.Fatalf("%+v left directly with protocol %d", fl, fl.Proto)
	case a.IsLoopback(), a.IsPrivate(), a.IsLinkLocalUnicast(), a.IsMulticast(), a.IsUnspecified(),
		a.IsInterfaceLocalMulticast(), a.IsLinkLocalMulticast(), a.Is4In6(), !a.IsGlobalUnicast():
		t.Fatalf("%+v left directly to a local, private or special address", fl)
	case slices.ContainsFunc(slotContext.Own, func(o netip.Addr) bool { return o.Unmap() == a }):
		t.Fatalf("%+v left directly to the node or ctrl", fl)
	case deniedByLists(np, a):
		t.Fatalf("%+v left directly though only deny covers it", fl)
	}
}

func covers(entries []string, a netip.Addr) bool {
	return slices.ContainsFunc(entries, func(e string) bool {
		p, err := policy.ParseEntry(e)
		return err == nil && p.Contains(a)
	})
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
