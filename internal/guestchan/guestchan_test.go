package guestchan_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/internal/guestchan"
)

type agent struct {
	guestv1connect.UnimplementedGuestAgentServiceHandler
}

func (agent) Ping(context.Context, *connect.Request[guestv1.PingRequest]) (*connect.Response[guestv1.PingResponse], error) {
	return connect.NewResponse(&guestv1.PingResponse{BootId: "boot-1"}), nil
}

// listen is a unix socket for the host end of the channel, closed when
// the test ends.
func listen(t *testing.T) (string, net.Listener) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return sock, ln
}

// The host end is a unix socket whose connections reach the guest's port one
// at a time, as QEMU's chardev does; a second host connection after the
// first one broke is served too.
func TestCallsCrossTheChannelAndSurviveAHostReconnect(t *testing.T) {
	sock, ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, h := guestv1connect.NewGuestAgentServiceHandler(agent{})
	go guestchan.Serve(ctx, func() (io.ReadWriteCloser, error) { return ln.Accept() }, h, nil)

	for round := 0; round < 2; round++ {
		hc := guestchan.Client(sock)
		client := guestv1connect.NewGuestAgentServiceClient(hc, guestchan.BaseURL)
		res, err := client.Ping(ctx, connect.NewRequest(&guestv1.PingRequest{}))
		if err != nil || res.Msg.GetBootId() != "boot-1" {
			t.Fatalf("round %d: %v %v", round, res, err)
		}
		hc.CloseIdleConnections()
	}
}

// Bytes an earlier host connection left in the port (SYNCs of a host that
// gave up, stray frame bytes) and SYNCs queued while the guest was not
// reading do not keep a new host from connecting.
func TestHandshakeSkipsLeftoversAndQueuedSyncs(t *testing.T) {
	sock, ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, h := guestv1connect.NewGuestAgentServiceHandler(agent{})
	leftover := []byte("\x00KIBOTOS-SYNC:stale\n\x00\x00\x04\x08garbage\x00KIBOTOS-SYNC:stale\n\x00KIBOTOS-SYNC:stale\n")
	go guestchan.Serve(ctx, func() (io.ReadWriteCloser, error) {
		conn, err := ln.Accept()
		if err != nil {
			return nil, err
		}
		// The guest reads the leftovers before whatever the host sends.
		return struct {
			io.Reader
			io.Writer
			io.Closer
		}{io.MultiReader(bytes.NewReader(leftover), conn), conn, conn}, nil
	}, h, nil)
	hc := guestchan.Client(sock)
	defer hc.CloseIdleConnections()
	client := guestv1connect.NewGuestAgentServiceClient(hc, guestchan.BaseURL)
	callCtx, callCancel := context.WithTimeout(ctx, 8*time.Second) // under the host's 10 s handshake limit
	defer callCancel()
	res, err := client.Ping(callCtx, connect.NewRequest(&guestv1.PingRequest{}))
	if err != nil || res.Msg.GetBootId() != "boot-1" {
		t.Fatalf("ping through leftovers: %v %v", res, err)
	}
}

// chardev is QEMU's host end of one virtio-serial port: host connections
// come and go on a unix socket, one at a time, while the guest's port is
// one stream for the VM's whole life. Bytes the guest writes while no host
// is connected are dropped.
type chardev struct {
	mu   sync.Mutex
	host net.Conn
}

// serve joins ln's connections, one after another, to port.
func (d *chardev) serve(ln net.Listener, port net.Conn) {
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := port.Read(buf)
			if err != nil {
				return
			}
			d.mu.Lock()
			if d.host != nil {
				_, _ = d.host.Write(buf[:n])
			}
			d.mu.Unlock()
		}
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		d.host = c
		d.mu.Unlock()
		_, _ = io.Copy(port, c)
		d.mu.Lock()
		d.host = nil
		d.mu.Unlock()
		_ = c.Close()
	}
}

// A host connection that ended in the middle of an HTTP/2 frame, before
// the guest saw it end, does not keep the next one out: the guest's
// HTTP/2 server would read the next host's handshake as the rest of that
// frame (up to its largest frame), and the node agent restarted meanwhile
// would wait for ever. (It did, once in CI: a StartExecution after an
// agent restart found the guest silent for three minutes.)
func TestAHostThatLeftInTheMiddleOfAFrameDoesNotKeepTheNextOut(t *testing.T) {
	sock, ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	guestEnd, portEnd := net.Pipe()
	t.Cleanup(func() { guestEnd.Close(); portEnd.Close() })
	go (&chardev{}).serve(ln, portEnd)
	_, h := guestv1connect.NewGuestAgentServiceHandler(agent{})
	port := struct {
		io.Reader
		io.Writer
		io.Closer
	}{guestEnd, guestEnd, io.NopCloser(nil)} // the guest reopens the same port
	go guestchan.Serve(ctx, func() (io.ReadWriteCloser, error) { return port, nil }, h, nil)

	// The first host: the handshake, HTTP/2's preface and SETTINGS, then
	// the header of a 16,000-byte DATA frame and 100 bytes of it.
	first, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(first, "\x00KIBOTOS-SYNC:first\n"); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, len("\x00KIBOTOS-ACK:first\n"))
	if _, err := io.ReadFull(first, ack); err != nil || string(ack) != "\x00KIBOTOS-ACK:first\n" {
		t.Fatalf("the first host's handshake: %q %v", ack, err)
	}
	frames := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	frames = append(frames, 0, 0, 0, 4, 0, 0, 0, 0, 0)         // SETTINGS, empty
	frames = append(frames, 0, 0x3e, 0x80, 0, 0, 0, 0, 0, 1)   // DATA, 16,000 bytes, stream 1
	frames = append(frames, bytes.Repeat([]byte{'x'}, 100)...) // of which 100
	if _, err := first.Write(frames); err != nil {
		t.Fatal(err)
	}
	_ = first.Close()

	hc := guestchan.Client(sock)
	defer hc.CloseIdleConnections()
	client := guestv1connect.NewGuestAgentServiceClient(hc, guestchan.BaseURL)
	callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second) // the old frame held 500 s of SYNCs
	defer callCancel()
	res, err := client.Ping(callCtx, connect.NewRequest(&guestv1.PingRequest{}))
	if err != nil || res.Msg.GetBootId() != "boot-1" {
		t.Fatalf("ping from the next host: %v %v", res, err)
	}
}

// The host asks the guest for no compression: a Connect handler
// compresses every answer for a caller that accepts gzip, and the guest's
// CPU is the Workspace's.
func TestTheHostAsksTheGuestForNoCompression(t *testing.T) {
	sock, ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, h := guestv1connect.NewGuestAgentServiceHandler(agent{})
	var mu sync.Mutex
	var asked []string
	seen := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Header.Get("Accept-Encoding"), r.Header.Get("Connect-Accept-Encoding"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	})
	go guestchan.Serve(ctx, func() (io.ReadWriteCloser, error) { return ln.Accept() }, seen, nil)
	hc := guestchan.Client(sock)
	defer hc.CloseIdleConnections()
	client := guestv1connect.NewGuestAgentServiceClient(hc, guestchan.BaseURL, connect.WithAcceptCompression("gzip", nil, nil))
	if _, err := client.Ping(ctx, connect.NewRequest(&guestv1.PingRequest{})); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range asked {
		if strings.Contains(a, "gzip") {
			t.Errorf("the guest was asked for %q", a)
		}
	}
}
