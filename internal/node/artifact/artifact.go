// Package artifact is the node's cache of content-addressed artifacts (a
// platform's kernel and initramfs, a template's root image), filled from
// ctrl with NodeSessionService.FetchArtifact.
//
// Layout, under the cache directory (<state dir>/artifacts):
//
//	<hex>            a complete artifact whose sha256 is <hex>, mode 0444
//	<hex>.partial    an artifact being fetched; a later fetch resumes at
//	                 its size
//
// A file only gets its final name once its whole content hashed to the
// digest, so a present <hex> is trusted without hashing it again.
// Concurrent Gets of one digest share one fetch.
package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/kibotos/kibotos/gen/kibotos/node/v1"
	"github.com/kibotos/kibotos/gen/kibotos/node/v1/nodev1connect"
	"github.com/kibotos/kibotos/internal/node/fsutil"
)

// DefaultProgressInterval is how often a running fetch logs its progress.
const DefaultProgressInterval = 5 * time.Second

// maxFailures is how many attempts in a row may fail without fetching a
// byte before a fetch gives up.
const maxFailures = 4

// Config configures a Cache.
type Config struct {
	// Dir is the cache directory; it is created when missing.
	Dir string
	// Client reaches ctrl's NodeSessionService.
	Client nodev1connect.NodeSessionServiceClient
	// Header sets the authentication headers of each FetchArtifact call
	// ("Authorization: Bearer <credential>", "Kibotos-Node-Id").
	Header func(http.Header)
	Logger *slog.Logger
	// ProgressInterval is how often a fetch logs its progress; zero is
	// DefaultProgressInterval.
	ProgressInterval time.Duration
}

// Cache is the artifact cache. Its methods are safe for concurrent use.
type Cache struct {
	cfg  Config
	log  *slog.Logger
	base context.Context

	mu       sync.Mutex
	inflight map[string]*call
}

type call struct {
	done chan struct{}
	path string
	err  error
	// fetched is how many bytes of the artifact are on disk so far; total
	// its size, zero until known (declared, or announced by ctrl).
	fetched, total atomic.Uint64
}

