//go:build !failpoint

package failpoint

import "time"

// Hit marks the point: nothing in a production build (inlined away).
func Hit(point, key string) {}

// Lease is the command runner's lease, d in a production build.
func Lease(d time.Duration) time.Duration { return d }
