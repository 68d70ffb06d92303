package artifact_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	"github.com/kibotos/kibotos/internal/node/artifact"
	"github.com/kibotos/kibotos/internal/testenv"
)

const chunk = 64 << 10

// fakeCtrl serves FetchArtifact from memory.
type fakeCtrl struct {
	nodev1connect.UnimplementedNodeSessionServiceHandler

	mu      sync.Mutex
	content map[string][]byte // by digest
	// cutAfter, when set, ends the next call with unavailable once it
	// sent that many bytes; it is cleared by the call it cuts.
	cutAfter int
	// gate, when set, holds every call until it is closed.
	gate     chan struct{}
	requests []*nodev1.FetchArtifactRequest
}

func (f *fakeCtrl) FetchArtifact(ctx context.Context, req *connect.Request[nodev1.FetchArtifactRequest], stream *connect.ServerStream[nodev1.FetchArtifactResponse]) error {
	if req.Header().Get("Authorization") != "Bearer cred" || req.Header().Get("Kibotos-Node-Id") != "node-1" {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("bad credential"))
	}
	f.mu.Lock()
	f.requests = append(f.requests, req.Msg)
	data, ok := f.content[req.Msg.GetDigest()]
	cut := f.cutAfter
	f.cutAfter = 0
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !ok {
		return connect.NewError(connect.CodeNotFound, errors.New("no such artifact"))
	}
	off := int(req.Msg.GetOffset())
	if off > len(data) {
		return connect.NewError(connect.CodeOutOfRange, errors.New("offset past the end"))
	}
	sent := 0
	for off < len(data) {
		n := min(chunk, len(data)-off)
		if cut > 0 && sent+n > cut {
			return connect.NewError(connect.CodeUnavailable, errors.New("connection lost (test)"))
		}
		if err := stream.Send(&nodev1.FetchArtifactResponse{Offset: uint64(off), Data: data[off : off+n], TotalBytes: uint64(len(data))}); err != nil {
			return err
		}
		off += n
		sent += n
	}
	return nil
}

