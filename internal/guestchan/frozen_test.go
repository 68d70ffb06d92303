package guestchan_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/gen/kibotos/guest/v1/guestv1connect"
	"github.com/kibotos/kibotos/internal/guestchan"
)

// freezable is the guest's end of one channel connection that can stop
// dead, as a frozen VM's port does: after freeze, nothing it is sent is
// read and nothing comes back (writes are dropped, reads wait for the
// close).
type freezable struct {
	net.Conn
	freezeOnce, closeOnce sync.Once
	frozen, closed        chan struct{}
}

func newFreezable(c net.Conn) *freezable {
	return &freezable{Conn: c, frozen: make(chan struct{}), closed: make(chan struct{})}
}

func (f *freezable) freeze() { f.freezeOnce.Do(func() { close(f.frozen) }) }

func (f *freezable) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return f.Conn.Close()
}

func (f *freezable) Read(p []byte) (int, error) {
	select {
	case <-f.frozen:
		<-f.closed
		return 0, io.EOF
	default:
	}
	return f.Conn.Read(p)
}

func (f *freezable) Write(p []byte) (int, error) {
	select {
	case <-f.frozen:
		return len(p), nil
	default:
		return f.Conn.Write(p)
	}
}

// A guest that stops answering behind a live host fails the calls made
// to it as unavailable, by the channel's HTTP/2 ping (10 s without a frame,
// then 5 s without its answer), instead of leaving them waiting for the
// caller's deadline (dataplane.md FS9, "an unresponsive guest ... is
// unavailable").
func TestAFrozenGuestFailsItsCallsAsUnavailable(t *testing.T) {
	t.Parallel() // it waits about 15 s
	sock, ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conns := make(chan *freezable, 1)
	_, h := guestv1connect.NewGuestAgentServiceHandler(agent{})
	go guestchan.Serve(ctx, func() (io.ReadWriteCloser, error) {
		c, err := ln.Accept()
		if err != nil {
			return nil, err
		}
		f := newFreezable(c)
		conns <- f
		return f, nil
	}, h, nil)

	client := guestv1connect.NewGuestAgentServiceClient(guestchan.Client(sock), guestchan.BaseURL)
	if _, err := client.Ping(ctx, connect.NewRequest(&guestv1.PingRequest{})); err != nil {
		t.Fatal(err)
	}
	(<-conns).freeze()
	guard, stop := context.WithTimeout(ctx, 2*time.Minute) // a hang guard, far above the ping's 15 s
	defer stop()
	_, err := client.Ping(guard, connect.NewRequest(&guestv1.PingRequest{}))
	if guard.Err() != nil || connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("a call to a frozen guest: %v (guard %v), want unavailable before the guard", err, guard.Err())
	}
}
