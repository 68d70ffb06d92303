package userstack_test

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/kibotos/kibotos/internal/testenv/testnet"
)

// The host uplink, made in a test internet: it connects and pings the
// test's hosts there, and anything else has no route (the namespace leads
// nowhere else), failing at once.
func TestHostUplinkInANamespace(t *testing.T) {
	host := netip.MustParseAddr("8.8.4.4")
	inet := testnet.New(t, host)
	ln := inet.Listen(t, "tcp", "8.8.4.4:80")
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = c.Write([]byte("hello"))
			_ = c.Close()
		}
	}()
	up := inet.Uplink()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := up.DialTCP(ctx, netip.MustParseAddrPort("8.8.4.4:80"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(c); err != nil || string(b) != "hello" {
		t.Errorf("read from the test host: %q %v", b, err)
	}
	_ = c.Close()
	if err := up.Echo(ctx, host, []byte("kibotos")); err != nil {
		t.Errorf("echo to the test host: %v", err)
	}
	if _, err := up.DialTCP(ctx, netip.MustParseAddrPort("1.1.1.1:80")); !errors.Is(err, syscall.ENETUNREACH) {
		t.Errorf("dial of an address outside the test internet: %v, want network unreachable", err)
	}
}
