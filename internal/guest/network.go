package guest

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// NetInterface is the guest's one network device: QEMU's virtio-net, the
// first (and only) Ethernet interface the kernel names.
const NetInterface = "eth0"

// ResolvConf is where the guest's nameserver is written, in the new root.
const ResolvConf = "/etc/resolv.conf"

// interfaceUp sets IFF_UP on the interface name.
func interfaceUp(fd int, name string) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s: flags: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("%s: up: %w", name, err)
	}
	return nil
}

// inetSocket is the socket the interface ioctls go through.
func inetSocket() (int, error) {
	return unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
}

// loopbackUp brings up lo (the kernel gives it 127.0.0.1 and ::1).
func loopbackUp() error {
	fd, err := inetSocket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return interfaceUp(fd, "lo")
}

// ConfigureNetwork gives name its address, brings it up and routes
// everything outside its network through the gateway. It is idempotent:
// an address or route that exists already is kept.
func ConfigureNetwork(name string, n NetConfig) error {
	fd, err := inetSocket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := setIPv4(fd, name, unix.SIOCSIFADDR, n.Address.Addr()); err != nil {
		return err
	}
	mask := netip.AddrFrom4(maskOf(n.Address.Bits()))
	if err := setIPv4(fd, name, unix.SIOCSIFNETMASK, mask); err != nil {
		return err
	}
	if err := interfaceUp(fd, name); err != nil {
		return err
	}
	return addDefaultRoute(n.Gateway)
}

func setIPv4(fd int, name string, req uint, addr netip.Addr) error {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := ifr.SetInet4Addr(addr.AsSlice()); err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, req, ifr); err != nil {
		return fmt.Errorf("%s: set %s: %w", name, addr, err)
	}
	return nil
}

func maskOf(bits int) [4]byte {
	var m [4]byte
	binary.BigEndian.PutUint32(m[:], ^uint32(0)<<(32-bits))
	return m
}

// addDefaultRoute adds 0.0.0.0/0 via gw with one rtnetlink request (the
// ioctl for routes takes a struct x/sys/unix does not define).
func addDefaultRoute(gw netip.Addr) error {
	return netlinkRequest(routeRequest(netip.PrefixFrom(netip.IPv4Unspecified(), 0), gw, 0, unix.RTN_UNICAST), "default route via "+gw.String())
}

// AddUnreachableRoute routes addr as unreachable: a packet to it fails
// at once (EHOSTUNREACH) instead of going out to an address nothing
// answers at. Under DENY_ALL that is the link nameserver.
func AddUnreachableRoute(addr netip.Addr) error {
	return netlinkRequest(routeRequest(netip.PrefixFrom(addr, addr.BitLen()), netip.Addr{}, 0, unix.RTN_UNREACHABLE), "unreachable route to "+addr.String())
}

// ConfigureNetwork6 brings name up, gives it n's address and routes ::/0
// through n's gateway, out of name (a link-local gateway means nothing
// without its interface). The address skips duplicate address detection
// (IFA_F_NODAD): the slot is the link's only other end and never takes
// the guest's address, and detection would leave the address unusable
// for a second or more of every boot. Idempotent like ConfigureNetwork.
func ConfigureNetwork6(name string, n Net6Config) error {
	fd, err := inetSocket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// Up first: the kernel refuses a route through an interface that is
	// down.
	if err := interfaceUp(fd, name); err != nil {
		return err
	}
	index, err := interfaceIndex(fd, name)
	if err != nil {
		return err
	}
	if err := netlinkRequest(addrRequest(index, n.Address), fmt.Sprintf("%s: address %s", name, n.Address)); err != nil {
		return err
	}
	dst := netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	return netlinkRequest(routeRequest(dst, n.Gateway, index, unix.RTN_UNICAST), fmt.Sprintf("%s: default route via %s", name, n.Gateway))
}

func interfaceIndex(fd int, name string) (int, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("%s: index: %w", name, err)
	}
	return int(ifr.Uint32()), nil
}

// netlinkRequest sends one rtnetlink request and reads its
// acknowledgement.
func netlinkRequest(req []byte, what string) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return netlinkAck(buf[:n], what)
}

// netlinkAck reads the kernel's answer to one request: an NLMSG_ERROR
// whose error is zero (or EEXIST: the request was applied before).
func netlinkAck(b []byte, what string) error {
	ne := binary.NativeEndian
	for len(b) >= unix.NLMSG_HDRLEN {
		size := int(ne.Uint32(b[0:4]))
		if size < unix.NLMSG_HDRLEN || size > len(b) {
			return fmt.Errorf("%s: malformed netlink answer", what)
		}
		if ne.Uint16(b[4:6]) == unix.NLMSG_ERROR && size >= unix.NLMSG_HDRLEN+4 {
			errno := int32(ne.Uint32(b[unix.NLMSG_HDRLEN:]))
			if errno != 0 && unix.Errno(-errno) != unix.EEXIST {
				return fmt.Errorf("%s: %w", what, unix.Errno(-errno))
			}
			return nil
		}
		b = b[(size+unix.NLMSG_ALIGNTO-1)&^(unix.NLMSG_ALIGNTO-1):]
	}
	return fmt.Errorf("%s: no acknowledgement", what)
}

