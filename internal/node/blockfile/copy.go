package blockfile

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/kibotos/kibotos/internal/node/fsutil"
)

// ErrMissing: the source of a copy does not exist.
var ErrMissing = errors.New("block file does not exist")

// copyChunk is how much of a data extent one read takes.
const copyChunk = 1 << 20

// zeroBlock is the unit a copy checks for zeros: a block of zeros in a
// data extent is left a hole in the copy, so the copy stays sparse.
const zeroBlock = 4096

// Progress is called as a copy goes on, with the bytes of the source's
// data extents copied so far and their total (the bytes in use).
type Progress func(copied, total uint64)

// CopyResult is a finished copy.
type CopyResult struct {
	Status
	// Digest is the SHA-256 over the content's non-zero 4 KiB blocks
	// (offset and bytes each), computed from the source as it was read
	// and checked against the copy read back.
	Digest string
	// CopiedBytes is the bytes in use the copy read (its data extents).
	CopiedBytes uint64
}

// extent is one data region of a sparse file.
type extent struct{ off, len int64 }

// Copy copies the block file src to dst (in another pool, usually),
// reading only the source's data extents (SEEK_DATA/SEEK_HOLE) and
// writing only their non-zero blocks, so the copy is as sparse as the
// source or more. The copy is built under dst's temporary name, read back
// and compared with the source by digest, synced and only then renamed
// into place: dst's real name only ever holds a complete copy.
//
// Copy is idempotent: a dst already in place whose content matches the
// source is the answer; a left-over temporary file (a crash mid-copy) is
// dropped and the copy restarts; a dst that does not match is copied over.
// The source must not change during the copy (ctrl moves only objects no
// execution uses).
func (m *Manager) Copy(ctx context.Context, src, dst Ref, progress Progress) (CopyResult, error) {
	srcPath, err := src.Path()
	if err != nil {
		return CopyResult{}, err
	}
	dstPath, err := dst.Path()
	if err != nil {
		return CopyResult{}, err
	}
	if srcPath == dstPath {
		return CopyResult{}, fmt.Errorf("%w: source and destination are the same file", ErrInvalid)
	}
	for _, dir := range []string{src.PoolDir, dst.PoolDir} {
		if err := checkPool(dir); err != nil {
			return CopyResult{}, err
		}
	}
	// Lock in path order, so two copies between the same files in
	// opposite directions cannot deadlock.
	first, second := srcPath, dstPath
	if second < first {
		first, second = second, first
	}
	defer m.lock(first)()
	defer m.lock(second)()

	in, err := os.Open(srcPath)
	if errors.Is(err, fs.ErrNotExist) {
		return CopyResult{}, fmt.Errorf("%w: %s", ErrMissing, srcPath)
	}
	if err != nil {
		return CopyResult{}, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return CopyResult{}, err
	}
	if !fi.Mode().IsRegular() {
		return CopyResult{}, fmt.Errorf("%s is not a regular file", srcPath)
	}
	exts, err := dataExtents(in, fi.Size())
	if err != nil {
		return CopyResult{}, err
	}
	var total uint64
	for _, e := range exts {
		total += uint64(e.len)
	}
	report := func(n uint64) {
		if progress != nil {
			progress(n, total)
		}
	}

	if done, digest, err := copyInPlace(ctx, in, exts, dstPath, fi.Size()); err != nil || done {
		if err != nil {
			return CopyResult{}, err
		}
		report(total)
		st, err := Stat(dstPath)
		return CopyResult{Status: st, Digest: digest, CopiedBytes: total}, err
	}
	if err := os.Mkdir(filepath.Dir(dstPath), 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return CopyResult{}, err
	}
	digest, err := copyTo(ctx, in, tempName(dstPath), fi.Size(), exts, report)
	if err != nil {
		return CopyResult{}, err
	}
	// A grow marker of an earlier file by that name belongs to no file now.
	if err := os.Remove(growMarker(dstPath)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return CopyResult{}, err
	}
	if err := os.Rename(tempName(dstPath), dstPath); err != nil {
		return CopyResult{}, err
	}
	if err := fsutil.SyncDir(filepath.Dir(dstPath)); err != nil {
		return CopyResult{}, err
	}
	st, err := Stat(dstPath)
	return CopyResult{Status: st, Digest: digest, CopiedBytes: total}, err
}

// copyInPlace reports whether dstPath already holds in's content (an
// earlier copy finished but its answer was lost), with the digest.
func copyInPlace(ctx context.Context, in *os.File, exts []extent, dstPath string, size int64) (bool, string, error) {
	out, err := os.Open(dstPath)
	if errors.Is(err, fs.ErrNotExist) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	defer out.Close()
	fi, err := out.Stat()
	if err != nil || fi.Size() != size {
		return false, "", err
	}
	if pending, err := exists(growMarker(dstPath)); err != nil || pending {
		return false, "", err
	}
	want, err := digestOf(ctx, in, exts)
	if err != nil {
		return false, "", err
	}
	got, err := fileDigest(ctx, out, size)
	if err != nil {
		return false, "", err
	}
	return got == want, want, nil
}

