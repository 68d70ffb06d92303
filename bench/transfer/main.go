// Command transfer measures the throughput of an export and of a restore's
// data path, in MiB/s of a Volume's used blocks, and the archive's size
// against those used bytes, beside a plain copy of the same block file,
// side by side in one run. It prints tables.
//
//	go run ./bench/transfer -rounds 5 -sizes 16,64,256
//
// Everything runs in this process, as `kibotos dev` does: ctrl (SQLite in a
// temporary directory, loopback ports) and one node agent (the real QEMU
// provider) with a default storage pool in that directory.
//
// For each round and each size S (MiB), in this order:
//
//   - a Volume of -capacity MiB is created (CreateVolume, GetVolume polled
//     until AVAILABLE); S MiB of random bytes are written into its block
//     file in 16 chunks spread over it, and fsynced. Its used bytes are its
//     data extents (SEEK_DATA/SEEK_HOLE, as the export finds them): the
//     bytes written plus what mkfs.ext4 wrote.
//   - baselines: `cp --sparse=always` of the block file, then fsync of the
//     copy (the export and the import fsync what they write); and reading
//     the used extents with a SHA-256 over them (the least an export does).
//   - export: ExportVolume, then GetTransfer every 10 ms until COMPLETE.
//     Timed by ctrl's own records (no polling in it): the Transfer's
//     created_at to its updated_at (COMPLETE); in it, the node's
//     ExportBlockFile operation (created to answered: the node reads the
//     extents and streams them to ctrl, which stages them), the rest being
//     the command runner and the assembly (ctrl re-reads the staged part,
//     checks its digest, writes and fsyncs the archive).
//   - restore: RestoreWorkspace of that Transfer. The catalog is one no VM
//     boots (as testenv.UnbootableCatalog registers), so that a boot does
//     not dominate: the Workspace is placed, its node makes the Volume from
//     the archive's part (ImportBlockFile: it fetches the part from ctrl,
//     verifies it, writes and fsyncs the block file), and only then the
//     start fails at boot, which ends the restore FAILED and keeps the
//     imported Volume. Timed by ctrl's record of the ImportBlockFile
//     operation (created to answered); the imported file is checked byte for
//     byte against the source (its data extents may be fewer: blocks of
//     zeros in the source are holes in what the import writes).
//   - the archive decode path alone, in this process and with no RPC:
//     archive.Locate and archive.ReadBody from the archive file into a
//     fresh file, then fsync.
//
// All files are in the page cache when read (written just before); the
// figures are those of a warm cache. Medians are over the rounds; a ratio
// is a median over the median of the cp baseline of the same size.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"

	"github.com/kibotos/kibotos/bench/internal/benchnode"
	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	storev1 "github.com/kibotos/kibotos/gen/kibotos/store/v1"
	"github.com/kibotos/kibotos/internal/ctrl"
	"github.com/kibotos/kibotos/internal/ctrl/auth"
	"github.com/kibotos/kibotos/internal/node/blockfile"
	"github.com/kibotos/kibotos/internal/platform"
	"github.com/kibotos/kibotos/internal/store"
	"github.com/kibotos/kibotos/internal/telemetry"
	"github.com/kibotos/kibotos/internal/template"
	"github.com/kibotos/kibotos/internal/transfer/archive"
)

const (
	mib       = 1 << 20
	nodeID    = "bench"
	chunks    = 16 // a size is written in this many chunks, spread over the Volume
	pollEvery = 10 * time.Millisecond
	waitLimit = 5 * time.Minute
)

