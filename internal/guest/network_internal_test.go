package guest

import (
	"encoding/binary"
	"net/netip"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// Internal: the requests' bytes are what the kernel reads, and no exported
// function returns them.

// request is a netlink request as the kernel reads it.
type request struct {
	kind, flags uint16
	body        []byte // the fixed-size message: rtmsg or ifaddrmsg
	attrs       []attr // in order
}

type attr struct {
	kind  uint16
	value []byte
}

// parseRequest reads b as one netlink message whose fixed part is
// bodyLen bytes, failing the test on any inconsistent length.
func parseRequest(t *testing.T, b []byte, bodyLen int) request {
	t.Helper()
	ne := binary.NativeEndian
	if len(b) < unix.NLMSG_HDRLEN+bodyLen || int(ne.Uint32(b)) != len(b) {
		t.Fatalf("message of %d bytes says it has %d", len(b), ne.Uint32(b))
	}
	r := request{kind: ne.Uint16(b[4:]), flags: ne.Uint16(b[6:]), body: b[unix.NLMSG_HDRLEN : unix.NLMSG_HDRLEN+bodyLen]}
	for a := b[unix.NLMSG_HDRLEN+bodyLen:]; len(a) > 0; {
		n := int(ne.Uint16(a))
		if n < unix.SizeofRtAttr || n > len(a) || n%unix.RTA_ALIGNTO != 0 {
			t.Fatalf("attribute of length %d in %d bytes", n, len(a))
		}
		r.attrs = append(r.attrs, attr{ne.Uint16(a[2:]), a[unix.SizeofRtAttr:n]})
		a = a[n:]
	}
	return r
}

const wantFlags = unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_EXCL

func TestRouteRequests(t *testing.T) {
	oif := binary.NativeEndian.AppendUint32(nil, 7)
	for _, tc := range []struct {
		name  string
		req   []byte
		rtmsg []byte // family, dst_len, src_len, tos, table, protocol, scope, type; flags
		attrs []attr
	}{
		{
			name:  "IPv4 default route",
			req:   routeRequest(netip.MustParsePrefix("0.0.0.0/0"), netip.MustParseAddr("10.0.2.2"), 0, unix.RTN_UNICAST),
			rtmsg: []byte{unix.AF_INET, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST, 0, 0, 0, 0},
			attrs: []attr{{unix.RTA_GATEWAY, []byte{10, 0, 2, 2}}},
		},
		{
			name:  "IPv4 unreachable host",
			req:   routeRequest(netip.MustParsePrefix("10.0.2.3/32"), netip.Addr{}, 0, unix.RTN_UNREACHABLE),
			rtmsg: []byte{unix.AF_INET, 32, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNREACHABLE, 0, 0, 0, 0},
			attrs: []attr{{unix.RTA_DST, []byte{10, 0, 2, 3}}},
		},
		{
			name:  "IPv6 default route out of an interface",
			req:   routeRequest(netip.MustParsePrefix("::/0"), netip.MustParseAddr("fe80::1"), 7, unix.RTN_UNICAST),
			rtmsg: []byte{unix.AF_INET6, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST, 0, 0, 0, 0},
			attrs: []attr{{unix.RTA_GATEWAY, netip.MustParseAddr("fe80::1").AsSlice()}, {unix.RTA_OIF, oif}},
		},
		{
			name:  "IPv6 network",
			req:   routeRequest(netip.MustParsePrefix("fd00:1::/32"), netip.Addr{}, 7, unix.RTN_UNREACHABLE),
			rtmsg: []byte{unix.AF_INET6, 32, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNREACHABLE, 0, 0, 0, 0},
			attrs: []attr{{unix.RTA_DST, netip.MustParseAddr("fd00:1::").AsSlice()}, {unix.RTA_OIF, oif}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parseRequest(t, tc.req, unix.SizeofRtMsg)
			want := request{kind: unix.RTM_NEWROUTE, flags: wantFlags, body: tc.rtmsg, attrs: tc.attrs}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("request %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestAddrRequest(t *testing.T) {
	addr := netip.MustParsePrefix("fd6b:6962:6f74::15/64")
	got := parseRequest(t, addrRequest(7, addr), unix.SizeofIfAddrmsg)
	index := binary.NativeEndian.AppendUint32(nil, 7)
	want := request{
		kind: unix.RTM_NEWADDR, flags: wantFlags,
		// family, prefixlen, flags, scope, index
		body:  append([]byte{unix.AF_INET6, 64, unix.IFA_F_NODAD, unix.RT_SCOPE_UNIVERSE}, index...),
		attrs: []attr{{unix.IFA_LOCAL, addr.Addr().AsSlice()}, {unix.IFA_ADDRESS, addr.Addr().AsSlice()}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("request %+v\nwant %+v", got, want)
	}
}