// New opens the cache. Fetches run in ctx (the agent's run): a caller
// that stops waiting does not cancel a fetch others may share.
func New(ctx context.Context, cfg Config) (*Cache, error) {
	if cfg.Dir == "" {
		return nil, errors.New("artifact cache: no directory")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Cache{cfg: cfg, log: log, base: ctx, inflight: map[string]*call{}}, nil
}

// ParseDigest returns the hex part of "sha256:<64 lowercase hex digits>".
func ParseDigest(digest string) (string, error) {
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(h) != sha256.Size*2 || strings.ToLower(h) != h {
		return "", fmt.Errorf("artifact digest %q is not sha256:<64 lowercase hex digits>", digest)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("artifact digest %q is not sha256:<64 lowercase hex digits>", digest)
	}
	return h, nil
}

// Path is where the artifact with digest lives once it is cached.
func (c *Cache) Path(digest string) (string, error) {
	h, err := ParseDigest(digest)
	if err != nil {
		return "", err
	}
	return filepath.Join(c.cfg.Dir, h), nil
}

// Get returns the path of the artifact, fetching it when it is not cached.
// Errors carry a Connect code (connect.CodeOf): invalid_argument for a bad
// digest, data_loss when the content does not match the digest or the
// declared size, ctrl's own code when it refused the fetch (not_found for
// an unknown digest), unavailable when ctrl could not be reached, and the
// code of ctx when the caller gave up.
func (c *Cache) Get(ctx context.Context, a *nodev1.Artifact) (string, error) {
	h, err := ParseDigest(a.GetDigest())
	if err != nil {
		return "", connect.NewError(connect.CodeInvalidArgument, err)
	}
	final := filepath.Join(c.cfg.Dir, h)
	if ok, err := c.complete(final, a.GetSizeBytes()); err != nil {
		return "", connect.NewError(connect.CodeInternal, err)
	} else if ok {
		return final, nil
	}

	c.mu.Lock()
	cl := c.inflight[h]
	if cl == nil {
		cl = &call{done: make(chan struct{})}
		cl.total.Store(a.GetSizeBytes())
		c.inflight[h] = cl
		go func() {
			cl.path, cl.err = c.fetch(c.base, h, a, cl)
			c.mu.Lock()
			delete(c.inflight, h)
			c.mu.Unlock()
			close(cl.done)
		}()
	}
	c.mu.Unlock()

	select {
	case <-cl.done:
		return cl.path, cl.err
	case <-ctx.Done():
		code := connect.CodeCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		return "", connect.NewError(code, fmt.Errorf("waiting for artifact %s: %w", a.GetDigest(), ctx.Err()))
	}
}

// Delivered is how many bytes of a are on this node: all of them once it
// is cached, those fetched so far while a fetch runs, zero otherwise.
func (c *Cache) Delivered(a *nodev1.Artifact) uint64 {
	h, err := ParseDigest(a.GetDigest())
	if err != nil {
		return 0
	}
	c.mu.Lock()
	cl := c.inflight[h]
	c.mu.Unlock()
	if cl != nil {
		return cl.fetched.Load()
	}
	if fi, err := os.Stat(filepath.Join(c.cfg.Dir, h)); err == nil {
		return uint64(fi.Size())
	}
	return 0
}

// Holding is one artifact the cache holds complete or is fetching.
type Holding struct {
	Digest string
	// Complete: the whole artifact is cached and matched its digest.
	Complete bool
	// Delivered is how many bytes are on disk; Total the artifact's size,
	// zero while a fetch does not know it yet.
	Delivered, Total uint64
}

// Holdings lists, by digest, the artifacts cached complete and those being
// fetched now. A partial file no fetch is working on is left out: nothing
// moves it until a start needs its artifact again.
func (c *Cache) Holdings() ([]Holding, error) {
	entries, err := os.ReadDir(c.cfg.Dir)
	if err != nil {
		return nil, err
	}
	byDigest := map[string]Holding{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		digest := "sha256:" + e.Name()
		if _, err := ParseDigest(digest); err != nil {
			continue // a .partial file, or not the cache's
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		size := uint64(fi.Size())
		byDigest[digest] = Holding{Digest: digest, Complete: true, Delivered: size, Total: size}
	}
	c.mu.Lock()
	for h, cl := range c.inflight {
		digest := "sha256:" + h
		if _, done := byDigest[digest]; !done {
			byDigest[digest] = Holding{Digest: digest, Delivered: cl.fetched.Load(), Total: cl.total.Load()}
		}
	}
	c.mu.Unlock()
	out := make([]Holding, 0, len(byDigest))
	for _, h := range byDigest {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b Holding) int { return strings.Compare(a.Digest, b.Digest) })
	return out, nil
}

// complete reports whether the cached file is there. A file of the wrong
// size (the artifact's declaration changed, or it was tampered with) is
// removed and fetched again.
func (c *Cache) complete(final string, size uint64) (bool, error) {
	fi, err := os.Stat(final)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if size != 0 && uint64(fi.Size()) != size {
		c.log.Warn("cached artifact has the wrong size; fetching it again", "path", final, "size", fi.Size(), "want", size)
		if err := os.Remove(final); err != nil {
			return false, err
		}
		return false, nil
	}
	return true, nil
}

// fetch fetches one artifact into <hex>.partial, resuming at its size, and
// renames it into place once its digest checks.
func (c *Cache) fetch(ctx context.Context, h string, a *nodev1.Artifact, cl *call) (string, error) {
	final := filepath.Join(c.cfg.Dir, h)
	// Another fetch may have completed between Get's check and this one.
	if ok, err := c.complete(final, a.GetSizeBytes()); err != nil {
		return "", connect.NewError(connect.CodeInternal, err)
	} else if ok {
		return final, nil
	}
	f := &fetcher{c: c, a: a, hex: h, partial: final + ".partial", fetched: &cl.fetched, announced: &cl.total, log: c.log.With("artifact", a.GetName(), "digest", a.GetDigest())}
	defer f.close()
	resumed, err := f.open()
	if err != nil {
		return "", connect.NewError(connect.CodeInternal, err)
	}
	err = f.download(ctx)
	if err == nil {
		err = f.verify()
		if err != nil && resumed {
			// The bytes kept from an earlier run may be what is wrong (a
			// crash can leave a partial file with a torn end): once more
			// from the start.
			f.log.Warn("artifact did not verify after a resumed fetch; fetching it from the start", "err", err)
			if err = f.restart(); err == nil {
				if err = f.download(ctx); err == nil {
					err = f.verify()
				}
			}
		}
	}
	if err != nil {
		if connect.CodeOf(err) == connect.CodeDataLoss {
			f.discard()
		}
		return "", err
	}
	if err := f.install(final); err != nil {
		return "", connect.NewError(connect.CodeInternal, err)
	}
	return final, nil
}

type fetcher struct {
	c       *Cache
	a       *nodev1.Artifact
	hex     string
	partial string
	log     *slog.Logger

	file  *os.File
	hash  hash.Hash
	size  uint64 // bytes in the partial file, all hashed
	total uint64 // total_bytes ctrl announced; 0 until known
	// fetched mirrors size for Delivered and Holdings, announced total.
	fetched, announced *atomic.Uint64
}

// open opens the partial file and hashes what it holds already.
func (f *fetcher) open() (resumed bool, err error) {
	f.file, err = os.OpenFile(f.partial, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return false, err
	}
	f.hash = sha256.New()
	n, err := io.Copy(f.hash, f.file)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", f.partial, err)
	}
	f.size = uint64(n)
	f.fetched.Store(f.size)
	if want := f.a.GetSizeBytes(); want != 0 && f.size > want {
		f.log.Warn("partial artifact is larger than the artifact; fetching it from the start", "bytes", f.size, "total", want)
		return false, f.restart()
	}
	return f.size > 0, nil
}

