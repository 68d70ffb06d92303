package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kibotos/kibotos/internal/cli"
)

// Sizes as people write them: binary multiples whatever the spelling; a
// bare number is MiB, or bytes for a flag that took bytes before units.
func TestSizesTakeUnits(t *testing.T) {
	const unitless = "want a number with a unit (512Mi, 1G, 4GiB) or a number of "
	for _, tc := range []struct {
		in               string
		mib, bytes       uint64
		mibErr, bytesErr string
	}{
		{in: "512Mi", mib: 512 << 20, bytes: 512 << 20},
		{in: "16MiB", mib: 16 << 20, bytes: 16 << 20},
		{in: "1G", mib: 1 << 30, bytes: 1 << 30},
		{in: "4GiB", mib: 4 << 30, bytes: 4 << 30},
		{in: "1.5g", mib: 3 << 29, bytes: 3 << 29},
		{in: "2T", mib: 2 << 40, bytes: 2 << 40},
		{in: "2048", mib: 2048 << 20, bytes: 2048},
		{in: "0"},
		{in: "8796093022208", mibErr: "is too large", bytes: 1 << 43},
		{in: "", mibErr: unitless + "MiB", bytesErr: unitless + "bytes"},
		{in: "8Mx", mibErr: `size "8Mx": ` + unitless + "MiB", bytesErr: `size "8Mx": ` + unitless + "bytes"},
		{in: "-1", mibErr: unitless + "MiB", bytesErr: unitless + "bytes"},
		{in: "Mi", mibErr: unitless + "MiB", bytesErr: unitless + "bytes"},
	} {
		mib, err := cli.ParseSize(tc.in)
		checkSize(t, "ParseSize", tc.in, mib, err, tc.mib, tc.mibErr)
		bytes, err := cli.ParseByteSize(tc.in)
		checkSize(t, "ParseByteSize", tc.in, bytes, err, tc.bytes, tc.bytesErr)
	}
}

// checkSize: got is want, or err says wantErr when one is expected.
func checkSize(t *testing.T, fn, in string, got uint64, err error, want uint64, wantErr string) {
	t.Helper()
	if wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) || wantErr == "" && (err != nil || got != want) {
		t.Errorf("%s(%q) = %d, %v; want %d or an error with %q", fn, in, got, err, want, wantErr)
	}
}

// --max-message-bytes takes units on both commands that serve the API; a
// bare number is still bytes (the default shows as 8MiB).
func TestMaxMessageBytesTakesUnits(t *testing.T) {
	for _, command := range []string{"ctrl", "dev"} {
		for _, v := range []string{"16Mi", "16MiB", "8388608"} {
			var stdout, stderr strings.Builder
			// --help parses the flags and stops: nothing is started.
			if code := cli.Main(context.Background(), []string{command, "--max-message-bytes", v, "--help"}, &stdout, &stderr); code != 0 ||
				!strings.Contains(stdout.String(), "(default 8MiB)") {
				t.Errorf("kibotos %s --max-message-bytes %s: exit %d\n%s%s", command, v, code, stdout.String(), stderr.String())
			}
		}
		var stdout, stderr strings.Builder
		if code := cli.Main(context.Background(), []string{command, "--max-message-bytes", "8Mx"}, &stdout, &stderr); code == 0 ||
			!strings.Contains(stderr.String(), "--max-message-bytes") || !strings.Contains(stderr.String(), "number of bytes") {
			t.Errorf("kibotos %s --max-message-bytes 8Mx: exit %d\n%s", command, code, stderr.String())
		}
	}
}
