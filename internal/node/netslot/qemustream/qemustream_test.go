package qemustream_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/kibotos/kibotos/internal/node/netslot/qemustream"
)

// socketpair is a connected pair of unix stream sockets, what QEMU's
// `-netdev stream,addr.type=fd` or a unix socket gives the slot.
func socketpair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int, name string) net.Conn {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	return conn(fds[0], "slot"), conn(fds[1], "guest")
}

func frameOf(n int, b byte) []byte {
	return bytes.Repeat([]byte{b}, n)
}

// TestWireLayout checks the bytes against the framing QEMU reads: a 4-byte
// big-endian length, then the frame, nothing else.
func TestWireLayout(t *testing.T) {
	var buf bytes.Buffer
	w := qemustream.NewWriter(&buf)
	frame := frameOf(1514, 0xab)
	if err := w.WriteFrame(frame); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFrame(nil); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{0x00, 0x00, 0x05, 0xea}, frame...), 0, 0, 0, 0)
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("wrote % x…; want the 4-byte big-endian length 00 00 05 ea before the frame", buf.Bytes()[:8])
	}
	// And a stream written by hand in that layout reads back.
	r := qemustream.NewReader(bytes.NewReader([]byte{0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 1, 0x00}))
	got, err := r.ReadFrame(nil)
	if err != nil || string(got) != "abc" {
		t.Fatalf("ReadFrame = %q, %v; want abc", got, err)
	}
	if _, err := r.ReadFrame(nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a frame cut short: %v; want io.ErrUnexpectedEOF", err)
	}
}

// TestRoundTripOverSocketpair sends frames of every boundary size from
// several goroutines over a real socket and reads each back whole.
func TestRoundTripOverSocketpair(t *testing.T) {
	slot, guest := socketpair(t)
	sizes := []int{0, 1, 14, 60, 1514, 9000, 65535, qemustream.MaxFrame}
	w := qemustream.NewWriter(guest)
	var wg sync.WaitGroup
	for i, n := range sizes {
		wg.Go(func() {
			if err := w.WriteFrame(frameOf(n, byte(i))); err != nil {
				t.Errorf("WriteFrame(%d bytes): %v", n, err)
			}
		})
	}
	r := qemustream.NewReader(slot)
	seen := map[int]bool{}
	var buf []byte
	for range sizes {
		f, err := r.ReadFrame(buf)
		if err != nil {
			t.Fatal(err)
		}
		i := -1
		for j, n := range sizes {
			if n == len(f) {
				i = j
			}
		}
		if i < 0 || seen[i] || !bytes.Equal(f, frameOf(len(f), byte(i))) {
			t.Fatalf("read a %d-byte frame that no writer sent whole", len(f))
		}
		seen[i] = true
		buf = f
	}
	wg.Wait()
	guest.Close()
	if _, err := r.ReadFrame(buf); err != io.EOF {
		t.Fatalf("after the last frame: %v; want io.EOF", err)
	}
}

func TestTooLong(t *testing.T) {
	w := qemustream.NewWriter(io.Discard)
	if err := w.WriteFrame(make([]byte, qemustream.MaxFrame+1)); !errors.Is(err, qemustream.ErrFrameTooLong) {
		t.Fatalf("WriteFrame(MaxFrame+1): %v; want ErrFrameTooLong", err)
	}
	r := qemustream.NewReader(bytes.NewReader([]byte{0, 1, 0x10, 0x01}))
	if _, err := r.ReadFrame(nil); !errors.Is(err, qemustream.ErrFrameTooLong) {
		t.Fatalf("reading a 69633-byte prefix: %v; want ErrFrameTooLong", err)
	}
}

// FuzzReadFrame: on any byte stream the reader never returns a frame
// longer than MaxFrame, and writing back what it read reproduces the
// stream up to where it stopped.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 5, 'a'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 1, 0x10, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := qemustream.NewReader(bytes.NewReader(in))
		var out bytes.Buffer
		w := qemustream.NewWriter(&out)
		for {
			fr, err := r.ReadFrame(nil)
			if err != nil {
				break
			}
			if len(fr) > qemustream.MaxFrame {
				t.Fatalf("read a %d-byte frame", len(fr))
			}
			if err := w.WriteFrame(fr); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.HasPrefix(in, out.Bytes()) {
			t.Fatalf("re-encoding the frames read does not reproduce the stream")
		}
	})
}
