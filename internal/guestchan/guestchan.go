// Package guestchan carries the guest agent's API (kibotos.guest.v1, Connect)
// over one byte stream between the node and the guest: a virtio-serial port
// in the guest, a unix socket on the host (QEMU's chardev). vsock is not
// available on every host (vhost-vsock is missing on these machines), and a
// serial port is.
//
// The stream runs cleartext HTTP/2, so one port carries any number of
// concurrent calls and streams. Each host connection opens with a handshake
// (handshake.go) that both ends find in any leftover bytes of an earlier
// connection, so a restarted node agent reconnects cleanly.
package guestchan

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"golang.org/x/net/http2"
)

// PortName is the virtio-serial port name the guest agent serves on.
const PortName = "kibotos.agent"

// BaseURL is the URL clients of the channel use; the host part is ignored.
const BaseURL = "http://guest"

// InstanceHeader names, on a call to a node's data endpoint, the execution
// whose guest agent the node relays the call to.
const InstanceHeader = "Kibotos-Instance"

// rwConn makes a character device (or any stream) look like a net.Conn for
// HTTP/2, which needs no deadlines from it.
type rwConn struct {
	io.ReadWriteCloser
}

func (rwConn) LocalAddr() net.Addr              { return portAddr{} }
func (rwConn) RemoteAddr() net.Addr             { return portAddr{} }
func (rwConn) SetDeadline(time.Time) error      { return nil }
func (rwConn) SetReadDeadline(time.Time) error  { return nil }
func (rwConn) SetWriteDeadline(time.Time) error { return nil }

type portAddr struct{}

func (portAddr) Network() string { return "virtio-serial" }
func (portAddr) String() string  { return PortName }

// ServePort serves h on the port device at path until ctx ends.
func ServePort(ctx context.Context, path string, h http.Handler, onError func(error)) error {
	return Serve(ctx, func() (io.ReadWriteCloser, error) { return os.OpenFile(path, os.O_RDWR, 0) }, h, onError)
}

// Serve serves h on the streams open returns until ctx ends: one HTTP/2
// connection at a time, a new one whenever the previous breaks.
func Serve(ctx context.Context, open func() (io.ReadWriteCloser, error), h http.Handler, onError func(error)) error {
	srv := &http2.Server{MaxReadFrameSize: MaxFrameSize}
	for ctx.Err() == nil {
		f, err := open()
		if err != nil {
			return err
		}
		conn, err := guestHandshake(f)
		if err != nil {
			f.Close()
			if ctx.Err() == nil && onError != nil {
				onError(fmt.Errorf("guest channel handshake: %w", err))
			}
			continue
		}
		done := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
				f.Close()
			case <-done:
			}
		}()
		srv.ServeConn(rwConn{conn}, &http2.ServeConnOpts{Context: ctx, Handler: h})
		close(done)
		f.Close()
		if ctx.Err() == nil && onError != nil {
			onError(errors.New("guest channel connection ended; serving the next one"))
		}
	}
	return nil
}

// Client is an HTTP client whose every connection is a new connection to the
// host end of the channel (QEMU's unix socket at socketPath).
func Client(socketPath string) *http.Client {
	return &http.Client{Transport: &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, _, _ string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", socketPath)
			if err != nil {
				return nil, err
			}
			hc, err := hostHandshake(ctx, conn)
			if err != nil {
				conn.Close()
				return nil, err
			}
			return hc, nil
		},
		ReadIdleTimeout: 10 * time.Second,
		PingTimeout:     5 * time.Second,
		// The transport would ask for gzip on every call that names no
		// encoding (the node's own, and those it relays for ctrl), and the
		// guest agent's Connect handler would then compress each answer on
		// the Workspace's CPU, for this host to inflate at once.
		DisableCompression: true,
	}}
}
