package guest

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
)

// Kernel command line parameters read by the guest (all optional).
const (
	ParamRoot       = "kibotos.root"       // template root block device, e.g. /dev/vda
	ParamRootFSType = "kibotos.rootfstype" // its file system type; default ext4
	ParamLayer      = "kibotos.layer"      // writable layer block device, e.g. /dev/vdb
	ParamVolume     = "kibotos.volume"     // DEVICE:MOUNTPATH, e.g. /dev/vdc:/data
	ParamBootID     = "kibotos.boot_id"    // the id the host gives this boot
	ParamNet        = "kibotos.net"        // ADDR/PREFIX,GATEWAY,DNS for eth0, e.g. 10.0.2.15/24,10.0.2.2,10.0.2.3 (DNS may be IPv6: fe80::1)
	ParamNet6       = "kibotos.net6"       // ADDR/PREFIX,GATEWAY for eth0's IPv6, e.g. fd6b:6962:6f74::15/64,fe80::1
	ParamHostname   = "kibotos.hostname"   // the guest's host name
	// ParamDNS is "unreachable" when nothing answers DNS at the
	// nameserver (DENY_ALL): the guest routes it as unreachable, so a
	// query fails at once instead of timing out.
	ParamDNS = "kibotos.dns"
)

// DNSUnreachable is the value of ParamDNS that routes the nameserver as
// unreachable.
const DNSUnreachable = "unreachable"

// DefaultRootFSType is the template root's file system unless
// kibotos.rootfstype says otherwise.
const DefaultRootFSType = "ext4"

// Param is one kernel command line parameter: key=value, or a bare key.
type Param struct {
	Key   string
	Value string
	// HasValue is false for a bare key ("quiet").
	HasValue bool
}

// SplitCmdline splits a kernel command line the way the kernel does:
// parameters are separated by white space, and double quotes group white
// space into a value (key="a b" and "key=a b" both give key, "a b").
func SplitCmdline(s string) []Param {
	var params []Param
	var cur strings.Builder
	inQuote, inToken := false, false
	flush := func() {
		if !inToken {
			return
		}
		tok := cur.String()
		cur.Reset()
		inToken = false
		if k, v, ok := strings.Cut(tok, "="); ok {
			params = append(params, Param{Key: k, Value: v, HasValue: true})
		} else {
			params = append(params, Param{Key: tok})
		}
	}
	for _, r := range s {
		switch {
		case r == '"':
			inQuote = !inQuote
			inToken = true
		case !inQuote && (r == ' ' || r == '\t' || r == '\n' || r == '\r'):
			flush()
		default:
			cur.WriteRune(r)
			inToken = true
		}
	}
	flush()
	return params
}

// VolumeMount is the Volume's block device and where it is mounted in the
// guest's file system.
type VolumeMount struct {
	Device string
	Path   string
}

// Config is what the kernel command line tells the guest about this boot.
type Config struct {
	Root       string // template root block device; empty: none
	RootFSType string // file system of Root
	Layer      string // writable layer block device; empty: none
	Volume     *VolumeMount
	BootID     string // empty: use the kernel's boot id
	Net        *NetConfig
	Net6       *Net6Config
	Hostname   string
	// DNSUnreachable routes Net's nameserver as unreachable (ParamDNS).
	DNSUnreachable bool
	// Params is the whole command line, for module parameters
	// (ModuleParams).
	Params []Param
}

// SwitchesRoot reports whether the guest leaves the initramfs for an
// overlay of the template root and the writable layer.
func (c Config) SwitchesRoot() bool { return c.Root != "" && c.Layer != "" }

// ParseCmdline reads the kibotos.* parameters of a kernel command line. A
// parameter given twice takes its last value, as the kernel does. The error
// lists every parameter that was malformed or unknown; the Config still
// holds all that was valid, so a boot can log the error and go on.
func ParseCmdline(cmdline string) (Config, error) {
	cfg := Config{RootFSType: DefaultRootFSType, Params: SplitCmdline(cmdline)}
	var errs []error
	for _, p := range cfg.Params {
		if !strings.HasPrefix(p.Key, "kibotos.") {
			continue
		}
		if !p.HasValue || p.Value == "" {
			errs = append(errs, fmt.Errorf("%s: no value", p.Key))
			continue
		}
		switch p.Key {
		case ParamRoot:
			if err := checkDevice(p.Value); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.Key, err))
				continue
			}
			cfg.Root = p.Value
		case ParamRootFSType:
			cfg.RootFSType = p.Value
		case ParamLayer:
			if err := checkDevice(p.Value); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.Key, err))
				continue
			}
			cfg.Layer = p.Value
		case ParamVolume:
			v, err := parseVolume(p.Value)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.Key, err))
				continue
			}
			cfg.Volume = &v
		case ParamBootID:
			cfg.BootID = p.Value
		case ParamNet:
			n, err := parseNet(p.Value)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.Key, err))
				continue
			}
			cfg.Net = &n
		case ParamNet6:
			n, err := parseNet6(p.Value)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.Key, err))
				continue
			}
			cfg.Net6 = &n
		case ParamHostname:
			cfg.Hostname = p.Value
		case ParamDNS:
			if p.Value != DNSUnreachable {
				errs = append(errs, fmt.Errorf("%s: %q is not %s", p.Key, p.Value, DNSUnreachable))
				continue
			}
			cfg.DNSUnreachable = true
		default:
			errs = append(errs, fmt.Errorf("%s: unknown parameter", p.Key))
		}
	}
	if (cfg.Root == "") != (cfg.Layer == "") {
		errs = append(errs, fmt.Errorf("%s and %s go together; with one alone the guest stays in its initramfs", ParamRoot, ParamLayer))
	}
	return cfg, errors.Join(errs...)
}

