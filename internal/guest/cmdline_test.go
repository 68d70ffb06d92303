package guest_test

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/guest"
)

func TestSplitCmdlineHonoursQuotes(t *testing.T) {
	got := guest.SplitCmdline(` console=ttyS0  quiet a="b c" "d=e f"	g=` + "\n")
	want := []guest.Param{
		{Key: "console", Value: "ttyS0", HasValue: true},
		{Key: "quiet"},
		{Key: "a", Value: "b c", HasValue: true},
		{Key: "d", Value: "e f", HasValue: true},
		{Key: "g", Value: "", HasValue: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
}

func TestParseCmdline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cmdline string
		want    guest.Config // Params are not compared
		errs    []string     // substrings of the error; none: no error
	}{
		{
			name:    "nothing",
			cmdline: "console=ttyS0 reboot=t panic=-1 quiet",
			want:    guest.Config{RootFSType: "ext4"},
		},
		{
			name:    "everything",
			cmdline: "console=ttyS0 kibotos.root=/dev/vda kibotos.layer=/dev/vdb kibotos.volume=/dev/vdc:/data/ kibotos.boot_id=b-1 quiet",
			want: guest.Config{Root: "/dev/vda", RootFSType: "ext4", Layer: "/dev/vdb",
				Volume: &guest.VolumeMount{Device: "/dev/vdc", Path: "/data"}, BootID: "b-1"},
		},
		{
			name:    "root fs type and a volume alone",
			cmdline: "kibotos.rootfstype=erofs kibotos.volume=/dev/vda:/home/user/work",
			want:    guest.Config{RootFSType: "erofs", Volume: &guest.VolumeMount{Device: "/dev/vda", Path: "/home/user/work"}},
		},
		{
			name:    "last one wins",
			cmdline: "kibotos.boot_id=a kibotos.boot_id=b",
			want:    guest.Config{RootFSType: "ext4", BootID: "b"},
		},
		{
			name:    "network and host name",
			cmdline: "kibotos.net=10.0.2.15/24,10.0.2.2,10.0.2.3 kibotos.hostname=ws-1",
			want: guest.Config{RootFSType: "ext4", Hostname: "ws-1", Net: &guest.NetConfig{
				Address: netip.MustParsePrefix("10.0.2.15/24"), Gateway: netip.MustParseAddr("10.0.2.2"), DNS: netip.MustParseAddr("10.0.2.3")}},
		},
		{
			name:    "an IPv6 link DNS address",
			cmdline: "kibotos.net=10.0.2.15/24,10.0.2.2,fe80::1",
			want: guest.Config{RootFSType: "ext4", Net: &guest.NetConfig{
				Address: netip.MustParsePrefix("10.0.2.15/24"), Gateway: netip.MustParseAddr("10.0.2.2"), DNS: netip.MustParseAddr("fe80::1")}},
		},
		{
			name:    "a nameserver that is no unicast address, or has a zone",
			cmdline: "kibotos.net=10.0.2.15/24,10.0.2.2,ff02::1 kibotos.net=10.0.2.15/24,10.0.2.2,fe80::1%eth0 kibotos.net=10.0.2.15/24,10.0.2.2,0.0.0.0",
			want:    guest.Config{RootFSType: "ext4"},
			errs:    []string{"nameserver \"ff02::1\"", "nameserver \"fe80::1%eth0\"", "nameserver \"0.0.0.0\""},
		},
		{
			name:    "a nameserver nothing answers at",
			cmdline: "kibotos.dns=unreachable kibotos.net=10.0.2.15/24,10.0.2.2,10.0.2.3",
			want: guest.Config{RootFSType: "ext4", DNSUnreachable: true, Net: &guest.NetConfig{
				Address: netip.MustParsePrefix("10.0.2.15/24"), Gateway: netip.MustParseAddr("10.0.2.2"), DNS: netip.MustParseAddr("10.0.2.3")}},
		},
		{
			name:    "an unknown kibotos.dns is reported",
			cmdline: "kibotos.dns=maybe",
			want:    guest.Config{RootFSType: "ext4"},
			errs:    []string{"kibotos.dns: \"maybe\" is not unreachable"},
		},
		{
			name:    "malformed networks are left out and reported",
			cmdline: "kibotos.net=10.0.2.15 kibotos.net=10.0.2.15/24,10.0.3.2,10.0.2.3 kibotos.net=fe80::1/64,fe80::2,10.0.2.3 kibotos.net=10.0.2.15/24,10.0.2.2,x",
			want:    guest.Config{RootFSType: "ext4"},
			errs:    []string{"is not ADDR/PREFIX,GATEWAY,DNS", "gateway \"10.0.3.2\" is not an IPv4 address in 10.0.2.0/24", "\"fe80::1/64\" is not an IPv4 address", "nameserver \"x\""},
		},
		{
			name:    "IPv6 with a link-local gateway",
			cmdline: "kibotos.net6=fd6b:6962:6f74::15/64,fe80::1",
			want: guest.Config{RootFSType: "ext4", Net6: &guest.Net6Config{
				Address: netip.MustParsePrefix("fd6b:6962:6f74::15/64"), Gateway: netip.MustParseAddr("fe80::1")}},
		},
		{
			name:    "IPv6 with a gateway in the guest's network, beside IPv4",
			cmdline: "kibotos.net=10.0.2.15/24,10.0.2.2,10.0.2.3 kibotos.net6=2001:db8:1::15/48,2001:db8:1:ff::1",
			want: guest.Config{RootFSType: "ext4",
				Net:  &guest.NetConfig{Address: netip.MustParsePrefix("10.0.2.15/24"), Gateway: netip.MustParseAddr("10.0.2.2"), DNS: netip.MustParseAddr("10.0.2.3")},
				Net6: &guest.Net6Config{Address: netip.MustParsePrefix("2001:db8:1::15/48"), Gateway: netip.MustParseAddr("2001:db8:1:ff::1")}},
		},
		{
			name: "malformed IPv6 networks are left out and reported",
			cmdline: "kibotos.net6=fd00::15/64 kibotos.net6=fd00::15/64,fe80::1,fd00::3 " +
				"kibotos.net6=10.0.2.15/24,10.0.2.2 kibotos.net6=::ffff:10.0.2.15/120,fe80::1 kibotos.net6=fd00::15,fe80::1 " +
				"kibotos.net6=fe80::15/64,fe80::1 kibotos.net6=::1/128,fe80::1 kibotos.net6=ff02::15/64,fe80::1 kibotos.net6=fd00::15/0,fe80::1 " +
				"kibotos.net6=fd00::15/64,fd01::1 kibotos.net6=fd00::15/64,10.0.2.2 kibotos.net6=fd00::15/64,::ffff:10.0.2.2 " +
				"kibotos.net6=fd00::15/64,fe80::1%eth0 kibotos.net6=fd00::15/64,fd00::15 kibotos.net6=fd00::15/64,ff02::2 kibotos.net6=fd00::15/64,x",
			want: guest.Config{RootFSType: "ext4"},
			errs: []string{
				`"fd00::15/64" is not ADDR/PREFIX,GATEWAY`, `"fd00::15/64,fe80::1,fd00::3" is not ADDR/PREFIX,GATEWAY`,
				`"10.0.2.15/24" is not a global or unique local IPv6 address`, `"::ffff:10.0.2.15/120" is not a global`,
				`"fd00::15" is not a global`, `"fe80::15/64" is not a global`, `"::1/128" is not a global`,
				`"ff02::15/64" is not a global`, `"fd00::15/0" is not a global`,
				`gateway "fd01::1" is not an IPv6 address on the link: link-local (fe80::/10) or in fd00::/64, other than the guest's own`,
				`gateway "10.0.2.2"`, `gateway "::ffff:10.0.2.2"`, `gateway "fe80::1%eth0"`, `gateway "fd00::15"`, `gateway "ff02::2"`, `gateway "x"`,
			},
		},
		{
			name:    "root without layer",
			cmdline: "kibotos.root=/dev/vda",
			want:    guest.Config{Root: "/dev/vda", RootFSType: "ext4"},
			errs:    []string{"go together"},
		},
		{
			name:    "malformed values are left out and reported",
			cmdline: "kibotos.root=vda kibotos.layer=/dev/vdb kibotos.volume=/dev/vdc kibotos.boot_id kibotos.bogus=1 kibotos.volume=/dev/vdc:relative kibotos.volume=/dev/vdc:/ kibotos.volume=/dev/vdc:/proc/x",
			want:    guest.Config{RootFSType: "ext4", Layer: "/dev/vdb"},
			errs: []string{`kibotos.root: "vda" is not a clean absolute device path`, "not DEVICE:MOUNTPATH",
				"kibotos.boot_id: no value", "kibotos.bogus: unknown parameter", "not absolute",
				"cannot be mounted at /", "under /proc", "go together"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := guest.ParseCmdline(tc.cmdline)
			got.Params = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("config %+v (volume %+v), want %+v (volume %+v)", got, got.Volume, tc.want, tc.want.Volume)
			}
			if len(tc.errs) == 0 && err != nil {
				t.Errorf("unexpected error: %v", err)
			}
			if len(tc.errs) > 0 && err == nil {
				t.Fatalf("no error, want %q", tc.errs)
			}
			for _, e := range tc.errs {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("error %q lacks %q", err, e)
				}
			}
		})
	}
}

