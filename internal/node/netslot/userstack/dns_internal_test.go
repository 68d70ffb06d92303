package userstack

import (
	"context"
	"net/netip"
	"testing"

	"github.com/miekg/dns"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot/policy"
)

// FuzzLinkDNSAnswer: whatever a guest sends to the link DNS address, a
// message that unpacks as a query gets an answer with its id that packs,
// REFUSED under DENY_ALL and SERVFAIL under PUBLIC_INTERNET with no
// resolver (neither path dials). The slot parses nothing itself: miekg/dns
// does, and this checks the slot's use of it.
func FuzzLinkDNSAnswer(f *testing.F) {
	for _, q := range []*dns.Msg{
		new(dns.Msg).SetQuestion("example.com.", dns.TypeA),
		new(dns.Msg).SetQuestion("example.com.", dns.TypeAAAA).SetEdns0(4096, true),
		{MsgHdr: dns.MsgHdr{Id: 7, Opcode: dns.OpcodeUpdate}},
		{MsgHdr: dns.MsgHdr{Id: 9}, Question: []dns.Question{{Name: "a.", Qtype: dns.TypeTXT, Qclass: dns.ClassINET}, {Name: "b.", Qtype: dns.TypeMX, Qclass: dns.ClassCHAOS}}},
	} {
		b, err := q.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0x0c, 0, 1, 0, 1})
	slots := map[int]*Slot{}
	for rcode, mode := range map[int]ctrlv1.NetworkPolicyMode{
		dns.RcodeRefused:       ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_DENY_ALL,
		dns.RcodeServerFailure: ctrlv1.NetworkPolicyMode_NETWORK_POLICY_MODE_PUBLIC_INTERNET,
	} {
		p, err := policy.Compile(&ctrlv1.NetworkPolicy{Mode: mode}, policy.Context{LinkDNS: []netip.Addr{GatewayV4}})
		if err != nil {
			f.Fatal(err)
		}
		s := &Slot{ctx: context.Background()}
		s.policy.Store(&revision{Policy: p, n: 1})
		slots[rcode] = s
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		q := new(dns.Msg)
		if q.Unpack(b) != nil || q.Response {
			return // dropped, as answerQueries drops it
		}
		for rcode, s := range slots {
			a := s.answer(GatewayV4, q)
			if _, err := a.Pack(); err != nil {
				t.Fatalf("the answer to %v does not pack: %v", q, err)
			}
			if a.Id != q.Id || a.Rcode != rcode || !a.Response {
				t.Fatalf("answer %v to %v, want id %d and rcode %s", a, q, q.Id, dns.RcodeToString[rcode])
			}
		}
	})
}