func checkDevice(dev string) error {
	if !filepath.IsAbs(dev) || filepath.Clean(dev) != dev {
		return fmt.Errorf("%q is not a clean absolute device path", dev)
	}
	return nil
}

// parseVolume reads DEVICE:MOUNTPATH.
func parseVolume(s string) (VolumeMount, error) {
	dev, path, ok := strings.Cut(s, ":")
	if !ok {
		return VolumeMount{}, fmt.Errorf("%q is not DEVICE:MOUNTPATH", s)
	}
	if err := checkDevice(dev); err != nil {
		return VolumeMount{}, err
	}
	if !filepath.IsAbs(path) {
		return VolumeMount{}, fmt.Errorf("mount path %q is not absolute", path)
	}
	path = filepath.Clean(path)
	if path == "/" {
		return VolumeMount{}, errors.New("the Volume cannot be mounted at /")
	}
	for _, reserved := range []string{"/dev", "/proc", "/sys"} {
		if path == reserved || strings.HasPrefix(path, reserved+"/") {
			return VolumeMount{}, fmt.Errorf("mount path %s is under %s, which the guest mounts itself", path, reserved)
		}
	}
	return VolumeMount{Device: dev, Path: path}, nil
}

// NetConfig is eth0's static IPv4 configuration.
type NetConfig struct {
	Address netip.Prefix // the guest's address and its network
	Gateway netip.Addr
	DNS     netip.Addr // the only nameserver the guest is given
}

// parseNet reads ADDR/PREFIX,GATEWAY,DNS.
func parseNet(s string) (NetConfig, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return NetConfig{}, fmt.Errorf("%q is not ADDR/PREFIX,GATEWAY,DNS", s)
	}
	addr, err := netip.ParsePrefix(parts[0])
	if err != nil || !addr.Addr().Is4() {
		return NetConfig{}, fmt.Errorf("%q is not an IPv4 address with a prefix length", parts[0])
	}
	gw, err := netip.ParseAddr(parts[1])
	if err != nil || !gw.Is4() || !addr.Masked().Contains(gw) {
		return NetConfig{}, fmt.Errorf("gateway %q is not an IPv4 address in %s", parts[1], addr.Masked())
	}
	// The nameserver is the link DNS address, in the family of the node's
	// first resolver: IPv4, or IPv6 (fe80::1, link-local: the guest
	// scopes it to eth0 itself). A zone is not taken from the command line.
	dns, err := netip.ParseAddr(parts[2])
	if err != nil || dns.Zone() != "" || !(dns.Is4() || isIPv6(dns)) || !dns.IsGlobalUnicast() && !dns.IsLinkLocalUnicast() {
		return NetConfig{}, fmt.Errorf("nameserver %q is not a unicast IPv4 or IPv6 address", parts[2])
	}
	return NetConfig{Address: addr, Gateway: gw, DNS: dns}, nil
}

// Net6Config is eth0's static IPv6 configuration.
type Net6Config struct {
	Address netip.Prefix // the guest's address and its network
	// Gateway is the default router: link-local, or an address in
	// Address's network.
	Gateway netip.Addr
}

// parseNet6 reads ADDR/PREFIX,GATEWAY. The address is global or unique
// local (the kernel makes eth0's link-local address itself); the gateway
// must be on the link, or the kernel could not reach it.
func parseNet6(s string) (Net6Config, error) {
	a, g, ok := strings.Cut(s, ",")
	if !ok || strings.Contains(g, ",") {
		return Net6Config{}, fmt.Errorf("%q is not ADDR/PREFIX,GATEWAY", s)
	}
	addr, err := netip.ParsePrefix(a)
	if err != nil || !isIPv6(addr.Addr()) || !addr.Addr().IsGlobalUnicast() || addr.Bits() == 0 {
		return Net6Config{}, fmt.Errorf("%q is not a global or unique local IPv6 address with a prefix length", a)
	}
	gw, err := netip.ParseAddr(g)
	onLink := gw.IsLinkLocalUnicast() || (gw.IsGlobalUnicast() && addr.Masked().Contains(gw))
	if err != nil || !isIPv6(gw) || gw.Zone() != "" || !onLink || gw == addr.Addr() {
		return Net6Config{}, fmt.Errorf("gateway %q is not an IPv6 address on the link: link-local (fe80::/10) or in %s, other than the guest's own", g, addr.Masked())
	}
	return Net6Config{Address: addr, Gateway: gw}, nil
}

// isIPv6 is true for an IPv6 address that is not an IPv4-mapped one:
// ::ffff:10.0.2.2 is IPv4 on the wire.
func isIPv6(a netip.Addr) bool { return a.Is6() && !a.Is4In6() }

// ModuleParams returns the parameters the command line gives module name
// (name.param=value), in the form finit_module takes, as modprobe does:
// the kernel applies such parameters itself only to built-in code.
func ModuleParams(params []Param, module string) string {
	prefix := normalizeModuleName(module) + "."
	var out []string
	for _, p := range params {
		mod, param, ok := strings.Cut(p.Key, ".")
		if !ok || normalizeModuleName(mod)+"." != prefix || param == "" {
			continue
		}
		switch {
		case !p.HasValue:
			out = append(out, param)
		case strings.ContainsAny(p.Value, " \t"):
			out = append(out, param+`="`+p.Value+`"`)
		default:
			out = append(out, param+"="+p.Value)
		}
	}
	return strings.Join(out, " ")
}

// normalizeModuleName makes dashes and underscores equal, as the kernel does
// for module names.
func normalizeModuleName(s string) string { return strings.ReplaceAll(s, "-", "_") }