func (f *fetcher) restart() error {
	if err := f.file.Truncate(0); err != nil {
		return err
	}
	if _, err := f.file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	f.hash.Reset()
	f.size = 0
	f.fetched.Store(0)
	return nil
}

func (f *fetcher) close() {
	if f.file != nil {
		f.file.Close()
	}
}

func (f *fetcher) discard() {
	f.close()
	f.file = nil
	_ = os.Remove(f.partial)
}

// download fetches from the partial file's size to the end, retrying
// transient failures; each attempt resumes where the last one stopped.
func (f *fetcher) download(ctx context.Context) error {
	if want := f.a.GetSizeBytes(); want != 0 && f.size == want {
		return nil // fetched by an earlier run that stopped before the rename
	}
	start := time.Now()
	f.log.Info("fetching artifact", "offset", f.size, "total", f.a.GetSizeBytes())
	failures := 0
	wait := 200 * time.Millisecond
	for {
		before := f.size
		err := f.attempt(ctx)
		if err == nil {
			f.log.Info("artifact fetched", "bytes", f.size, "elapsed", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if ctx.Err() != nil {
			return connect.NewError(connect.CodeCanceled, fmt.Errorf("fetch of artifact %s abandoned: %w", f.a.GetDigest(), ctx.Err()))
		}
		var local *localError
		if errors.As(err, &local) {
			code := connect.CodeInternal
			if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
				code = connect.CodeResourceExhausted
			}
			return connect.NewError(code, err)
		}
		if !transient(err) {
			return err
		}
		if f.size > before {
			failures = 0
			wait = 200 * time.Millisecond
		}
		failures++
		if failures >= maxFailures {
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("fetch of artifact %s failed %d times at byte %d: %w", f.a.GetDigest(), failures, f.size, err))
		}
		d := wait/2 + rand.N(wait/2+1)
		f.log.Warn("artifact fetch interrupted; resuming", "bytes", f.size, "total", f.total, "err", err, "retry_in", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return connect.NewError(connect.CodeCanceled, fmt.Errorf("fetch of artifact %s abandoned: %w", f.a.GetDigest(), ctx.Err()))
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// transient reports whether a failed attempt is worth resuming.
func transient(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeAborted, connect.CodeDeadlineExceeded,
		connect.CodeInternal, connect.CodeResourceExhausted, connect.CodeCanceled:
		return true
	}
	return false
}

// localError is a failure on the node's side (its disk); it is not
// retried.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

func (f *fetcher) attempt(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := connect.NewRequest(&nodev1.FetchArtifactRequest{Digest: f.a.GetDigest(), Offset: f.size})
	if f.c.cfg.Header != nil {
		f.c.cfg.Header(req.Header())
	}
	stream, err := f.c.cfg.Client.FetchArtifact(ctx, req)
	if err != nil {
		return err
	}
	defer stream.Close()
	lastLog := time.Now()
	for stream.Receive() {
		msg := stream.Msg()
		if t := msg.GetTotalBytes(); t != 0 {
			if want := f.a.GetSizeBytes(); want != 0 && t != want {
				return connect.NewError(connect.CodeDataLoss, fmt.Errorf("ctrl serves artifact %s with %d bytes, declared %d", f.a.GetDigest(), t, want))
			}
			f.total = t
			f.announced.CompareAndSwap(0, t)
		}
		if len(msg.GetData()) == 0 {
			continue
		}
		if msg.GetOffset() != f.size {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("ctrl sent artifact %s bytes at offset %d, want %d", f.a.GetDigest(), msg.GetOffset(), f.size))
		}
		if limit := f.limit(); limit != 0 && f.size+uint64(len(msg.GetData())) > limit {
			return connect.NewError(connect.CodeDataLoss, fmt.Errorf("ctrl sent more than the %d bytes of artifact %s", limit, f.a.GetDigest()))
		}
		if _, err := f.file.Write(msg.GetData()); err != nil {
			return &localError{fmt.Errorf("write %s: %w", f.partial, err)}
		}
		f.hash.Write(msg.GetData())
		f.size += uint64(len(msg.GetData()))
		f.fetched.Store(f.size)
		if now := time.Now(); now.Sub(lastLog) >= f.c.cfg.ProgressInterval {
			lastLog = now
			f.log.Info("artifact fetch progress", "bytes", f.size, "total", f.limit())
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	if limit := f.limit(); limit != 0 && f.size < limit {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("ctrl ended artifact %s at byte %d of %d", f.a.GetDigest(), f.size, limit))
	}
	return nil
}

// limit is the artifact's size as far as it is known.
func (f *fetcher) limit() uint64 {
	if s := f.a.GetSizeBytes(); s != 0 {
		return s
	}
	return f.total
}

func (f *fetcher) verify() error {
	got := hex.EncodeToString(f.hash.Sum(nil))
	if got != f.hex {
		return connect.NewError(connect.CodeDataLoss, fmt.Errorf("artifact %s (%s): fetched %d bytes hash to sha256:%s", f.a.GetDigest(), f.a.GetName(), f.size, got))
	}
	return nil
}

// install makes the verified partial file the artifact, durably.
func (f *fetcher) install(final string) error {
	if err := f.file.Sync(); err != nil {
		return err
	}
	if err := f.file.Chmod(0o444); err != nil {
		return err
	}
	if err := f.file.Close(); err != nil {
		return err
	}
	f.file = nil
	if err := os.Rename(f.partial, final); err != nil {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(final))
}