func main() {
	rounds := flag.Int("rounds", 5, "rounds (each size once a round)")
	sizesFlag := flag.String("sizes", "16,64,256", "MiB of random bytes written into a Volume, comma-separated")
	capacity := flag.Int64("capacity", 1024, "the Volumes' capacity in MiB")
	keep := flag.Bool("keep", false, "keep the temporary directory (logs, state) at the end")
	flag.Parse()
	var sizes []int64
	for _, s := range strings.Split(*sizesFlag, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n < chunks || n*2 > *capacity {
			fmt.Fprintf(os.Stderr, "bench/transfer: size %q: want at least %d MiB and at most half the capacity\n", s, chunks)
			os.Exit(2)
		}
		sizes = append(sizes, n*mib)
	}
	if *rounds < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*rounds, sizes, *capacity*mib, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "bench/transfer:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// sample is one size in one round.
type sample struct {
	written, used, archive uint64
	cp, hash               time.Duration // baselines
	export, exportNode     time.Duration // ctrl's records
	exportWall             time.Duration // ExportVolume call to COMPLETE seen
	importNode, decode     time.Duration
}

// bench is the running cluster.
type bench struct {
	srv       *ctrl.Server
	volumes   ctrlv1connect.VolumeServiceClient
	transfers ctrlv1connect.TransferServiceClient
	ws        ctrlv1connect.WorkspaceServiceClient
	poolDir   string
	tmp       string
	capacity  int64
}

func run(rounds int, sizes []int64, capacity int64, keep bool) (err error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tmp, err := os.MkdirTemp("", "kibotos-bench-transfer")
	if err != nil {
		return err
	}
	logPath := filepath.Join(tmp, "kibotos.log")
	defer func() {
		if err != nil || keep {
			progress("state and logs kept in %s (log: %s)", tmp, logPath)
			return
		}
		_ = os.RemoveAll(tmp)
	}()
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	log := slog.New(telemetry.ContextHandler(slog.NewTextHandler(logFile, nil))) // ids from the context, as ctrl and the node log them

	// ctrl and one node agent in this process, as runDev starts them.
	srv, err := ctrl.Start(ctx, ctrl.Config{
		WorkspaceListen: "127.0.0.1:0", OperatorListen: "127.0.0.1:0", NodeListen: "127.0.0.1:0",
		StateDir: filepath.Join(tmp, "ctrl"), Logger: log.With("component", "ctrl"),
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := unbootableCatalog(ctx, srv, tmp); err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	poolDir := filepath.Join(tmp, "pools", "default")
	nd, err := benchnode.Start(ctx, srv, benchnode.Config{
		NodeID: nodeID, StateDir: filepath.Join(tmp, "node"), PoolDir: poolDir, Logger: log.With("component", "node"), HTTP: hc,
	})
	if err != nil {
		return err
	}
	defer func() {
		if nerr := nd.Close(); nerr != nil && err == nil {
			err = nerr
		}
	}()
	ws := connect.WithInterceptors(auth.Bearer(srv.Client.Token))
	b := &bench{
		srv:       srv,
		volumes:   ctrlv1connect.NewVolumeServiceClient(hc, srv.Client.WorkspaceEndpoint, ws),
		transfers: ctrlv1connect.NewTransferServiceClient(hc, srv.Client.WorkspaceEndpoint, ws),
		ws:        ctrlv1connect.NewWorkspaceServiceClient(hc, srv.Client.WorkspaceEndpoint, ws),
		poolDir:   poolDir, tmp: tmp, capacity: capacity,
	}
	progress("ctrl and node %q ready; pool %s", nodeID, poolDir)

	samples := make([][]sample, len(sizes)) // by size, then round
	for r := range rounds {
		for i, size := range sizes {
			s, err := b.measure(ctx, r, size)
			if err != nil {
				return fmt.Errorf("round %d, %d MiB: %w", r+1, size/mib, err)
			}
			samples[i] = append(samples[i], s)
			progress("round %d/%d, %d MiB written (%s used, archive %s): cp %s, sha256 %s, export %s (node %s), import %s, decode %s",
				r+1, rounds, size/mib, mibs(s.used), mibs(s.archive), ms(s.cp), ms(s.hash), ms(s.export), ms(s.exportNode), ms(s.importNode), ms(s.decode))
		}
	}
	report(os.Stdout, rounds, capacity, samples)
	return nil
}

// unbootableCatalog registers a default platform and template no VM
// boots, as testenv.UnbootableCatalog does: a restore is placed and
// imports its parts, then fails at boot.
func unbootableCatalog(ctx context.Context, srv *ctrl.Server, tmp string) error {
	dir := filepath.Join(tmp, "platform")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"vmlinux", "initramfs"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("not a "+f), 0o644); err != nil {
			return err
		}
	}
	if _, err := srv.Catalog().RegisterPlatform(ctx, "default", &platform.Manifest{Vmlinux: "vmlinux", Initramfs: "initramfs", Digest: "sha256:fake"}, dir, true); err != nil {
		return err
	}
	root := filepath.Join(tmp, "root.img")
	body := []byte("not an ext4 image")
	if err := os.WriteFile(root, body, 0o644); err != nil {
		return err
	}
	_, err := srv.Catalog().RegisterTemplate(ctx, "busybox", &template.Image{Path: root, Digest: fmt.Sprintf("sha256:%x", sha256.Sum256(body)), Size: int64(len(body))}, true)
	return err
}

// poll calls cond every 10 ms until it holds, fails, or waitLimit passed.
func poll(ctx context.Context, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(waitLimit)
	for {
		if ok, err := cond(); ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

func (b *bench) measure(ctx context.Context, round int, size int64) (s sample, err error) {
	tag := fmt.Sprintf("%d-%d", round+1, size/mib)
	s.written = uint64(size)

	// A Volume with size random bytes in it.
	res, err := b.volumes.CreateVolume(ctx, connect.NewRequest(&ctrlv1.CreateVolumeRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: "volume-" + tag}, Spec: &ctrlv1.VolumeSpec{CapacityBytes: uint64(b.capacity)},
	}))
	if err != nil {
		return s, err
	}
	volID := res.Msg.GetVolume().GetVolumeId()
	if err := poll(ctx, "volume "+volID+" AVAILABLE", func() (bool, error) {
		got, err := b.volumes.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: volID}))
		return err == nil && got.Msg.GetVolume().GetState() == ctrlv1.VolumeState_VOLUME_STATE_AVAILABLE, nil
	}); err != nil {
		return s, err
	}
	src := filepath.Join(b.poolDir, "volumes", volID+".img")
	if err := scribble(src, size, b.capacity, uint64(round)); err != nil {
		return s, err
	}
	if s.used, err = usedBytes(src); err != nil {
		return s, err
	}

	// Baselines.
	dst := filepath.Join(b.tmp, "copy.img")
	if s.cp, err = timed(func() error { return cpSparse(src, dst) }); err != nil {
		return s, err
	}
	if err := os.Remove(dst); err != nil {
		return s, err
	}
	if s.hash, err = timed(func() error { return hashUsed(src) }); err != nil {
		return s, err
	}

	// Export.
	exportCmd := "export-" + tag
	t0 := time.Now()
	er, err := b.volumes.ExportVolume(ctx, connect.NewRequest(&ctrlv1.ExportVolumeRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: exportCmd}, VolumeId: volID,
	}))
	if err != nil {
		return s, err
	}
	trID := er.Msg.GetTransfer().GetTransferId()
	var tr *ctrlv1.Transfer
	if err := poll(ctx, "transfer "+trID+" settled", func() (bool, error) {
		got, err := b.transfers.GetTransfer(ctx, connect.NewRequest(&ctrlv1.GetTransferRequest{TransferId: trID}))
		if err != nil {
			return false, err
		}
		tr = got.Msg.GetTransfer()
		return tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_EXPORTING, nil
	}); err != nil {
		return s, err
	}
	s.exportWall = time.Since(t0)
	if tr.GetState() != ctrlv1.TransferState_TRANSFER_STATE_COMPLETE {
		return s, fmt.Errorf("transfer %s ended %s: %v", trID, tr.GetState(), tr.GetFailure())
	}
	s.export = tr.GetUpdatedAt().AsTime().Sub(tr.GetCreatedAt().AsTime())
	s.archive = tr.GetManifest().GetSizeBytes()
	if _, s.exportNode, err = b.nodeOp(ctx, exportCmd+"/export-volume"); err != nil {
		return s, err
	}

	// Restore: the node's ImportBlockFile, then the start fails at boot.
	restoreCmd := "restore-" + tag
	if _, err := b.ws.RestoreWorkspace(ctx, connect.NewRequest(&ctrlv1.RestoreWorkspaceRequest{
		Command: &ctrlv1.CommandMetadata{CommandId: restoreCmd}, TransferId: trID,
		// A Volume's archive carries no Workspace resources.
		Spec: &ctrlv1.WorkspaceCreateSpec{Resources: &ctrlv1.ResourceRequest{CpuMillis: 1000, MemoryBytes: 256 * mib}},
	})); err != nil {
		return s, err
	}
	var cmd *ctrlv1.WorkspaceCommand
	if err := poll(ctx, "restore "+restoreCmd+" ended", func() (bool, error) {
		got, err := b.ws.GetWorkspaceCommand(ctx, connect.NewRequest(&ctrlv1.GetWorkspaceCommandRequest{CommandId: restoreCmd}))
		if err != nil {
			return false, err
		}
		cmd = got.Msg.GetCommand()
		return cmd.GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED ||
			cmd.GetState() == ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED, nil
	}); err != nil {
		return s, err
	}
	imp, d, err := b.nodeOp(ctx, restoreCmd+"/import-volume")
	if err != nil {
		return s, fmt.Errorf("%w (the restore command: %v)", err, cmd)
	}
	s.importNode = d
	var body nodev1.ImportBlockFile
	if err := imp.GetBody().UnmarshalTo(&body); err != nil {
		return s, err
	}
	if err := sameBytes(src, filepath.Join(b.poolDir, "volumes", body.GetRef().GetObjectId()+".img")); err != nil {
		return s, fmt.Errorf("the imported Volume is not the source: %w", err)
	}

	// The archive decode path alone.
	arch := filepath.Join(b.tmp, "ctrl", "artifacts", "transfers", trID+".archive")
	if fi, err := os.Stat(arch); err != nil || uint64(fi.Size()) != s.archive {
		return s, fmt.Errorf("archive %s: %v (manifest says %d bytes)", arch, err, s.archive)
	}
	if s.decode, err = timed(func() error { return decode(arch, dst) }); err != nil {
		return s, err
	}
	if err := sameBytes(src, dst); err != nil {
		return s, fmt.Errorf("the decoded copy is not the source: %w", err)
	}
	return s, os.Remove(dst)
}

