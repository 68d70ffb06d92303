package testnet_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/kibotos/kibotos/internal/testenv/testnet"
)

var host = netip.MustParseAddr("8.8.4.4")

// A host of the test internet, listening through Listen, is reached
// through its uplink. (Nothing here dials from the machine's own
// namespace: that could leave the machine.)
func TestAHostOfTheTestInternetIsReachedThroughItsUplink(t *testing.T) {
	inet := testnet.New(t, host) // New is Open with the test's skip and cleanup
	ln := inet.Listen(t, "tcp", netip.AddrPortFrom(host, 80).String())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "inside\n")
			_ = c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := inet.Uplink().DialTCP(ctx, netip.AddrPortFrom(host, 80))
	if err != nil {
		t.Fatalf("dial %s through the uplink: %v", host, err)
	}
	got, err := io.ReadAll(c)
	_ = c.Close()
	if err != nil || string(got) != "inside\n" {
		t.Errorf("from %s through the uplink: %q %v", host, got, err)
	}
}

// Run's sockets are the namespace's: a listener made in it is reached
// through the uplink.
func TestRunMakesSocketsInTheNamespace(t *testing.T) {
	inet := testnet.New(t, host)
	var ln net.Listener
	if err := inet.Run(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(host, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{})
	go func() {
		if c, err := ln.Accept(); err == nil {
			_ = c.Close()
			close(accepted)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := inet.Uplink().DialTCP(ctx, netip.MustParseAddrPort(ln.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	select {
	case <-accepted:
	case <-ctx.Done():
		t.Fatal("the listener Run made was not the one the uplink reached")
	}
}

// An IPv6 host can be listened on the moment New returns: its address is
// never left tentative (duplicate-address detection would refuse the bind
// for a moment, as it once did in CI). Many namespaces, to meet the window.
func TestAnIPv6HostCanBeListenedOnAtOnce(t *testing.T) {
	v6 := netip.MustParseAddr("fd00::1")
	for i := 0; i < 20; i++ {
		inet := testnet.New(t, host, v6)
		ln := inet.Listen(t, "tcp", netip.AddrPortFrom(v6, 80).String())
		_ = ln.Close()
	}
}
