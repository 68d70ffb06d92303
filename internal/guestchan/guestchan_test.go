package guestchan_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
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
