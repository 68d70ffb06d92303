package guestchan

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// A virtio-serial port is one byte stream for the VM's whole life, while the
// host end is a socket the node connects to again after a restart. Bytes of
// an old connection can still be in flight when a new one starts, so each
// connection opens with a handshake both ends can find in any amount of
// leftover bytes: the host sends SYNC with a fresh nonce (again every
// second until answered), the guest answers ACK with the same nonce, and
// HTTP/2 starts right after. Everything before is discarded.
var (
	syncPrefix = []byte("\x00KIBOTOS-SYNC:")
	ackPrefix  = []byte("\x00KIBOTOS-ACK:")
)

// MaxFrameSize is the largest HTTP/2 frame the guest reads (the least
// HTTP/2 allows). The host opens every connection with more zero bytes
// than that and a frame header: a guest whose HTTP/2 server is still in
// the middle of a frame of the previous host connection (the port's
// stream outlives it, and the guest may not have seen it end) reads them
// as the rest of that frame and then as an invalid one, and so ends that
// connection at once and finds the handshake, instead of reading the new
// host's SYNCs as frame bytes for minutes.
const MaxFrameSize = 16 << 10

// flush is what the host sends before its first SYNC.
var flush = make([]byte, MaxFrameSize+9)

// HandshakeTimeout bounds how long the host waits for the guest's ACK. A
// guest under TCG on a loaded host can take well over 10 s to get to it
// (seen in tests with the load at 13 on two cores); a dead VM needs no
// timeout (its socket refuses at once), so the bound is generous.
const HandshakeTimeout = 30 * time.Second

// bufferedConn reads through the reader that found the handshake, so bytes
// it buffered past the token are not lost.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// ackScanner finds ACK lines in what the host reads. The host reads with a
// deadline, so a read may time out in the middle of an ACK: what the
// scanner matched of the prefix and read of the line survives that, and
// the next call finds the ACK whole. (The guest answers a nonce once; an
// ACK lost to a timeout would leave the host waiting out
// HandshakeTimeout.)
type ackScanner struct {
	window []byte // the last bytes read, while looking for ackPrefix
	line   []byte // what followed a whole ackPrefix, until '\n'
	inLine bool
}

// maxNonce bounds an ACK's line: longer, it answers no nonce of this host
// (whose are 16 hex digits), and the guest cannot make the host hold an
// endless line in memory.
const maxNonce = 64

// next reads r up to ackPrefix followed by a line, and returns the line.
func (s *ackScanner) next(r *bufio.Reader) (string, error) {
	for {
		b, err := r.ReadByte()
		if err != nil {
			return "", err
		}
		if s.inLine {
			switch {
			case b == '\n':
				line := string(s.line)
				s.line, s.inLine = s.line[:0], false
				return line, nil
			case len(s.line) == maxNonce:
				s.line, s.inLine = s.line[:0], false
			default:
				s.line = append(s.line, b)
			}
			continue
		}
		s.window = append(s.window, b)
		if len(s.window) > len(ackPrefix) {
			s.window = s.window[1:]
		}
		if bytes.Equal(s.window, ackPrefix) {
			s.window, s.inLine = s.window[:0], true
		}
	}
}

// hostHandshake opens a connection from the host: the flush, then SYNC
// until ACK, or until ctx ends.
func hostHandshake(ctx context.Context, conn net.Conn) (net.Conn, error) {
	nonceBytes := make([]byte, 8)
	if _, err := rand.Read(nonceBytes); err != nil {
		return nil, err
	}
	nonce := hex.EncodeToString(nonceBytes)
	if _, err := conn.Write(flush); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	var acks ackScanner
	deadline := time.Now().Add(HandshakeTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, err := conn.Write(append(append([]byte{}, syncPrefix...), nonce+"\n"...)); err != nil {
			return nil, err
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		for {
			got, err := acks.next(r)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break // send SYNC again: the guest may have lost the first one
			}
			if err != nil {
				return nil, err
			}
			if got == nonce {
				_ = conn.SetReadDeadline(time.Time{})
				return bufferedConn{conn, r}, nil
			}
		}
	}
	return nil, fmt.Errorf("the guest agent did not answer the channel handshake within %s", HandshakeTimeout)
}

// http2Preface is what an HTTP/2 client sends first.
var http2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// guestHandshake waits on the guest side for a SYNC and answers it, then
// reads on to the host's HTTP/2 preface, which the host sends only after it
// saw its ACK. The host resends SYNC until then, so more SYNCs can be queued
// (a guest that opened its port late finds several): a repeat of the nonce
// answered is skipped, a SYNC with a new nonce (a host that reconnected, or
// the answered SYNC was a stale one of an earlier connection) is answered
// too.
func guestHandshake(rw io.ReadWriteCloser) (io.ReadWriteCloser, error) {
	r := bufio.NewReader(rw)
	answered := ""
	for {
		isPreface, nonce, err := scanSyncOrPreface(r)
		if err != nil {
			return nil, err
		}
		if isPreface {
			if answered == "" {
				continue // a preface before any SYNC is a leftover: keep looking
			}
			break
		}
		if nonce == answered {
			continue
		}
		if _, err := rw.Write(append(append([]byte{}, ackPrefix...), nonce+"\n"...)); err != nil {
			return nil, err
		}
		answered = nonce
	}
	return struct {
		io.Reader
		io.Writer
		io.Closer
	}{io.MultiReader(bytes.NewReader(http2Preface), r), rw, rw}, nil
}

// scanSyncOrPreface reads r up to the next SYNC (returning its nonce) or the
// HTTP/2 preface, whichever comes first.
func scanSyncOrPreface(r *bufio.Reader) (isPreface bool, nonce string, err error) {
	size := max(len(syncPrefix), len(http2Preface))
	window := make([]byte, 0, size)
	for {
		b, err := r.ReadByte()
		if err != nil {
			return false, "", err
		}
		window = append(window, b)
		if len(window) > size {
			window = window[1:]
		}
		switch {
		case bytes.HasSuffix(window, http2Preface):
			return true, "", nil
		case bytes.HasSuffix(window, syncPrefix):
			line, err := r.ReadString('\n')
			if err != nil {
				return false, "", err
			}
			return false, line[:len(line)-1], nil
		}
	}
}
