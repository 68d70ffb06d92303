package guest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kibotos/kibotos/internal/guest"
	"github.com/kibotos/kibotos/internal/guestchan"
)

// fakeSys makes a /sys and a /dev with virtio-serial ports named as given
// (an empty name: a port without a name file).
func fakeSys(t *testing.T, ports map[string]string) (sys, dev string) {
	t.Helper()
	root := t.TempDir()
	sys, dev = filepath.Join(root, "sys"), filepath.Join(root, "dev")
	mustMkdir(t, dev)
	mustMkdir(t, filepath.Join(sys, "class/virtio-ports"))
	for port, name := range ports {
		mustMkdir(t, filepath.Join(sys, "class/virtio-ports", port))
		if name != "" {
			mustWrite(t, filepath.Join(sys, "class/virtio-ports", port, "name"), name+"\n")
		}
		mustWrite(t, filepath.Join(dev, port), "")
	}
	return sys, dev
}

func TestFindPort(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ports map[string]string
		want  string // empty: ErrNoPort
	}{
		{"the agent's among others", map[string]string{"vport0p0": "org.qemu.guest_agent.0", "vport0p1": guestchan.PortName, "vport1p1": ""}, "vport0p1"},
		{"only the agent's", map[string]string{"vport2p3": guestchan.PortName}, "vport2p3"},
		{"another port", map[string]string{"vport0p0": "org.qemu.guest_agent.0"}, ""},
		{"a prefix is not the name", map[string]string{"vport0p0": guestchan.PortName + ".1"}, ""},
		{"no ports", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys, dev := fakeSys(t, tc.ports)
			got, err := guest.FindPort(sys, dev, guestchan.PortName)
			if tc.want == "" {
				if !errors.Is(err, guest.ErrNoPort) {
					t.Fatalf("got %q, %v; want ErrNoPort", got, err)
				}
				return
			}
			if err != nil || got != filepath.Join(dev, tc.want) {
				t.Fatalf("got %q, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestFindPortWithoutVirtioPorts(t *testing.T) {
	if _, err := guest.FindPort(t.TempDir(), "/dev", guestchan.PortName); !errors.Is(err, guest.ErrNoPort) {
		t.Fatalf("want ErrNoPort, got %v", err)
	}
}

func TestWaitPortWaitsForTheDriverAndTheNode(t *testing.T) {
	sys, dev := fakeSys(t, nil)
	go func() {
		time.Sleep(50 * time.Millisecond)
		mustWrite(t, filepath.Join(sys, "class/virtio-ports/vport0p1/name"), guestchan.PortName)
		time.Sleep(50 * time.Millisecond)
		mustWrite(t, filepath.Join(dev, "vport0p1"), "")
	}()
	got, err := guest.WaitPort(context.Background(), sys, dev, guestchan.PortName, 5*time.Second)
	if err != nil || got != filepath.Join(dev, "vport0p1") {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestWaitPortGivesUp(t *testing.T) {
	sys, dev := fakeSys(t, map[string]string{"vport0p0": "other"})
	start := time.Now()
	_, err := guest.WaitPort(context.Background(), sys, dev, guestchan.PortName, 100*time.Millisecond)
	if !errors.Is(err, guest.ErrNoPort) {
		t.Fatalf("want ErrNoPort, got %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("gave up after %s", d)
	}
}

// A virtio-serial port shows POLLHUP while its host end is not connected,
// as a socket does once its peer has gone.
func TestPeerConnected(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, peer := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "peer")
	defer ours.Close()
	if ok, err := guest.PeerConnected(ours); !ok || err != nil {
		t.Fatalf("with a peer: %t, %v", ok, err)
	}
	peer.Close()
	if ok, err := guest.PeerConnected(ours); ok || err != nil {
		t.Fatalf("without a peer: %t, %v", ok, err)
	}
}
