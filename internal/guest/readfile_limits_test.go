package guest_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/guest"
)

// ReadFile's numbers are uint64 on the wire; one the agent cannot seek to
// or count to is the caller's mistake, named by its field, never an empty
// success or an internal error.
func TestReadFileOutOfRangeNumbers(t *testing.T) {
	c, root := fileAgent(t)
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		req   *ctrlv1.ReadFileRequest
	}{
		{"length", &ctrlv1.ReadFileRequest{Path: "/f", Length: math.MaxInt64 + 1}},
		{"length", &ctrlv1.ReadFileRequest{Path: "/f", Length: math.MaxUint64}},
		{"offset", &ctrlv1.ReadFileRequest{Path: "/f", Offset: math.MaxInt64 + 1}},
		{"offset", &ctrlv1.ReadFileRequest{Path: "/f", Offset: math.MaxUint64}},
	} {
		_, data, err := readFile(c, tc.req)
		wantErr(t, tc.field, err, connect.CodeInvalidArgument, tc.field)
		if len(data) != 0 {
			t.Errorf("%s: %d bytes sent with the error", tc.field, len(data))
		}
	}
	// The largest valid length still reads the whole file.
	if _, data, err := readFile(c, &ctrlv1.ReadFileRequest{Path: "/f", Length: math.MaxInt64}); err != nil || string(data) != "hello" {
		t.Errorf("length MaxInt64: %q, %v; want hello", data, err)
	}
}

// An I/O error is not the agent's bug: EIO is data_loss, naming the path.
// /proc/self/mem at offset 0 (never mapped) answers EIO on Linux.
func TestReadFileIOErrorIsDataLoss(t *testing.T) {
	c := serve(t, &guest.Agent{Root: "/"})
	_, _, err := readFile(c, &ctrlv1.ReadFileRequest{Path: "/proc/self/mem", Length: 4096})
	wantErr(t, "read /proc/self/mem", err, connect.CodeDataLoss, "path")
}

// A ReadFile without length of something that never ends (/dev/zero) ends
// with out_of_range once it is 64 MiB (guest.ReadToEndSlack) past the size the file
// had when opened, instead of streaming for ever.
func TestReadFileWithoutLengthIsCapped(t *testing.T) {
	c := serve(t, &guest.Agent{Root: "/"})
	_, data, err := readFile(c, &ctrlv1.ReadFileRequest{Path: "/dev/zero"})
	wantErr(t, "read /dev/zero", err, connect.CodeOutOfRange, "length")
	if len(data) != 64<<20 {
		t.Errorf("sent %d bytes before the error, want exactly the cap %d", len(data), 64<<20)
	}
	// With a length, the same device reads exactly that much.
	if _, data, err := readFile(c, &ctrlv1.ReadFileRequest{Path: "/dev/zero", Length: 1000}); err != nil || len(data) != 1000 {
		t.Errorf("length 1000 of /dev/zero: %d bytes, %v", len(data), err)
	}
}

// The agent reads no message larger than guest.MaxMessageBytes: a larger
// one is resource_exhausted, and the file is not written.
func TestOversizedMessageIsResourceExhausted(t *testing.T) {
	c, root := fileAgent(t)
	_, err := writeFile(c, &ctrlv1.WriteFileHeader{Path: "/big"}, make([]byte, guest.MaxMessageBytes+1))
	wantErr(t, "a message over the limit", err, connect.CodeResourceExhausted, "")
	if _, serr := os.Stat(filepath.Join(root, "big")); serr == nil {
		t.Error("the file was written")
	}
}
