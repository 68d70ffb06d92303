//go:build failpoint

package failpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type config struct {
	point, key string
	n          int
	trace      *os.File

	mu   sync.Mutex
	seen bool // a hit about key happened in this process
	hits int  // hits of point counted so far
}

var (
	loadOnce sync.Once
	cfg      *config
)

func load() *config {
	loadOnce.Do(func() {
		c := &config{}
		if spec := os.Getenv(EnvCrash); spec != "" {
			var err error
			if c.point, c.key, c.n, err = parse(spec); err != nil {
				panic(fmt.Sprintf("%s=%q: %v", EnvCrash, spec, err))
			}
			c.seen = c.key == FromStart
		}
		if path := os.Getenv(EnvTrace); path != "" {
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
			if err != nil {
				panic(fmt.Sprintf("%s: %v", EnvTrace, err))
			}
			c.trace = f
		}
		cfg = c
	})
	return cfg
}

// parse reads POINT@KEY#N.
func parse(spec string) (point, key string, n int, err error) {
	point, rest, ok := strings.Cut(spec, "@")
	if !ok {
		return "", "", 0, fmt.Errorf("want POINT@KEY#N")
	}
	key, count, ok := strings.Cut(rest, "#")
	if !ok {
		return "", "", 0, fmt.Errorf("want POINT@KEY#N")
	}
	if n, err = strconv.Atoi(count); err != nil || n < 1 {
		return "", "", 0, fmt.Errorf("N must be a positive number")
	}
	known := false
	for _, p := range Points {
		known = known || p == point
	}
	if !known || key == "" {
		return "", "", 0, fmt.Errorf("unknown point %q or empty key (points: %s)", point, strings.Join(Points, ", "))
	}
	if key == FromStart && !slices.Contains(Keyless, point) {
		return "", "", 0, fmt.Errorf("%q arms only a point without a key (%s)", FromStart, strings.Join(Keyless, ", "))
	}
	return point, key, n, nil
}

func about(key, want string) bool {
	return key == want || strings.HasPrefix(key, want+"/")
}

// Hit marks the point; it kills the process when the point is the one
// KIBOTOS_FAILPOINT names, at its hit.
func Hit(point, key string) {
	c := load()
	crash := c.count(point, key)
	if c.trace != nil {
		if key == "" {
			key = "-"
		}
		line := point + " " + key
		if crash {
			line += " crash"
		}
		// One write per line: O_APPEND keeps lines whole, and what was
		// written survives the kill below (it is in the kernel's cache).
		_, _ = c.trace.WriteString(line + "\n")
	}
	if crash {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way; nothing else runs here
	}
}

// count counts the hit and reports whether it is the one to crash at.
func (c *config) count(point, key string) bool {
	if c.point == "" {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	mine := about(key, c.key)
	c.seen = c.seen || mine
	if point != c.point || !(mine || (key == "" && c.seen)) {
		return false
	}
	c.hits++
	return c.hits == c.n
}

// Lease is the command runner's lease: KIBOTOS_FAILPOINT_LEASE when set,
// else d.
func Lease(d time.Duration) time.Duration {
	if s := os.Getenv(EnvLease); s != "" {
		l, err := time.ParseDuration(s)
		if err != nil || l <= 0 {
			panic(fmt.Sprintf("%s=%q: want a positive duration", EnvLease, s))
		}
		return l
	}
	return d
}