// routeRequest is RTM_NEWROUTE for dst in the main table, of type rtype
// (RTN_UNICAST via gw, or a type without a gateway: gw invalid), out of
// the interface with index oif (0: whichever reaches gw). The route's
// family is dst's; gw must be of the same.
func routeRequest(dst netip.Prefix, gw netip.Addr, oif int, rtype uint8) []byte {
	r := make([]byte, unix.SizeofRtMsg)
	r[0] = family(dst.Addr())
	r[1] = byte(dst.Bits()) // dst_len
	r[4] = unix.RT_TABLE_MAIN
	r[5] = unix.RTPROT_BOOT
	r[6] = unix.RT_SCOPE_UNIVERSE
	r[7] = rtype
	if dst.Bits() > 0 {
		r = appendAttr(r, unix.RTA_DST, dst.Addr().AsSlice())
	}
	if gw.IsValid() {
		r = appendAttr(r, unix.RTA_GATEWAY, gw.AsSlice())
	}
	if oif != 0 {
		r = appendAttr(r, unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, uint32(oif)))
	}
	return newRequest(unix.RTM_NEWROUTE, r)
}

// addrRequest is RTM_NEWADDR for addr on the interface with index index,
// usable at once (IFA_F_NODAD). IPv4 addresses go by ioctl
// (ConfigureNetwork); this is for those the ioctls cannot set.
func addrRequest(index int, addr netip.Prefix) []byte {
	m := make([]byte, unix.SizeofIfAddrmsg)
	m[0] = family(addr.Addr())
	m[1] = byte(addr.Bits()) // prefixlen
	m[2] = unix.IFA_F_NODAD
	m[3] = unix.RT_SCOPE_UNIVERSE
	binary.NativeEndian.PutUint32(m[4:], uint32(index))
	// Both, as ip(8) sends them: an IFA_ADDRESS unlike IFA_LOCAL would be
	// a point-to-point peer.
	m = appendAttr(m, unix.IFA_LOCAL, addr.Addr().AsSlice())
	m = appendAttr(m, unix.IFA_ADDRESS, addr.Addr().AsSlice())
	return newRequest(unix.RTM_NEWADDR, m)
}

func family(a netip.Addr) byte {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// appendAttr appends one attribute (rtattr) to a request's payload, padded
// to the attribute alignment.
func appendAttr(b []byte, kind uint16, value []byte) []byte {
	ne := binary.NativeEndian
	b = ne.AppendUint16(b, uint16(unix.SizeofRtAttr+len(value)))
	b = ne.AppendUint16(b, kind)
	b = append(b, value...)
	for len(b)%unix.RTA_ALIGNTO != 0 {
		b = append(b, 0)
	}
	return b
}

// newRequest is the netlink message of type kind with payload, creating
// what it asks for and asking for an acknowledgement. NLM_F_EXCL makes a
// request for what exists already fail with EEXIST, which netlinkAck
// takes as done: that is what makes the setup idempotent.
func newRequest(kind uint16, payload []byte) []byte {
	ne := binary.NativeEndian
	b := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(payload))
	ne.PutUint32(b[0:], uint32(unix.NLMSG_HDRLEN+len(payload)))
	ne.PutUint16(b[4:], kind)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	ne.PutUint32(b[8:], 1) // sequence
	return append(b, payload...)
}

// WriteResolvConf makes dns the only nameserver under root.
func WriteResolvConf(root string, dns netip.Addr) error {
	path := filepath.Join(root, ResolvConf)
	// A template may ship resolv.conf as a symlink (systemd-resolved's):
	// replace it rather than write through it.
	_ = os.Remove(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte("# written by kibotos-guest at boot\nnameserver "+dns.String()+"\n"), 0o644)
}

// WaitForInterface waits until the kernel has made the network interface
// name (its driver found the device) under sysDir (/sys).
func WaitForInterface(ctx context.Context, sysDir, name string, timeout time.Duration) error {
	return waitFor(ctx, timeout, 20*time.Millisecond, func() error {
		if _, err := os.Stat(filepath.Join(sysDir, "class/net", name)); err != nil {
			return fmt.Errorf("network interface %s did not appear within %s", name, timeout)
		}
		return nil
	})
}