// copyTo writes a fresh sparse copy of in's extents to tmp, hashing them
// as it reads, reads the copy back to compare digests, and syncs it.
func copyTo(ctx context.Context, in *os.File, tmp string, size int64, exts []extent, report func(uint64)) (_ string, err error) {
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	out, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if err := out.Truncate(size); err != nil {
		return "", err
	}
	d := newDigest()
	buf := make([]byte, copyChunk)
	var copied uint64
	report(0)
	for _, e := range exts {
		for off := e.off; off < e.off+e.len; {
			if err := ctx.Err(); err != nil {
				return "", err
			}
			n := min(int64(len(buf)), e.off+e.len-off)
			if _, err := in.ReadAt(buf[:n], off); err != nil {
				return "", err
			}
			if err := writeNonZero(out, buf[:n], off); err != nil {
				return "", err
			}
			d.add(buf[:n], off)
			off += n
			copied += uint64(n)
			report(copied)
		}
	}
	want := d.sum()
	got, err := fileDigest(ctx, out, size)
	if err != nil {
		return "", err
	}
	if got != want {
		return "", fmt.Errorf("copy of %s does not match its source (digest %s, want %s)", filepath.Base(tmp), got, want)
	}
	return want, out.Sync()
}

// writeNonZero writes buf at off, leaving blocks of zeros unwritten.
func writeNonZero(out io.WriterAt, buf []byte, off int64) error {
	for start := 0; start < len(buf); {
		end := min(start+zeroBlock, len(buf))
		if allZero(buf[start:end]) {
			start = end
			continue
		}
		// Extend the run over the following non-zero blocks.
		for end < len(buf) {
			next := min(end+zeroBlock, len(buf))
			if allZero(buf[end:next]) {
				break
			}
			end = next
		}
		if _, err := out.WriteAt(buf[start:end], off+int64(start)); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// dataExtents lists f's data regions with SEEK_DATA/SEEK_HOLE. A
// filesystem without them reports the whole file as data, which is still
// a correct (if not sparse-aware) copy.
func dataExtents(f *os.File, size int64) ([]extent, error) {
	var exts []extent
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole from off to the end
		}
		if err != nil {
			return nil, fmt.Errorf("seek data in %s: %w", f.Name(), err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("seek hole in %s: %w", f.Name(), err)
		}
		// Whole zeroBlocks, so a block is always read and hashed as one
		// piece whatever the filesystem's own block size.
		start := data / zeroBlock * zeroBlock
		end := min((hole+zeroBlock-1)/zeroBlock*zeroBlock, size)
		if n := len(exts); n > 0 && exts[n-1].off+exts[n-1].len >= start {
			exts[n-1].len = max(exts[n-1].len, end-exts[n-1].off)
		} else if end > start {
			exts = append(exts, extent{start, end - start})
		}
		off = end
	}
	return exts, nil
}

// digest hashes a file's content as its non-zero zeroBlocks, each with
// its offset: two files with the same size and content have the same
// digest however their data extents lie (holes and blocks of zeros are
// alike).
type digest struct{ h hash.Hash }

func newDigest() *digest { return &digest{sha256.New()} }

// add hashes buf, read at off (a multiple of zeroBlock).
func (d *digest) add(buf []byte, off int64) {
	for start := 0; start < len(buf); start += zeroBlock {
		b := buf[start:min(start+zeroBlock, len(buf))]
		if allZero(b) {
			continue
		}
		var hdr [8]byte
		binary.LittleEndian.PutUint64(hdr[:], uint64(off)+uint64(start))
		d.h.Write(hdr[:])
		d.h.Write(b)
	}
}

func (d *digest) sum() string { return hex.EncodeToString(d.h.Sum(nil)) }

// digestOf hashes f's content in exts, which cover all its data.
func digestOf(ctx context.Context, f *os.File, exts []extent) (string, error) {
	d := newDigest()
	buf := make([]byte, copyChunk)
	for _, e := range exts {
		for off := e.off; off < e.off+e.len; {
			if err := ctx.Err(); err != nil {
				return "", err
			}
			n := min(int64(len(buf)), e.off+e.len-off)
			if _, err := f.ReadAt(buf[:n], off); err != nil {
				return "", err
			}
			d.add(buf[:n], off)
			off += n
		}
	}
	return d.sum(), nil
}

// fileDigest hashes all of f's content.
func fileDigest(ctx context.Context, f *os.File, size int64) (string, error) {
	exts, err := dataExtents(f, size)
	if err != nil {
		return "", err
	}
	return digestOf(ctx, f, exts)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
