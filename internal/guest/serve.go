package guest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kibotos/kibotos/internal/guestchan"
)

// hostPollInterval is how often a port whose host end is not connected is
// looked at again.
const hostPollInterval = 50 * time.Millisecond

// Serve serves h on port until ctx ends. port is a character device (the
// virtio-serial port) or "unix:PATH", a unix socket Serve listens on,
// taking one connection at a time as the port does (for running outside a
// VM).
//
// A virtio-serial port reads as end-of-file while no one is connected to
// its host end (QEMU's socket), so Serve waits for the host before serving
// each connection rather than spinning through empty ones; a port that
// cannot be opened is tried again every second.
func Serve(ctx context.Context, port string, h http.Handler, onError func(error)) error {
	if onError == nil {
		onError = func(error) {}
	}
	if path, ok := strings.CutPrefix(port, "unix:"); ok {
		_ = os.Remove(path)
		ln, err := net.Listen("unix", path)
		if err != nil {
			return err
		}
		defer os.Remove(path)
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		defer stop()
		defer ln.Close()
		err = guestchan.Serve(ctx, func() (io.ReadWriteCloser, error) { return ln.Accept() }, h, onError)
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	for ctx.Err() == nil {
		err := guestchan.Serve(ctx, func() (io.ReadWriteCloser, error) { return openPort(ctx, port) }, h, onError)
		if err != nil && ctx.Err() == nil {
			onError(fmt.Errorf("port %s: %w; trying again", port, err))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return nil
}

// openPort opens a virtio-serial port once its host end is connected.
func openPort(ctx context.Context, path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	for {
		connected, err := PeerConnected(f)
		if err != nil {
			f.Close()
			return nil, err
		}
		if connected {
			return f, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(hostPollInterval):
		}
	}
}

// PeerConnected reports whether the other end of f is there: poll(2) shows
// POLLHUP on a virtio-serial port whose host end is not connected (and on a
// socket or pipe whose peer has gone).
func PeerConnected(f *os.File) (bool, error) {
	rc, err := f.SyscallConn() // not f.Fd(): that would make f blocking
	if err != nil {
		return false, err
	}
	var revents int16
	var pollErr error
	if err := rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, pollErr = unix.Poll(fds, 0)
			if pollErr != unix.EINTR {
				break
			}
		}
		revents = fds[0].Revents
	}); err != nil {
		return false, err
	}
	if pollErr != nil {
		return false, pollErr
	}
	if revents&(unix.POLLERR|unix.POLLNVAL) != 0 {
		return false, fmt.Errorf("poll %s: revents %#x", f.Name(), revents)
	}
	return revents&unix.POLLHUP == 0, nil
}