// nodeOp is ctrl's record of node operation id, which must have
// succeeded, and the time from its creation to its answer.
func (b *bench) nodeOp(ctx context.Context, id string) (*storev1.NodeOperation, time.Duration, error) {
	var op *storev1.NodeOperation
	if err := b.srv.Store().Tx(ctx, func(tx *store.Tx) error {
		var err error
		op, err = tx.GetNodeOperation(id, false)
		return err
	}); err != nil {
		return nil, 0, fmt.Errorf("node operation %s: %w", id, err)
	}
	if op.GetAnsweredAt() == nil || op.GetCode() != 0 {
		return nil, 0, fmt.Errorf("node operation %s: %s, code %d: %s", id, op.GetState(), op.GetCode(), op.GetMessage())
	}
	return op, op.GetAnsweredAt().AsTime().Sub(op.GetCreatedAt().AsTime()), nil
}

// scribble writes size random bytes into the block file at path, in chunks
// spread evenly over its capacity (each in the middle of its stride, away
// from the start where mkfs wrote most), and fsyncs it. Random bytes: an
// archive that compressed would otherwise look better than it is.
func scribble(path string, size, capacity int64, seed uint64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	binary.LittleEndian.PutUint64(key[8:], uint64(size))
	rng := rand.NewChaCha8(key)
	buf := make([]byte, size/chunks)
	stride := capacity / chunks
	for i := range int64(chunks) {
		_, _ = rng.Read(buf)
		if _, err := f.WriteAt(buf, i*stride+stride/2); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}

// usedBytes is the length of path's data extents, as an export finds them.
// sameBytes reads two files whole, holes as zeros, and says where they
// first differ. Their data extents may differ: blocks of zeros mkfs wrote
// into the source are holes in what an import writes.
func sameBytes(a, b string) error {
	fa, err := os.Open(a)
	if err != nil {
		return err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return err
	}
	defer fb.Close()
	bufA, bufB := make([]byte, mib), make([]byte, mib)
	for off := int64(0); ; off += mib {
		na, errA := io.ReadFull(fa, bufA)
		nb, errB := io.ReadFull(fb, bufB)
		if na != nb || !bytes.Equal(bufA[:na], bufB[:nb]) {
			return fmt.Errorf("%s and %s differ in the MiB at %d", a, b, off)
		}
		if errA == io.EOF || errA == io.ErrUnexpectedEOF {
			return nil
		}
		if errA != nil {
			return errA
		}
		if errB != nil {
			return errB
		}
	}
}

func usedBytes(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	exts, err := dataExtents(f)
	var n uint64
	for _, e := range exts {
		n += uint64(e.Len)
	}
	return n, err
}

func dataExtents(f *os.File) ([]blockfile.Extent, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return blockfile.DataExtents(f, fi.Size())
}

// cpSparse is the baseline copy: cp keeps holes (SEEK_DATA), then fsync,
// as the export and the import make what they write durable.
func cpSparse(src, dst string) error {
	if out, err := exec.Command("cp", "--sparse=always", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp: %v: %s", err, out)
	}
	f, err := os.Open(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// hashUsed reads path's data extents through SHA-256: the least work an
// export does on the node.
func hashUsed(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	exts, err := dataExtents(f)
	if err != nil {
		return err
	}
	h := sha256.New()
	for _, e := range exts {
		if _, err := io.Copy(h, io.NewSectionReader(f, e.Off, e.Len)); err != nil {
			return err
		}
	}
	return nil
}

// decode writes the archive's one part into a fresh file at dst, verified,
// and fsyncs it: the node's ImportBlockFile without the RPC.
func decode(arch, dst string) error {
	f, err := os.Open(arch)
	if err != nil {
		return err
	}
	defer f.Close()
	m, spans, err := archive.Locate(f, archive.Limits{})
	if err != nil {
		return err
	}
	if len(m.Parts) != 1 {
		return fmt.Errorf("archive has %d parts, want the Volume's only", len(m.Parts))
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := archive.ReadBody(io.NewSectionReader(f, spans[0].Offset, int64(spans[0].Size)), m.Parts[0], out, archive.Limits{}); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	return out.Close()
}

func timed(f func() error) (time.Duration, error) {
	t := time.Now()
	err := f()
	return time.Since(t), err
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func mibs(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/mib) }

// median of the middle rank (the lower middle of an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return s[(len(s)-1)/2]
}

func report(w io.Writer, rounds int, capacity int64, samples [][]sample) {
	fmt.Fprintf(w, "Transfer throughput: Volumes of %d MiB, random bytes written in %d chunks spread over each; %d rounds, each size once a round; GOMAXPROCS %d; warm page cache\n",
		capacity/mib, chunks, rounds, runtime.GOMAXPROCS(0))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "written\tused (data extents)\tarchive\tarchive / used\tarchive − used\t")
	for _, ss := range samples {
		s := ss[0] // the same every round (checked below)
		for _, o := range ss {
			if o.used != s.used || o.archive != s.archive {
				fmt.Fprintf(tw, "(round sizes differ: used %d/%d, archive %d/%d)\t\t\t\t\t\n", o.used, s.used, o.archive, s.archive)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.4f\t%d B\t\n", mibs(s.written), mibs(s.used), mibs(s.archive),
			float64(s.archive)/float64(s.used), int64(s.archive)-int64(s.used))
	}
	tw.Flush()
	fmt.Fprintln(w)

	rows := []struct {
		name string
		get  func(sample) time.Duration
	}{
		{"baseline: cp --sparse=always + fsync", func(s sample) time.Duration { return s.cp }},
		{"baseline: read used extents + SHA-256", func(s sample) time.Duration { return s.hash }},
		{"export: Transfer created → COMPLETE", func(s sample) time.Duration { return s.export }},
		{"- in it, node ExportBlockFile (op created → answered)", func(s sample) time.Duration { return s.exportNode }},
		{"- in it, the rest (runner, assembly)", func(s sample) time.Duration { return s.export - s.exportNode }},
		{"export: ExportVolume call → COMPLETE seen (10 ms polls)", func(s sample) time.Duration { return s.exportWall }},
		{"restore: node ImportBlockFile (op created → answered)", func(s sample) time.Duration { return s.importNode }},
		{"restore: archive decode in-process, no RPC (Locate + ReadBody + fsync)", func(s sample) time.Duration { return s.decode }},
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "used\tmeasure\tp50\tMiB/s of used\t/ cp p50\tall rounds, in order (ms)\t")
	for _, ss := range samples {
		cp := median(collect(ss, rows[0].get))
		for i, r := range rows {
			vals := collect(ss, r.get)
			p50 := median(vals)
			var all []string
			for _, v := range vals {
				all = append(all, fmt.Sprintf("%.0f", float64(v)/float64(time.Millisecond)))
			}
			used := ""
			if i == 0 {
				used = mibs(ss[0].used)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.2f\t%s\t\n", used, r.name, ms(p50),
				float64(ss[0].used)/mib/p50.Seconds(), p50.Seconds()/cp.Seconds(), strings.Join(all, " "))
		}
	}
	tw.Flush()
}

func collect(ss []sample, get func(sample) time.Duration) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = get(s)
	}
	return out
}
