package platform

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// KernelMetapackage is the Debian package that follows the current kernel.
const KernelMetapackage = "linux-image-amd64"

// DownloadDebianKernel downloads into dir the kernel package that
// linux-image-amd64 currently depends on (e.g. linux-image-6.1.0-48-amd64)
// and returns the .deb's path. A package already in dir is not downloaded
// again (apt-get checks its hash), so dir works as a cache. It needs apt's
// package lists to be current (apt-get update).
func DownloadDebianKernel(ctx context.Context, dir string, progress Progress) (string, error) {
	pkg, err := kernelPackage(ctx)
	if err != nil {
		return "", err
	}
	fields, err := aptShow(ctx, pkg)
	if err != nil {
		return "", err
	}
	size, _ := strconv.ParseInt(fields["Size"], 10, 64)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Several processes (test binaries run in parallel) may share a cache.
	unlock, err := lockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	// apt-get download names the file <package>_<version>_<arch>.deb, with
	// an epoch's ':' escaped.
	deb := filepath.Join(dir, fmt.Sprintf("%s_%s_%s.deb", pkg,
		strings.ReplaceAll(fields["Version"], ":", "%3a"), fields["Architecture"]))
	stop := watchSize(deb, size, progress)
	err = aptGetDownload(ctx, dir, pkg+"="+fields["Version"])
	stop()
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(deb); err != nil || (size > 0 && st.Size() != size) {
		return "", fmt.Errorf("download %s: expected %s (%d bytes): %v", pkg, deb, size, err)
	}
	progress.report("download", size, size)
	return deb, nil
}

// kernelPackage resolves the metapackage to the real kernel package.
func kernelPackage(ctx context.Context) (string, error) {
	fields, err := aptShow(ctx, KernelMetapackage)
	if err != nil {
		return "", err
	}
	for _, dep := range strings.Split(fields["Depends"], ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(dep), " ")
		if strings.HasPrefix(name, "linux-image-") {
			return name, nil
		}
	}
	return "", fmt.Errorf("%s depends on no linux-image-<version> package (Depends: %q)", KernelMetapackage, fields["Depends"])
}

// aptShow returns the control fields of a package's candidate version.
func aptShow(ctx context.Context, pkg string) (map[string]string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "show", "--no-all-versions", pkg).Output()
	if err != nil {
		return nil, fmt.Errorf("apt-cache show %s: %w%s", pkg, err, stderrOf(err))
	}
	fields := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20) // Description lines can be long
	for sc.Scan() {
		// Continuation lines start with a space; no field we read has them.
		if k, v, ok := strings.Cut(sc.Text(), ": "); ok && !strings.HasPrefix(k, " ") {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if fields["Version"] == "" {
		return nil, fmt.Errorf("apt-cache show %s: no candidate version (run apt-get update?)", pkg)
	}
	return fields, nil
}

func aptGetDownload(ctx context.Context, dir, pkgVersion string) error {
	// As root, apt drops to the _apt user to download, which cannot write
	// to an arbitrary dir: stay root.
	cmd := exec.CommandContext(ctx, "apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", pkgVersion)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s: %w: %s (are apt's lists current? apt-get update)",
			pkgVersion, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// watchSize reports the growth of a file being downloaded until stop.
func watchSize(file string, total int64, progress Progress) (stop func()) {
	if progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if st, err := os.Stat(file); err == nil {
					progress("download", st.Size(), total)
				}
			}
		}
	}()
	// Waiting for the goroutine means no report comes after stop returns.
	return func() { close(done); <-finished }
}

// lockDir takes an exclusive lock on dir/.lock until unlock.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