func (f *fakeCtrl) offsets() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var o []uint64
	for _, r := range f.requests {
		o = append(o, r.GetOffset())
	}
	return o
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func content(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func setup(t *testing.T) (*fakeCtrl, *artifact.Cache, string) {
	t.Helper()
	f := &fakeCtrl{content: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.Handle(nodev1connect.NewNodeSessionServiceHandler(f))
	srv := testenv.H2CServer(t, mux)

	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	dir := filepath.Join(t.TempDir(), "artifacts")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := artifact.New(ctx, artifact.Config{
		Dir:    dir,
		Client: nodev1connect.NewNodeSessionServiceClient(&http.Client{Transport: tr}, srv.URL),
		Header: func(h http.Header) {
			h.Set("Authorization", "Bearer cred")
			h.Set("Kibotos-Node-Id", "node-1")
		},
		Logger:           slog.New(slog.NewTextHandler(t.Output(), nil)),
		ProgressInterval: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f, c, dir
}

func get(t *testing.T, c *artifact.Cache, a *nodev1.Artifact) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Get(ctx, a)
}

func checkFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, not the artifact's %d", path, len(got), len(want))
	}
}

func TestFetchResumesAfterAnInterruption(t *testing.T) {
	f, c, dir := setup(t)
	data := content(1<<20+123, 1)
	d := digestOf(data)
	f.content[d] = data
	f.cutAfter = 5 * chunk

	path, err := get(t, c, &nodev1.Artifact{Digest: d, SizeBytes: uint64(len(data)), Name: "root.img"})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, d[len("sha256:"):]); path != want {
		t.Errorf("path %s, want %s", path, want)
	}
	checkFile(t, path, data)
	if got := f.offsets(); !slices.Equal(got, []uint64{0, 5 * chunk}) {
		t.Errorf("fetch offsets %v, want a resume at the bytes already fetched", got)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o444 {
		t.Errorf("cached file mode %v %v, want read-only", fi.Mode(), err)
	}
	if _, err := os.Stat(path + ".partial"); !os.IsNotExist(err) {
		t.Errorf("partial file left: %v", err)
	}

	// Cached: no second fetch.
	if _, err := get(t, c, &nodev1.Artifact{Digest: d, SizeBytes: uint64(len(data))}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.offsets()); n != 2 {
		t.Errorf("%d fetches, want the cached file used", n)
	}
}

// A partial file left by an earlier agent run is resumed, not fetched
// again; a partial that turns out wrong is fetched once more from the start.
func TestFetchResumesAPartialFileOfAnEarlierRun(t *testing.T) {
	f, c, dir := setup(t)
	data := content(300_000, 2)
	d := digestOf(data)
	f.content[d] = data
	partial := filepath.Join(dir, d[len("sha256:"):]+".partial")
	if err := os.WriteFile(partial, data[:100_000], 0o600); err != nil {
		t.Fatal(err)
	}
	path, err := get(t, c, &nodev1.Artifact{Digest: d, SizeBytes: uint64(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, path, data)
	if got := f.offsets(); !slices.Equal(got, []uint64{100_000}) {
		t.Errorf("fetch offsets %v, want one resume at 100000", got)
	}

	other := content(200_000, 3)
	od := digestOf(other)
	f.content[od] = other
	torn := slices.Clone(other[:50_000])
	torn[49_999] ^= 0xff
	if err := os.WriteFile(filepath.Join(dir, od[len("sha256:"):]+".partial"), torn, 0o600); err != nil {
		t.Fatal(err)
	}
	path, err = get(t, c, &nodev1.Artifact{Digest: od, SizeBytes: uint64(len(other))})
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, path, other)
	if got := f.offsets()[1:]; !slices.Equal(got, []uint64{50_000, 0}) {
		t.Errorf("fetch offsets %v, want a resume, then a fetch from the start", got)
	}
}

func TestDigestMismatchIsRefused(t *testing.T) {
	f, c, dir := setup(t)
	data := content(200_000, 4)
	wrong := digestOf([]byte("something else"))
	f.content[wrong] = data
	_, err := get(t, c, &nodev1.Artifact{Digest: wrong, SizeBytes: uint64(len(data))})
	if connect.CodeOf(err) != connect.CodeDataLoss {
		t.Fatalf("Get: %v, want data_loss", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("cache holds %v after a mismatch, want nothing", entries)
	}

	// A size other than the declared one is refused too.
	good := digestOf(data)
	f.content[good] = data
	if _, err := get(t, c, &nodev1.Artifact{Digest: good, SizeBytes: 1000}); connect.CodeOf(err) != connect.CodeDataLoss {
		t.Fatalf("Get with the wrong size: %v, want data_loss", err)
	}
}

func TestFetchErrors(t *testing.T) {
	f, c, _ := setup(t)
	if _, err := get(t, c, &nodev1.Artifact{Digest: "md5:abc"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("bad digest: %v, want invalid_argument", err)
	}
	if _, err := get(t, c, &nodev1.Artifact{Digest: digestOf([]byte("x"))}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("unknown digest: %v, want not_found", err)
	}
	// Every attempt fails before a byte arrives: the fetch gives up.
	data := content(3*chunk, 5)
	d := digestOf(data)
	f.content[d] = data
	f.mu.Lock()
	f.gate = make(chan struct{})
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, &nodev1.Artifact{Digest: d}); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("Get with an expired context: %v, want deadline_exceeded", err)
	}
	// The fetch goes on without the caller that gave up: the next Get
	// joins it.
	close(f.gate)
	path, err := get(t, c, &nodev1.Artifact{Digest: d})
	if err != nil {
		t.Fatal(err)
	}
	checkFile(t, path, data)
	if n := len(f.offsets()); n != 2 {
		t.Errorf("%d fetch calls, want 2 (the unknown digest, one shared fetch)", n)
	}
}

func TestConcurrentGetsFetchOnce(t *testing.T) {
	f, c, _ := setup(t)
	data := content(1<<20, 6)
	d := digestOf(data)
	f.content[d] = data
	f.gate = make(chan struct{})
	art := &nodev1.Artifact{Digest: d, SizeBytes: uint64(len(data))}
	if n := c.Delivered(art); n != 0 {
		t.Errorf("Delivered %d before any fetch", n)
	}
	var wg sync.WaitGroup
	paths := make([]string, 8)
	errs := make([]error, 8)
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = get(t, c, &nodev1.Artifact{Digest: d, SizeBytes: uint64(len(data))}) })
	}
	// Every Get is waiting once the one fetch reached ctrl.
	deadline := time.Now().Add(10 * time.Second)
	for len(f.offsets()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(f.gate)
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("Get %d: %s %v", i, paths[i], errs[i])
		}
	}
	checkFile(t, paths[0], data)
	if n := c.Delivered(art); n != uint64(len(data)) {
		t.Errorf("Delivered %d once cached, want %d", n, len(data))
	}
	if n := len(f.offsets()); n != 1 {
		t.Errorf("%d fetches for 8 concurrent Gets, want 1", n)
	}
}

// Holdings lists what the cache holds complete and what it is fetching,
// by digest; a partial file no fetch works on is not arriving.
func TestHoldingsListCompleteAndArrivingArtifacts(t *testing.T) {
	f, c, dir := setup(t)
	cached, arriving := content(3000, 7), content(5000, 8)
	f.content[digestOf(cached)], f.content[digestOf(arriving)] = cached, arriving
	if _, err := get(t, c, &nodev1.Artifact{Digest: digestOf(cached)}); err != nil {
		t.Fatal(err)
	}
	stale := content(100, 9)
	if err := os.WriteFile(filepath.Join(dir, digestOf(stale)[len("sha256:"):]+".partial"), stale[:10], 0o600); err != nil {
		t.Fatal(err)
	}
	f.gate = make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := get(t, c, &nodev1.Artifact{Digest: digestOf(arriving), SizeBytes: uint64(len(arriving))})
		done <- err
	}()
	want := []artifact.Holding{
		{Digest: digestOf(cached), Complete: true, Delivered: 3000, Total: 3000},
		{Digest: digestOf(arriving), Delivered: 0, Total: 5000},
	}
	slices.SortFunc(want, func(a, b artifact.Holding) int { return bytes.Compare([]byte(a.Digest), []byte(b.Digest)) })
	deadline := time.Now().Add(10 * time.Second)
	for len(f.offsets()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got, err := c.Holdings(); err != nil || !slices.Equal(got, want) {
		t.Errorf("Holdings while fetching: %v %v, want %v", got, err, want)
	}
	close(f.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i := range want {
		want[i].Complete, want[i].Delivered = true, want[i].Total
	}
	if got, err := c.Holdings(); err != nil || !slices.Equal(got, want) {
		t.Errorf("Holdings once fetched: %v %v, want %v", got, err, want)
	}
}
