package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// virtioPortsDir is where sysfs lists virtio-serial ports, relative to the
// sysfs root.
const virtioPortsDir = "class/virtio-ports"

// ErrNoPort is returned when no virtio-serial port has the name sought.
var ErrNoPort = errors.New("no virtio-serial port of that name")

// FindPort returns the device path (devDir/vport0p1) of the virtio-serial
// port called name, looking in sysDir (/sys) for
// class/virtio-ports/*/name.
func FindPort(sysDir, devDir, name string) (string, error) {
	dir := filepath.Join(sysDir, virtioPortsDir)
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "name"))
		if err != nil {
			continue // a port without a name, or one going away
		}
		if strings.TrimSpace(string(b)) == name {
			return filepath.Join(devDir, e.Name()), nil
		}
	}
	return "", fmt.Errorf("%w: %q in %s", ErrNoPort, name, dir)
}

// WaitPort waits, polling, until the port called name is listed in sysfs
// and its device node exists, and returns the node's path.
func WaitPort(ctx context.Context, sysDir, devDir, name string, timeout time.Duration) (string, error) {
	var path string
	err := waitFor(ctx, timeout, 20*time.Millisecond, func() error {
		p, err := FindPort(sysDir, devDir, name)
		if err != nil {
			return err
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("port %q is listed but its device: %w", name, err)
		}
		path = p
		return nil
	})
	return path, err
}
