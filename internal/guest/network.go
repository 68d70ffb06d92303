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
	return addRoute(routeRequest(netip.PrefixFrom(netip.IPv4Unspecified(), 0), gw, unix.RTN_UNICAST), "default route via "+gw.String())
}

// AddUnreachableRoute routes addr as unreachable: a packet to it fails
// at once (EHOSTUNREACH) instead of going out to an address nothing
// answers at. Under DENY_ALL that is the link nameserver.
func AddUnreachableRoute(addr netip.Addr) error {
	return addRoute(routeRequest(netip.PrefixFrom(addr, 32), netip.Addr{}, unix.RTN_UNREACHABLE), "unreachable route to "+addr.String())
}

// addRoute sends one RTM_NEWROUTE request and reads its acknowledgement.
func addRoute(req []byte, what string) error {
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
// (RTN_UNICAST via gw, or a type without a gateway: gw invalid), asking
// for an acknowledgement.
func routeRequest(dst netip.Prefix, gw netip.Addr, rtype uint8) []byte {
	const rtmsgLen = unix.SizeofRtMsg
	attr := func(kind uint16, addr netip.Addr) []byte {
		a := make([]byte, unix.SizeofRtAttr+4)
		binary.NativeEndian.PutUint16(a[0:], uint16(len(a)))
		binary.NativeEndian.PutUint16(a[2:], kind)
		v := addr.As4()
		copy(a[unix.SizeofRtAttr:], v[:])
		return a
	}
	var attrs []byte
	if dst.Bits() > 0 {
		attrs = append(attrs, attr(unix.RTA_DST, dst.Addr())...)
	}
	if gw.IsValid() {
		attrs = append(attrs, attr(unix.RTA_GATEWAY, gw)...)
	}
	total := unix.NLMSG_HDRLEN + rtmsgLen + len(attrs)
	b := make([]byte, total)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(total))
	ne.PutUint16(b[4:], unix.RTM_NEWROUTE)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	ne.PutUint32(b[8:], 1) // sequence
	r := b[unix.NLMSG_HDRLEN:]
	r[0] = unix.AF_INET     // family
	r[1] = byte(dst.Bits()) // dst_len
	r[4] = unix.RT_TABLE_MAIN
	r[5] = unix.RTPROT_BOOT
	r[6] = unix.RT_SCOPE_UNIVERSE
	r[7] = rtype
	copy(r[rtmsgLen:], attrs)
	return b
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
