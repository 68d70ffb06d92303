package guestchan

import (
	"bufio"
	"bytes"
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

// HandshakeTimeout bounds how long the host waits for the guest's ACK.
const HandshakeTimeout = 10 * time.Second

// bufferedConn reads through the reader that found the handshake, so bytes
// it buffered past the token are not lost.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// scanFor reads r until prefix followed by a line, and returns the line.
func scanFor(r *bufio.Reader, prefix []byte) (string, error) {
	window := make([]byte, 0, len(prefix))
	for {
		b, err := r.ReadByte()
		if err != nil {
			return "", err
		}
		window = append(window, b)
		if len(window) > len(prefix) {
			window = window[1:]
		}
		if bytes.Equal(window, prefix) {
			line, err := r.ReadString('\n')
			if err != nil {
				return "", err
			}
			return line[:len(line)-1], nil
		}
	}
}

// hostHandshake opens a connection from the host: SYNC until ACK.
func hostHandshake(conn net.Conn) (net.Conn, error) {
	nonceBytes := make([]byte, 8)
	if _, err := rand.Read(nonceBytes); err != nil {
		return nil, err
	}
	nonce := hex.EncodeToString(nonceBytes)
	r := bufio.NewReader(conn)
	deadline := time.Now().Add(HandshakeTimeout)
	for time.Now().Before(deadline) {
		if _, err := conn.Write(append(append([]byte{}, syncPrefix...), nonce+"\n"...)); err != nil {
			return nil, err
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		for {
			got, err := scanFor(r, ackPrefix)
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

// guestHandshake waits on the guest side for a SYNC and answers it.
func guestHandshake(rw io.ReadWriteCloser) (io.ReadWriteCloser, error) {
	r := bufio.NewReader(rw)
	nonce, err := scanFor(r, syncPrefix)
	if err != nil {
		return nil, err
	}
	if _, err := rw.Write(append(append([]byte{}, ackPrefix...), nonce+"\n"...)); err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Writer
		io.Closer
	}{r, rw, rw}, nil
}