func TestSwitchesRootNeedsRootAndLayer(t *testing.T) {
	for _, tc := range []struct {
		cfg  guest.Config
		want bool
	}{
		{guest.Config{}, false},
		{guest.Config{Root: "/dev/vda"}, false},
		{guest.Config{Layer: "/dev/vdb"}, false},
		{guest.Config{Root: "/dev/vda", Layer: "/dev/vdb"}, true},
	} {
		if got := tc.cfg.SwitchesRoot(); got != tc.want {
			t.Errorf("%+v: %t", tc.cfg, got)
		}
	}
}

func TestModuleParamsComeFromTheCmdline(t *testing.T) {
	params := guest.SplitCmdline(`virtio_mmio.device=512@0xfeb00e00:12 virtio-mmio.device=4K@0xfeb00c00:13 ` +
		`virtio_mmio_x.y=1 virtio_blk.queue_depth=4 foo.bar="a b" foo.flag quiet virtio_mmio.`)
	for _, tc := range []struct{ module, want string }{
		{"virtio_mmio", "device=512@0xfeb00e00:12 device=4K@0xfeb00c00:13"},
		{"virtio-mmio", "device=512@0xfeb00e00:12 device=4K@0xfeb00c00:13"},
		{"virtio_blk", "queue_depth=4"},
		{"foo", `bar="a b" flag`},
		{"ext4", ""},
	} {
		if got := guest.ModuleParams(params, tc.module); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.module, got, tc.want)
		}
	}
}
