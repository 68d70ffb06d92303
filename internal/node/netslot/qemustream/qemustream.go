// Package qemustream reads and writes the guest's Ethernet frames on the
// socket of QEMU's `-netdev stream` backend, for the node's network slot.
//
// The framing, as QEMU 7.2 implements it (net/stream.c writes, the
// net_fill_rstate of net/net.c reads): each frame is preceded by its length
// as a 4-byte big-endian number, the prefix not counted, with no virtio-net
// header (the stream backend initialises its read state without one). QEMU
// buffers at most NET_BUFSIZE bytes of one frame and closes the connection
// on a longer one; MaxFrame is that limit, and both sides here keep to it.
package qemustream

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// MaxFrame is QEMU's NET_BUFSIZE (4096 + 65536), the longest frame either
// side of the stream may carry.
const MaxFrame = 4096 + 65536

// ErrFrameTooLong is returned for a frame, read or to be written, longer
// than MaxFrame: QEMU would close the connection on it, so the stream is
// no longer usable.
var ErrFrameTooLong = errors.New("frame longer than QEMU's NET_BUFSIZE")

// Reader reads frames from one stream. It is not safe for concurrent use:
// a slot reads its guest's frames on one goroutine.
type Reader struct {
	r   *bufio.Reader
	hdr [4]byte
}

// NewReader reads frames from r, buffered, so that a frame split over
// several reads or several frames in one read cost one system call each.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10)}
}

// ReadFrame reads the next frame into buf (grown when too small) and
// returns it. At a clean end of stream between frames it returns io.EOF;
// an end inside a frame is io.ErrUnexpectedEOF.
func (r *Reader) ReadFrame(buf []byte) ([]byte, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(r.hdr[:])
	if n > MaxFrame {
		return nil, fmt.Errorf("reading a %d-byte frame: %w", n, ErrFrameTooLong)
	}
	if uint32(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r.r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// Writer writes frames to one stream. It is safe for concurrent use: the
// slot's stack sends from several goroutines, and each frame must reach the
// stream whole, prefix and bytes together.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter writes frames to w unbuffered: each WriteFrame is on the wire
// when it returns (a gather write when w is a net.Conn).
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w}
}

// WriteFrame writes one frame with its length prefix.
func (w *Writer) WriteFrame(frame []byte) error {
	if len(frame) > MaxFrame {
		return fmt.Errorf("writing a %d-byte frame: %w", len(frame), ErrFrameTooLong)
	}
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(frame)))
	bufs := net.Buffers{hdr[:], frame}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := bufs.WriteTo(w.w)
	return err
}
