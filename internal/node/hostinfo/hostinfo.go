// Package hostinfo reads what the node agent reports about its host: CPUs,
// memory, pressure (PSI), boot id, clock synchronization, filesystem space.
//
// The Parse functions take the text of the /proc and /sys files so they can
// be tested with fixtures; the Read functions read the live files.
package hostinfo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Meminfo holds the /proc/meminfo fields the agent reports, in bytes.
type Meminfo struct {
	TotalBytes     uint64
	AvailableBytes uint64
	// HasAvailable is false on kernels without MemAvailable.
	HasAvailable bool
}

// ParseMeminfo parses /proc/meminfo.
func ParseMeminfo(r io.Reader) (Meminfo, error) {
	var m Meminfo
	var haveTotal bool
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "MemTotal" && name != "MemAvailable") {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return Meminfo{}, fmt.Errorf("meminfo: %s has no value", name)
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return Meminfo{}, fmt.Errorf("meminfo: %s: %w", name, err)
		}
		if len(fields) > 1 && fields[1] == "kB" {
			n *= 1024
		}
		switch name {
		case "MemTotal":
			m.TotalBytes, haveTotal = n, true
		case "MemAvailable":
			m.AvailableBytes, m.HasAvailable = n, true
		}
	}
	if err := sc.Err(); err != nil {
		return Meminfo{}, err
	}
	if !haveTotal {
		return Meminfo{}, errors.New("meminfo: no MemTotal")
	}
	return m, nil
}

// ReadMeminfo reads /proc/meminfo.
func ReadMeminfo() (Meminfo, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return Meminfo{}, err
	}
	defer f.Close()
	return ParseMeminfo(f)
}

// Pressure is one /proc/pressure file's 60-second averages in basis points
// (hundredths of a percent). A line the file lacks (cpu "full" on older
// kernels) has its Has flag false.
type Pressure struct {
	Some60, Full60       uint32
	HasSome60, HasFull60 bool
}

// ParsePressure parses a /proc/pressure/{cpu,memory,io} file:
//
//	some avg10=0.00 avg60=1.23 avg300=0.00 total=12345
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
func ParsePressure(r io.Reader) (Pressure, error) {
	var p Pressure
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		var value *uint32
		var has *bool
		switch fields[0] {
		case "some":
			value, has = &p.Some60, &p.HasSome60
		case "full":
			value, has = &p.Full60, &p.HasFull60
		default:
			continue
		}
		for _, f := range fields[1:] {
			v, ok := strings.CutPrefix(f, "avg60=")
			if !ok {
				continue
			}
			bp, err := percentToBasisPoints(v)
			if err != nil {
				return Pressure{}, fmt.Errorf("pressure %s avg60: %w", fields[0], err)
			}
			*value, *has = bp, true
		}
	}
	if err := sc.Err(); err != nil {
		return Pressure{}, err
	}
	if !p.HasSome60 && !p.HasFull60 {
		return Pressure{}, errors.New("pressure: no avg60 values")
	}
	return p, nil
}

// percentToBasisPoints converts a percentage with up to two decimals
// ("12.34") to basis points (1234) without going through a float.
func percentToBasisPoints(s string) (uint32, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if len(frac) > 2 {
		frac = frac[:2]
	}
	for len(frac) < 2 {
		frac += "0"
	}
	w, err := strconv.ParseUint(whole, 10, 32)
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseUint(frac, 10, 32)
	if err != nil {
		return 0, err
	}
	bp := w*100 + f
	if bp > 10000 {
		return 0, fmt.Errorf("%s%% is above 100%%", s)
	}
	return uint32(bp), nil
}

// ReadPressure reads /proc/pressure/<resource> (cpu, memory or io).
func ReadPressure(resource string) (Pressure, error) {
	f, err := os.Open("/proc/pressure/" + resource)
	if err != nil {
		return Pressure{}, err
	}
	defer f.Close()
	return ParsePressure(f)
}

