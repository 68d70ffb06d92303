package cli

import (
	"fmt"
	"strconv"
	"strings"

	units "github.com/docker/go-units"
)

// parseSize reads a size as a person writes it: 512Mi, 1G, 4GiB, 1.5g
// (binary multiples whatever the spelling, as docker's --memory reads
// them), or a bare number of MiB, which is what these flags took before
// they took units.
func parseSize(s string) (uint64, error) {
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		if n > (1<<63-1)/mib {
			return 0, fmt.Errorf("size %q is too large", s)
		}
		return n * mib, nil
	}
	spelled := s
	if strings.HasSuffix(strings.ToLower(s), "i") {
		spelled += "B" // go-units reads 512MiB, and Kubernetes' 512Mi is the same
	}
	n, err := units.RAMInBytes(spelled)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a number with a unit (512Mi, 1G, 4GiB) or a number of MiB", s)
	}
	return uint64(n), nil
}

// showSize is a size for people: 512MiB, 1GiB, 1.5GiB.
func showSize(n uint64) string { return units.BytesSize(float64(n)) }

// sizeCell is a size in a table, "-" for none (a size left to defaults).
func sizeCell(n uint64) string {
	if n == 0 {
		return "-"
	}
	return showSize(n)
}

// sizeFlag is a flag holding a size in bytes (see parseSize).
type sizeFlag uint64

func (s *sizeFlag) String() string {
	if *s == 0 {
		return "0"
	}
	return showSize(uint64(*s))
}

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	*s = sizeFlag(n)
	return err
}

func (s *sizeFlag) Type() string { return "size" }
