package hostinfo_test

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/kibotos/kibotos/internal/node/hostinfo"
)

const meminfo = `MemTotal:        8039876 kB
MemFree:          316824 kB
MemAvailable:    5123456 kB
Buffers:          123456 kB
Cached:          4000000 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
`

func TestParseMeminfo(t *testing.T) {
	m, err := hostinfo.ParseMeminfo(strings.NewReader(meminfo))
	if err != nil {
		t.Fatal(err)
	}
	want := hostinfo.Meminfo{TotalBytes: 8039876 * 1024, AvailableBytes: 5123456 * 1024, HasAvailable: true}
	if m != want {
		t.Fatalf("%+v, want %+v", m, want)
	}

	old := "MemTotal:        1000 kB\nMemFree:          10 kB\n"
	m, err = hostinfo.ParseMeminfo(strings.NewReader(old))
	if err != nil || m.HasAvailable || m.TotalBytes != 1000*1024 {
		t.Fatalf("without MemAvailable: %+v %v", m, err)
	}

	for _, bad := range []string{"", "MemFree: 1 kB\n", "MemTotal: x kB\n", "MemTotal:\n"} {
		if _, err := hostinfo.ParseMeminfo(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParsePressure(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want hostinfo.Pressure
	}{
		{
			"some avg10=21.49 avg60=6.12 avg300=6.61 total=110892565\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
			hostinfo.Pressure{Some60: 612, HasSome60: true, Full60: 0, HasFull60: true},
		},
		{
			// cpu on kernels before 5.13 has no full line
			"some avg10=0.00 avg60=100.00 avg300=0.00 total=0\n",
			hostinfo.Pressure{Some60: 10000, HasSome60: true},
		},
		{
			"some avg10=0.00 avg60=0.05 avg300=0.00 total=0\nfull avg10=0.00 avg60=12.3 avg300=0.00 total=0\n",
			hostinfo.Pressure{Some60: 5, HasSome60: true, Full60: 1230, HasFull60: true},
		},
	} {
		got, err := hostinfo.ParsePressure(strings.NewReader(tc.in))
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if got != tc.want {
			t.Errorf("%q: %+v, want %+v", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"", "some avg10=1.00\n", "some avg60=abc\n", "some avg60=100.01\n", "some avg60=-1.00\n"} {
		if _, err := hostinfo.ParsePressure(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string]int{"0": 1, "0-1\n": 2, "0-3,8,10-11": 7, "0,2,4,6": 4} {
		got, err := hostinfo.ParseCPUList(in)
		if err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "0-", ",1"} {
		if _, err := hostinfo.ParseCPUList(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestClassifyClock(t *testing.T) {
	if got := hostinfo.ClassifyClock(unix.TIME_OK, 0); got != hostinfo.ClockSynchronized {
		t.Errorf("TIME_OK: %v", got)
	}
	if got := hostinfo.ClassifyClock(unix.TIME_ERROR, 0); got != hostinfo.ClockUnsynchronized {
		t.Errorf("TIME_ERROR: %v", got)
	}
	if got := hostinfo.ClassifyClock(unix.TIME_OK, unix.STA_UNSYNC|unix.STA_PLL); got != hostinfo.ClockUnsynchronized {
		t.Errorf("STA_UNSYNC: %v", got)
	}
	// The live call must answer something without privilege.
	if got := hostinfo.ClockState(); got == hostinfo.ClockUnknown {
		t.Errorf("ClockState could not read adjtimex")
	}
}

func TestLiveHost(t *testing.T) {
	if n := hostinfo.CPUs(); n < 1 {
		t.Errorf("CPUs = %d", n)
	}
	if id, err := hostinfo.BootID(); err != nil || len(id) != 36 {
		t.Errorf("BootID = %q, %v", id, err)
	}
	m, err := hostinfo.ReadMeminfo()
	if err != nil || m.TotalBytes == 0 {
		t.Errorf("ReadMeminfo = %+v, %v", m, err)
	}
	dir := t.TempDir()
	sp, err := hostinfo.Statfs(dir)
	if err != nil || sp.SizeBytes == 0 || sp.FreeBytes > sp.SizeBytes {
		t.Errorf("Statfs = %+v, %v", sp, err)
	}
	if !hostinfo.Writable(dir) {
		t.Errorf("temp dir not writable")
	}
	if hostinfo.Writable(dir + "/missing") {
		t.Errorf("missing dir writable")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("Writable left %v behind", entries)
	}
}

func TestParseProcessStat(t *testing.T) {
	// A command name with a space and a parenthesis, as QEMU's may be.
	stat := "4242 (qemu-system (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 3 0 12345 1000000 500 18446744073709551615"
	got, err := hostinfo.ParseProcessStat(stat)
	if err != nil || got != 3.8 {
		t.Errorf("ParseProcessStat = %v, %v; want 3.8 s (380 ticks)", got, err)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 0"} {
		if _, err := hostinfo.ParseProcessStat(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseProcessRSS(t *testing.T) {
	got, err := hostinfo.ParseProcessRSS(strings.NewReader("Name:\tqemu\nVmPeak:\t 9 kB\nVmRSS:\t  262144 kB\nThreads: 3\n"))
	if err != nil || got != 256<<20 {
		t.Errorf("ParseProcessRSS = %d, %v; want 256 MiB", got, err)
	}
	for _, bad := range []string{"", "Name: x\n", "VmRSS: 12\n"} {
		if _, err := hostinfo.ParseProcessRSS(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// This process's own usage reads from the live /proc.
func TestReadProcessUsage(t *testing.T) {
	u, err := hostinfo.ReadProcessUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSSBytes == 0 || u.CPUSeconds < 0 {
		t.Errorf("usage of the test process: %+v", u)
	}
}