// ParseCPUList counts the CPUs in a kernel CPU list such as
// /sys/devices/system/cpu/online ("0-3,8,10-11").
func ParseCPUList(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty cpu list")
	}
	n := 0
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("cpu list %q: %w", s, err)
			}
		}
		if a < 0 || b < a {
			return 0, fmt.Errorf("cpu list %q: bad range %q", s, part)
		}
		n += b - a + 1
	}
	return n, nil
}

// CPUs is the number of online host CPUs (falling back to the CPUs this
// process may use when sysfs cannot be read).
func CPUs() int {
	if data, err := os.ReadFile("/sys/devices/system/cpu/online"); err == nil {
		if n, err := ParseCPUList(string(data)); err == nil {
			return n
		}
	}
	return runtime.NumCPU()
}

// BootID reads the kernel's boot id.
func BootID() (string, error) {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(data))
	if id == "" {
		return "", errors.New("empty boot_id")
	}
	return id, nil
}

// FilesystemSpace is the size and free space (for unprivileged users) of
// the filesystem holding a path.
type FilesystemSpace struct {
	SizeBytes, FreeBytes uint64
}

// Statfs reads the space of the filesystem holding path.
func Statfs(path string) (FilesystemSpace, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return FilesystemSpace{}, err
	}
	bs := uint64(st.Bsize)
	return FilesystemSpace{SizeBytes: st.Blocks * bs, FreeBytes: st.Bavail * bs}, nil
}

// Writable reports whether a file can be created in dir now: it creates
// and removes a probe file, which also catches read-only mounts.
func Writable(dir string) bool {
	f, err := os.CreateTemp(dir, ".kibotos-probe-*")
	if err != nil {
		return false
	}
	name := f.Name()
	f.Close()
	return os.Remove(name) == nil
}

// ClockSync is what the kernel says about the system clock.
type ClockSync int

const (
	ClockUnknown ClockSync = iota
	ClockSynchronized
	ClockUnsynchronized
)

// ClockState asks the kernel (adjtimex, read-only) whether the system clock
// is synchronized.
func ClockState() ClockSync {
	var tx unix.Timex // Modes 0: read only, needs no privilege
	state, err := unix.Adjtimex(&tx)
	if err != nil {
		return ClockUnknown
	}
	return ClassifyClock(state, tx.Status)
}

// ClassifyClock maps adjtimex's return value and status word:
// TIME_ERROR or STA_UNSYNC mean unsynchronized.
func ClassifyClock(state int, status int32) ClockSync {
	if state == unix.TIME_ERROR || status&unix.STA_UNSYNC != 0 {
		return ClockUnsynchronized
	}
	return ClockSynchronized
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, fixed
// at 100 in Linux's user ABI whatever the kernel's own tick rate.
const userHZ = 100

// ProcessUsage is what one process has used: CPU time (user and system,
// since it started) and its resident memory.
type ProcessUsage struct {
	CPUSeconds float64
	RSSBytes   uint64
}

// ParseProcessStat reads the CPU time of /proc/<pid>/stat. The command
// name (field 2) is in parentheses and may hold spaces, so fields are
// counted after its closing parenthesis: utime and stime are fields 14 and
// 15.
func ParseProcessStat(stat string) (float64, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, errors.New("stat: no command name")
	}
	fields := strings.Fields(stat[end+1:])
	// fields[0] is field 3 (state): utime is fields[11], stime fields[12].
	if len(fields) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(fields))
	}
	var ticks uint64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat: %w", err)
		}
		ticks += n
	}
	return float64(ticks) / userHZ, nil
}

// ParseProcessRSS reads VmRSS from /proc/<pid>/status, in bytes.
func ParseProcessRSS(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("status: VmRSS %q", rest)
		}
		kb, err := strconv.ParseUint(fields[0], 10, 64)
		return kb * 1024, err
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("status: no VmRSS")
}

// ReadProcessUsage reads what process pid has used.
func ReadProcessUsage(pid int) (ProcessUsage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcessUsage{}, err
	}
	cpu, err := ParseProcessStat(string(stat))
	if err != nil {
		return ProcessUsage{}, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcessUsage{}, err
	}
	defer f.Close()
	rss, err := ParseProcessRSS(f)
	return ProcessUsage{CPUSeconds: cpu, RSSBytes: rss}, err
}
