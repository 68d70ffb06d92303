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
	// Digest is the SHA-256 over the source's data extents (offset,
	// length, bytes each), read back from the copy: equal digests of
	// source and copy say the copy holds what the source holds.
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

	want, err := digestOf(ctx, in, exts)
	if err != nil {
		return CopyResult{}, err
	}
	if done, err := m.copyInPlace(ctx, dstPath, fi.Size(), exts, want); err != nil || done {
		if done {
			report(total)
			st, err := Stat(dstPath)
			return CopyResult{Status: st, Digest: want, CopiedBytes: total}, err
		}
		return CopyResult{}, err
	}
	if err := os.Mkdir(filepath.Dir(dstPath), 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return CopyResult{}, err
	}
	if err := copyTo(ctx, in, tempName(dstPath), fi.Size(), exts, want, report); err != nil {
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
	return CopyResult{Status: st, Digest: want, CopiedBytes: total}, err
}

// copyInPlace reports whether dstPath already holds the source's content
// (an earlier copy finished but its answer was lost).
func (m *Manager) copyInPlace(ctx context.Context, dstPath string, size int64, exts []extent, want string) (bool, error) {
	out, err := os.Open(dstPath)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer out.Close()
	fi, err := out.Stat()
	if err != nil || fi.Size() != size {
		return false, err
	}
	if pending, err := exists(growMarker(dstPath)); err != nil || pending {
		return false, err
	}
	// The source's holes must be zeros in dst as well: dst's data extents
	// must lie within the source's, or hold only zeros outside them.
	got, err := digestOf(ctx, out, exts)
	if err != nil || got != want {
		return false, err
	}
	dexts, err := dataExtents(out, size)
	if err != nil {
		return false, err
	}
	return zerosOutside(out, dexts, exts)
}

// copyTo writes a fresh sparse copy of in's extents to tmp, reads it back
// to compare digests, and syncs it.
func copyTo(ctx context.Context, in *os.File, tmp string, size int64, exts []extent, want string, report func(uint64)) (err error) {
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	out, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
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
		return err
	}
	buf := make([]byte, copyChunk)
	var copied uint64
	report(0)
	for _, e := range exts {
		for off := e.off; off < e.off+e.len; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(int64(len(buf)), e.off+e.len-off)
			if _, err := in.ReadAt(buf[:n], off); err != nil {
				return err
			}
			if err := writeNonZero(out, buf[:n], off); err != nil {
				return err
			}
			off += n
			copied += uint64(n)
			report(copied)
		}
	}
	got, err := digestOf(ctx, out, exts)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("copy of %s does not match its source (digest %s, want %s)", filepath.Base(tmp), got, want)
	}
	return out.Sync()
}

// writeNonZero writes buf at off, leaving blocks of zeros unwritten.
func writeNonZero(out *os.File, buf []byte, off int64) error {
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
		hole = min(hole, size)
		if hole > data {
			exts = append(exts, extent{data, hole - data})
		}
		off = hole
	}
	return exts, nil
}

// digestOf hashes f's bytes in exts, each with its offset and length.
func digestOf(ctx context.Context, f *os.File, exts []extent) (string, error) {
	h := sha256.New()
	buf := make([]byte, copyChunk)
	for _, e := range exts {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		var hdr [16]byte
		binary.LittleEndian.PutUint64(hdr[:8], uint64(e.off))
		binary.LittleEndian.PutUint64(hdr[8:], uint64(e.len))
		h.Write(hdr[:])
		if err := hashRange(h, f, e, buf); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashRange(h hash.Hash, f *os.File, e extent, buf []byte) error {
	_, err := io.CopyBuffer(h, io.NewSectionReader(f, e.off, e.len), buf)
	return err
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// zerosOutside reports whether f's extents in have hold zeros wherever they
// lie outside want.
func zerosOutside(f *os.File, have, want []extent) (bool, error) {
	buf := make([]byte, copyChunk)
	for _, e := range have {
		for _, gap := range subtract(e, want) {
			for off := gap.off; off < gap.off+gap.len; {
				n := min(int64(len(buf)), gap.off+gap.len-off)
				if _, err := f.ReadAt(buf[:n], off); err != nil {
					return false, err
				}
				if !allZero(buf[:n]) {
					return false, nil
				}
				off += n
			}
		}
	}
	return true, nil
}

// subtract is e less the sorted, disjoint extents of want.
func subtract(e extent, want []extent) []extent {
	var out []extent
	cur := e.off
	end := e.off + e.len
	for _, w := range want {
		wend := w.off + w.len
		if wend <= cur || w.off >= end {
			continue
		}
		if w.off > cur {
			out = append(out, extent{cur, w.off - cur})
		}
		cur = max(cur, wend)
	}
	if cur < end {
		out = append(out, extent{cur, end - cur})
	}
	return out
}
