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
func parseSize(s string) (uint64, error) { return parseSizeIn(s, mib) }

// parseSizeIn is parseSize with a bare number counted in units of bare
// bytes: each flag keeps the meaning its plain number had before units.
func parseSizeIn(s string, bare uint64) (uint64, error) {
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		if n > (1<<63-1)/bare {
			return 0, fmt.Errorf("size %q is too large", s)
		}
		return n * bare, nil
	}
	spelled := s
	if strings.HasSuffix(strings.ToLower(s), "i") {
		spelled += "B" // go-units reads 512MiB, and Kubernetes' 512Mi is the same
	}
	n, err := units.RAMInBytes(spelled)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a number with a unit (512Mi, 1G, 4GiB) or a number of %s", s, bareName(bare))
	}
	return uint64(n), nil
}

// bareName names the unit of a bare number: bytes, MiB.
func bareName(bare uint64) string {
	if bare == 1 {
		return "bytes"
	}
	return strings.TrimPrefix(showSize(bare), "1")
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

// sizeFlag is a flag holding a size in bytes (see parseSize: a bare
// number is MiB).
type sizeFlag uint64

func (s *sizeFlag) String() string { return flagSize(uint64(*s)) }

func (s *sizeFlag) Set(v string) error { return setSize((*uint64)(s), v, mib) }

func (s *sizeFlag) Type() string { return "size" }

// byteSizeFlag is a sizeFlag whose bare number is bytes, for flags that
// took a byte count before they took units.
type byteSizeFlag uint64

func (s *byteSizeFlag) String() string { return flagSize(uint64(*s)) }

func (s *byteSizeFlag) Set(v string) error { return setSize((*uint64)(s), v, 1) }

func (s *byteSizeFlag) Type() string { return "size" }

func flagSize(n uint64) string {
	if n == 0 {
		return "0"
	}
	return showSize(n)
}

func setSize(dst *uint64, v string, bare uint64) error {
	n, err := parseSizeIn(v, bare)
	*dst = n
	return err
}
