package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/template"
)

// CacheDir is where tests keep downloads between runs: $KIBOTOS_CACHE, or
// the user's cache directory.
func CacheDir(t testing.TB) string {
	t.Helper()
	dir, err := cacheDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func cacheDir() (string, error) {
	dir := os.Getenv("KIBOTOS_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(base, "kibotos")
	}
	return dir, os.MkdirAll(dir, 0o755)
}

// VMArtifacts are what a test VM boots.
type VMArtifacts struct {
	Platform *platform.Manifest
	Dir      string // holds the platform's files
	Template *template.Image
}

// Kernel and Initrd are the paths QEMU needs.
func (a *VMArtifacts) Kernel() string { return filepath.Join(a.Dir, a.Platform.Vmlinux) }
func (a *VMArtifacts) Initrd() string { return filepath.Join(a.Dir, a.Platform.Initramfs) }

var (
	vmOnce sync.Once
	vmArt  *VMArtifacts
	vmErr  error
)

// BuildVMArtifacts builds, once per test binary, a platform from Debian's
// kernel package and this tree's kibotos-guest, and a busybox template.
// Nothing is faked: the kernel is Debian's, the agent the real one. The
// result is kept in the cache directory under a key of what it is built
// from (the guest binary, the kernel package, busybox), so the test
// binaries of one tree share one copy and leave nothing behind them; the
// kept copies of older trees are pruned (keptArtifacts).
func BuildVMArtifacts(t testing.TB) *VMArtifacts {
	t.Helper()
	art, err := vmArtifacts(CacheDir(t))
	if err != nil {
		t.Fatal(err)
	}
	return art
}

// vmArtifacts builds the artifacts once per test binary.
func vmArtifacts(cache string) (*VMArtifacts, error) {
	vmOnce.Do(func() { vmArt, vmErr = buildVMArtifacts(cache) })
	return vmArt, vmErr
}

// artifactsFile, in a kept copy, describes it; it is written last, so a
// copy without it is incomplete.
const artifactsFile = "artifacts.json"

// keptArtifacts is how many kept copies the cache holds at most; older
// ones, unused for an hour, are removed when a new one is kept.
const keptArtifacts = 3

type keptFile struct {
	Platform *platform.Manifest `json:"platform"`
	Template *template.Image    `json:"template"` // its path relative to the copy
}

func buildVMArtifacts(cache string) (*VMArtifacts, error) {
	ctx := context.Background()
	base := filepath.Join(cache, "vm-artifacts")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(base, ".build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work) // gone already once kept
	guest := filepath.Join(work, "kibotos-guest")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", guest, "github.com/kibotos/kibotos/cmd/kibotos-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, wrap("build kibotos-guest", err, out)
	}
	deb, err := platform.DownloadDebianKernel(ctx, cache, nil)
	if err != nil {
		return nil, err
	}
	key, err := artifactsKey(guest, deb, Busybox())
	if err != nil {
		return nil, err
	}
	kept := filepath.Join(base, key)
	if art, err := loadArtifacts(kept); err == nil {
		now := time.Now()
		_ = os.Chtimes(kept, now, now) // in use: not pruned
		return art, nil
	}
	dir := filepath.Join(work, "platform")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	m, err := platform.Build(ctx, platform.BuildInput{KernelDeb: deb, GuestBinary: guest}, dir)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(work, "root")
	if err := template.BusyboxDir(Busybox(), root); err != nil {
		return nil, err
	}
	img, err := template.FromDir(ctx, root, filepath.Join(work, "root.img"))
	if err != nil {
		return nil, err
	}
	if err := keepArtifacts(work, kept, m, img); err != nil {
		return nil, err
	}
	pruneArtifacts(base, kept)
	return loadArtifacts(kept)
}

// artifactsKey names what the artifacts are built from: the contents of
// the guest binary and of busybox, and the kernel package's name.
func artifactsKey(guest, deb, busybox string) (string, error) {
	h := sha256.New()
	for _, p := range []string{guest, busybox} {
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	h.Write([]byte(filepath.Base(deb)))
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// keepArtifacts makes work the kept copy at kept: its description written
// last, then one rename. Another test binary that kept the same copy
// first wins; this one's is removed with work.
func keepArtifacts(work, kept string, m *platform.Manifest, img *template.Image) error {
	rel, err := filepath.Rel(work, img.Path)
	if err != nil {
		return err
	}
	b, err := json.Marshal(keptFile{Platform: m, Template: &template.Image{Path: rel, Digest: img.Digest, Size: img.Size}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, artifactsFile), b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(work, kept); err != nil {
		if _, lerr := loadArtifacts(kept); lerr == nil {
			return nil
		}
		return err
	}
	return nil
}

// loadArtifacts reads the kept copy at dir.
func loadArtifacts(dir string) (*VMArtifacts, error) {
	b, err := os.ReadFile(filepath.Join(dir, artifactsFile))
	if err != nil {
		return nil, err
	}
	var k keptFile
	if err := json.Unmarshal(b, &k); err != nil {
		return nil, err
	}
	if k.Platform == nil || k.Template == nil {
		return nil, fmt.Errorf("%s: incomplete", filepath.Join(dir, artifactsFile))
	}
	img := *k.Template
	img.Path = filepath.Join(dir, img.Path)
	return &VMArtifacts{Platform: k.Platform, Dir: filepath.Join(dir, "platform"), Template: &img}, nil
}

// pruneArtifacts removes the kept copies in base beyond the newest
// keptArtifacts, and builds left unfinished, that were not used for an
// hour; kept, just made, stays.
func pruneArtifacts(base, kept string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	type copyAt struct {
		path string
		at   time.Time
	}
	var copies []copyAt
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !e.IsDir() {
			continue
		}
		copies = append(copies, copyAt{filepath.Join(base, e.Name()), fi.ModTime()})
	}
	slices.SortFunc(copies, func(a, b copyAt) int { return b.at.Compare(a.at) })
	for i, c := range copies {
		if c.path != kept && (i >= keptArtifacts || strings.HasPrefix(filepath.Base(c.path), ".")) && time.Since(c.at) > time.Hour {
			_ = os.RemoveAll(c.path)
		}
	}
}

// Busybox is Debian's static busybox (package busybox-static): the test
// template's one program.
func Busybox() string {
	if p, err := exec.LookPath("busybox"); err == nil {
		return p
	}
	return "/bin/busybox"
}

type buildError struct {
	what string
	err  error
	out  string
}

func (e *buildError) Error() string { return e.what + ": " + e.err.Error() + ": " + e.out }

func wrap(what string, err error, out []byte) error { return &buildError{what, err, string(out)} }

// PowerOff kills every VM the node ran from its state directory, as a host
// powering off would. Stop its agent first.
func (n *Node) PowerOff() { _ = PowerOffVMs(n.StateDir) }

// PowerOffVMs kills every VM a node agent ran from stateDir, as its host
// powering off would: a VM outlives its agent by design, so stopping or
// killing the agent leaves it running. It returns how many it killed.
func PowerOffVMs(stateDir string) int {
	killed := 0
	runDirs, _ := filepath.Glob(filepath.Join(stateDir, "executions", "*"))
	for _, runDir := range runDirs {
		if pid := VMProcess(runDir); pid != 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	return killed
}

// powerOffAndWait kills every process whose command line names stateDir
// (the VMs a node agent ran from it) and returns once they are gone, or a
// minute passed. A QEMU still starting has no pid file yet, which
// PowerOffVMs goes by, and may create its files in stateDir after the
// agent stopped: a test's TempDir cleanup would then find the directory
// it removes not empty.
func powerOffAndWait(stateDir string) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		pids := processesNaming(stateDir + string(filepath.Separator))
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond) // polls for their end
	}
}

// processesNaming lists the live processes (zombies have no command
// line) whose command line contains s, this one's aside.
func processesNaming(s string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil && strings.Contains(string(cmdline), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// VMProcess is the QEMU process of the execution in runDir (a node
// agent's executions/<instance> directory), 0 when none runs. The pid
// QEMU wrote may have been reused since: it is that VM's only while its
// command line names runDir.
func VMProcess(runDir string) int {
	b, err := os.ReadFile(filepath.Join(runDir, "qemu.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0
	}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || !strings.Contains(string(cmdline), runDir) {
		return 0
	}
	return pid
}

// Exec runs argv in Workspace id through ctrl's ProcessService and returns
// its output and exit code (-1 when the stream ended without one).
func (c *Cluster) Exec(t testing.TB, id string, argv ...string) (string, int32) {
	t.Helper()
	out, code, err := c.TryExec(id, argv...)
	if err != nil {
		t.Fatalf("exec %v: %v", argv, err)
	}
	return out, code
}

// TryExec is Exec returning the stream's error (unavailable while a
// restarted node agent has not reached the guest yet, for one).
func (c *Cluster) TryExec(id string, argv ...string) (string, int32, error) {
	processes := ctrlv1connect.NewProcessServiceClient(http.DefaultClient, c.Ctrl.Client.WorkspaceEndpoint,
		connect.WithInterceptors(auth.Bearer(c.Ctrl.Client.Token)))
	stream, err := processes.ExecProcess(context.Background(), connect.NewRequest(&ctrlv1.ExecProcessRequest{
		Command:     &ctrlv1.CommandMetadata{CommandId: fmt.Sprintf("exec-%d", time.Now().UnixNano())},
		WorkspaceId: id, Spec: &ctrlv1.ProcessSpec{Argv: argv},
	}))
	if err != nil {
		return "", -1, err
	}
	defer stream.Close()
	var out strings.Builder
	code := int32(-1)
	for stream.Receive() {
		out.Write(stream.Msg().GetOutput().GetData())
		if e := stream.Msg().GetExit(); e != nil {
			code = e.GetExitCode()
		}
	}
	return out.String(), code, stream.Err()
}

// CreateSmall asks c for a Workspace of one vCPU, 256 MiB of memory and a
// 256 MiB writable layer, without a Volume, under commandID, and answers
// the call (its headers carry the request id).
func (c *Cluster) CreateSmall(t testing.TB, commandID string) *connect.Response[ctrlv1.CreateWorkspaceResponse] {
	t.Helper()
	res, err := c.Workspaces.CreateWorkspace(context.Background(), connect.NewRequest(&ctrlv1.CreateWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: commandID},
		Spec: &ctrlv1.WorkspaceCreateSpec{
			Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 << 20, WritableLayerCapacityBytes: 256 << 20},
			Volume:    &ctrlv1.WorkspaceVolumeBinding{Mode: ctrlv1.WorkspaceVolumeMode_WORKSPACE_VOLUME_MODE_NONE},
		},
	}))
	if err != nil {
		t.Fatalf("create %s: %v", commandID, err)
	}
	return res
}
