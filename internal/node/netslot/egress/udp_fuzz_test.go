package egress_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/node/netslot/egress"
)

var (
	fuzzEndpoint = netip.MustParseAddrPort("198.51.100.1:1080")
	fuzzDst      = netip.MustParseAddrPort("203.0.113.7:53")
)

// FuzzSOCKS5UDP: whatever an endpoint answers to UDP ASSOCIATE and whatever
// datagram its relay sends, the node never panics, associates only on a
// reply RFC 1928 allows, and reads only a well-formed, unfragmented
// datagram from its destination. The endpoint and the relay are pipes, so
// each input is one whole exchange.
func FuzzSOCKS5UDP(f *testing.F) {
	v4Reply := append([]byte{5, 0, 0, 1, 198, 51, 100, 1}, 0x10, 0x00)
	f.Add(v4Reply, append(header(fuzzDst), "answer"...))
	f.Add([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0x10, 0}, append(header(fuzzDst), "from unspecified"...))
	f.Add(append([]byte{5, 0, 0, 4}, append(netip.MustParseAddr("2001:db8::1").AsSlice(), 0, 53)...), header(fuzzDst))
	f.Add([]byte{5, 1, 0, 1, 0, 0, 0, 0, 0, 0}, []byte{})
	f.Add([]byte{5, 0, 0, 3, 4, 'r', 'e', 'l', 'y', 0, 53}, []byte{})
	f.Add(v4Reply, append(append(header(fuzzDst)[:2:2], 1), header(fuzzDst)[3:]...)) // FRAG 1
	f.Add(v4Reply, append(header(netip.MustParseAddrPort("203.0.113.8:53")), "elsewhere"...))
	f.Add(v4Reply, []byte{0, 0, 0, 3, 1, 'x', 0, 53})
	f.Fuzz(func(t *testing.T, reply, datagram []byte) {
		relay, relayOK := wantRelay(reply)
		var dialled netip.AddrPort
		relayEnd := make(chan net.Conn, 1)
		d, err := egress.New(egress.Config{
			Spec: &ctrlv1.EgressSpec{Protocol: ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, Endpoint: fuzzEndpoint.String(),
				Username: "u", Password: "p", UdpEnabled: true},
			Lookup: noLookup, Check: allowAll,
			Dial: func(context.Context, netip.AddrPort) (net.Conn, error) { return fakeEndpoint(reply, relayOK), nil },
			DialUDP: func(_ context.Context, dst netip.AddrPort) (net.Conn, error) {
				dialled = dst
				node, far := net.Pipe()
				relayEnd <- far
				return node, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := d.DialUDP(ctx, fuzzDst)
		if err != nil {
			if _, typed := egress.KindOf(err); !typed {
				t.Fatalf("reply %x: untyped error %v", reply, err)
			}
			if relayOK {
				t.Fatalf("reply %x is valid, relay %v; DialUDP failed: %v", reply, relay, err)
			}
			return
		}
		defer c.Close()
		if !relayOK || dialled != relay {
			t.Fatalf("reply %x: associated with relay %v (valid %v, want %v)", reply, dialled, relayOK, relay)
		}
		checkDatagram(t, c, <-relayEnd, datagram)
	})
}

// checkDatagram sends one datagram, lets the relay answer datagram and then
// a well-formed "END" from the destination: the node reads datagram's
// payload only if it is acceptable, else END.
func checkDatagram(t *testing.T, c, far net.Conn, datagram []byte) {
	go func() {
		buf := make([]byte, 65535)
		if _, err := far.Read(buf); err != nil {
			return
		}
		_, _ = far.Write(datagram)
		_, _ = far.Write(append(header(fuzzDst), "END"...))
	}()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	want := "END"
	if payload, ok := wantPayload(datagram); ok {
		want = string(payload)
	}
	if string(buf[:n]) != want {
		t.Fatalf("datagram %x: read %q; want %q", datagram, buf[:n], want)
	}
}

// wantRelay is RFC 1928's reading of an ASSOCIATE reply, written apart from
// the node's: version 5, success, reserved 0, an IP address of its type's
// length and a port that is not 0; 0.0.0.0 or :: is the endpoint. A name
// is allowed by the RFC, but the fuzz's lookup resolves nothing.
func wantRelay(r []byte) (netip.AddrPort, bool) {
	if len(r) < 4 || r[0] != 5 || r[1] != 0 || r[2] != 0 {
		return netip.AddrPort{}, false
	}
	n := map[byte]int{1: 4, 4: 16}[r[3]]
	if n == 0 || len(r) < 4+n+2 {
		return netip.AddrPort{}, false
	}
	ip, _ := netip.AddrFromSlice(r[4 : 4+n])
	port := binary.BigEndian.Uint16(r[4+n:])
	if port == 0 {
		return netip.AddrPort{}, false
	}
	if ip.IsUnspecified() {
		ip = fuzzEndpoint.Addr()
	}
	return netip.AddrPortFrom(ip.Unmap(), port), true
}

// wantPayload: reserved 0, FRAG 0, an IP source of its type's length that is
// the destination.
func wantPayload(d []byte) ([]byte, bool) {
	if len(d) < 4 || d[0] != 0 || d[1] != 0 || d[2] != 0 {
		return nil, false
	}
	n := map[byte]int{1: 4, 4: 16}[d[3]]
	if n == 0 || len(d) < 4+n+2 {
		return nil, false
	}
	ip, _ := netip.AddrFromSlice(d[4 : 4+n])
	if netip.AddrPortFrom(ip.Unmap(), binary.BigEndian.Uint16(d[4+n:])) != fuzzDst {
		return nil, false
	}
	return d[4+n+2:], true
}

func header(a netip.AddrPort) []byte {
	atyp := byte(1)
	if a.Addr().Is6() {
		atyp = 4
	}
	b := append([]byte{0, 0, 0, atyp}, a.Addr().AsSlice()...)
	return binary.BigEndian.AppendUint16(b, a.Port())
}

// fakeEndpoint negotiates username/password, takes the ASSOCIATE request
// and answers reply, then holds the control connection open when hold (a
// pipe has no half close: a short reply must end in EOF, not a wait).
func fakeEndpoint(reply []byte, hold bool) net.Conn {
	node, far := net.Pipe()
	go func() {
		defer far.Close()
		greeting := make([]byte, 4)
		auth := make([]byte, 1+1+1+1+1)
		request := make([]byte, 10)
		if _, err := io.ReadFull(far, greeting); err != nil || !bytes.Equal(greeting, []byte{5, 2, 0, 2}) {
			return
		}
		if _, err := far.Write([]byte{5, 2}); err != nil {
			return
		}
		if _, err := io.ReadFull(far, auth); err != nil {
			return
		}
		if _, err := far.Write([]byte{1, 0}); err != nil {
			return
		}
		if _, err := io.ReadFull(far, request); err != nil || request[1] != 3 {
			return
		}
		if _, err := far.Write(reply); err != nil || !hold {
			return
		}
		_, _ = io.Copy(io.Discard, far)
	}()
	return node
}
