package guest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
)

// File calls (kibotos.ctrl.v1.FileService's rules, served to ctrl through
// the node). Paths are absolute guest paths under Agent.Root; every call
// runs with its user's file-system identity (asUser).

// readChunk is the size of ReadFile's chunks (the API allows up to 1 MiB).
const readChunk = 256 << 10

// maxPath is the longest path the API accepts.
const maxPath = 4096

// codeErr is a Connect error carrying the API's ErrorDetail (reason, and
// field when one is at fault); ctrl adds its stage.
func codeErr(code connect.Code, reason ctrlv1.FailureReason, field, format string, args ...any) *connect.Error {
	err := connect.NewError(code, fmt.Errorf(format, args...))
	if d, derr := connect.NewErrorDetail(&ctrlv1.ErrorDetail{Reason: reason, Field: field}); derr == nil {
		err.AddDetail(d)
	}
	return err
}

func invalid(field, format string, args ...any) *connect.Error {
	return codeErr(connect.CodeInvalidArgument, ctrlv1.FailureReason_FAILURE_REASON_INVALID_REQUEST, field, "%s: %s", field, fmt.Sprintf(format, args...))
}

// fsError turns a file-system error on field's path into the API's code.
func fsError(field string, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return connect.NewError(connect.CodeInternal, err)
	}
	msg := err.Error()
	switch errno {
	case unix.ENOENT:
		return codeErr(connect.CodeNotFound, ctrlv1.FailureReason_FAILURE_REASON_NOT_FOUND, field, "%s", msg)
	case unix.EEXIST:
		return codeErr(connect.CodeAlreadyExists, ctrlv1.FailureReason_FAILURE_REASON_CONFLICT, field, "%s", msg)
	case unix.EACCES, unix.EPERM:
		return codeErr(connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED, field, "%s", msg)
	case unix.EISDIR, unix.ENOTDIR, unix.ENOTEMPTY, unix.EROFS, unix.EBUSY, unix.ELOOP, unix.ETXTBSY:
		return codeErr(connect.CodeFailedPrecondition, ctrlv1.FailureReason_FAILURE_REASON_CONFLICT, field, "%s", msg)
	case unix.ENOSPC, unix.EDQUOT, unix.EFBIG:
		return codeErr(connect.CodeResourceExhausted, ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED, field, "%s", msg)
	case unix.ENAMETOOLONG, unix.EINVAL:
		return invalid(field, "%s", msg)
	case unix.EIO:
		// The guest's storage failed the read or write: not the agent's
		// bug (internal), and a retry may not help.
		return codeErr(connect.CodeDataLoss, ctrlv1.FailureReason_FAILURE_REASON_UNAVAILABLE, field, "%s", msg)
	}
	return connect.NewError(connect.CodeInternal, err)
}

// guestPath checks that p is an absolute guest path in clean form and
// returns where it is under the root. A path whose links resolve outside
// the root (possible only when the root is not /) is invalid too.
func (a *Agent) guestPath(field, p string) (string, error) {
	switch {
	case p == "":
		return "", invalid(field, "is required")
	case len(p) > maxPath:
		return "", invalid(field, "is longer than %d bytes", maxPath)
	case !utf8.ValidString(p) || strings.ContainsRune(p, 0):
		return "", invalid(field, "is not valid UTF-8 without NUL")
	case !strings.HasPrefix(p, "/"):
		return "", invalid(field, "%q is not absolute", p)
	case path.Clean(p) != p:
		return "", invalid(field, "%q is not in clean form (no empty, \".\" or \"..\" component, no trailing slash)", p)
	}
	root := a.root()
	if root == "/" {
		return p, nil
	}
	host := filepath.Join(root, p)
	if err := a.staysInside(field, host); err != nil {
		return "", err
	}
	return host, nil
}

// staysInside checks that host, links resolved, is under the root: its
// existing part, and where a create through it lands. A link whose target
// does not exist (yet) is followed too, since creating through it makes
// its target.
func (a *Agent) staysInside(field, host string) error {
	root, err := filepath.EvalSymlinks(a.root())
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	existing := host
	for hops := 0; ; {
		resolved, err := filepath.EvalSymlinks(existing)
		if err == nil {
			if resolved != root && !strings.HasPrefix(resolved, root+"/") {
				return invalid(field, "resolves outside the guest's root")
			}
			return nil
		}
		if target, lerr := os.Readlink(existing); lerr == nil {
			if hops++; hops > 40 {
				return invalid(field, "has too many levels of symbolic links")
			}
			if !strings.HasPrefix(target, "/") {
				dir, err := filepath.EvalSymlinks(parentOf(existing))
				if err != nil {
					return connect.NewError(connect.CodeInternal, err)
				}
				target = dir + "/" + target
			}
			existing = target
			continue
		}
		parent := parentOf(existing)
		if parent == existing {
			return nil
		}
		existing = parent
	}
}

// parentOf is p without its last component, not cleaned: a ".." a link's
// target put in p stays for EvalSymlinks to resolve after the links
// before it.
func parentOf(p string) string {
	p = strings.TrimRight(p, "/")
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// guestName is host's path as the guest names it.
func (a *Agent) guestName(host string) string {
	root := a.root()
	if root == "/" {
		return host
	}
	rel, err := filepath.Rel(root, host)
	if err != nil || rel == "." {
		return "/"
	}
	return "/" + rel
}

// fileInfo describes host as the API does; name is the path as named.
func (a *Agent) fileInfo(name string, fi os.FileInfo, owners, groups map[uint32]string) *ctrlv1.FileInfo {
	info := &ctrlv1.FileInfo{
		Path:       name,
		Name:       path.Base(name),
		SizeBytes:  uint64(fi.Size()),
		Mode:       uint32(fi.Mode().Perm()),
		ModifiedAt: timestamppb.New(fi.ModTime()),
	}
	if fi.Mode()&fs.ModeSetuid != 0 {
		info.Mode |= 0o4000
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		info.Mode |= 0o2000
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		info.Mode |= 0o1000
	}
	switch {
	case fi.Mode().IsRegular():
		info.Type = ctrlv1.FileType_FILE_TYPE_REGULAR
	case fi.IsDir():
		info.Type = ctrlv1.FileType_FILE_TYPE_DIRECTORY
	case fi.Mode()&fs.ModeSymlink != 0:
		info.Type = ctrlv1.FileType_FILE_TYPE_SYMLINK
	default:
		info.Type = ctrlv1.FileType_FILE_TYPE_OTHER
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.Uid, info.Gid = st.Uid, st.Gid
		if owners == nil {
			owners, groups = a.names("etc/passwd"), a.names("etc/group")
		}
		info.Owner, info.Group = owners[st.Uid], groups[st.Gid]
	}
	return info
}

// stat describes the guest path name at host, without following a final
// link.
func (a *Agent) stat(name, host string) (*ctrlv1.FileInfo, error) {
	fi, err := os.Lstat(host)
	if err != nil {
		return nil, err
	}
	info := a.fileInfo(name, fi, nil, nil)
	if info.Type == ctrlv1.FileType_FILE_TYPE_SYMLINK {
		info.SymlinkTarget, _ = os.Readlink(host)
	}
	return info, nil
}

// ReadFile streams a regular file.
func (a *Agent) ReadFile(ctx context.Context, req *connect.Request[guestv1.ReadFileRequest], out *connect.ServerStream[guestv1.ReadFileResponse]) error {
	r := req.Msg.GetRequest()
	host, err := a.guestPath("path", r.GetPath())
	if err != nil {
		return err
	}
	if err := checkReadRange(r); err != nil {
		return err
	}
	u, err := a.lookupUser("user", r.GetUser())
	if err != nil {
		return err
	}
	var f *os.File
	if err := asUser(u, func() (err error) { f, err = os.Open(host); return err }); err != nil {
		return fsError("path", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fsError("path", err)
	}
	if fi.IsDir() {
		return fsError("path", &fs.PathError{Op: "read", Path: r.GetPath(), Err: unix.EISDIR})
	}
	if err := out.Send(&guestv1.ReadFileResponse{Response: &ctrlv1.ReadFileResponse{Info: a.fileInfo(r.GetPath(), fi, nil, nil), Offset: r.GetOffset()}}); err != nil {
		return err
	}
	return sendFile(ctx, f, r.GetOffset(), readLimit(r.GetLength(), fi.Size()), r.GetLength() == 0, out)
}

// ReadToEndSlack bounds a ReadFile without length: it reads to the end,
// but at most this far past the size the file had when it was opened. A
// file that grows while it is read, or never ends (/dev/zero, a pipe),
// ends the call with out_of_range there instead of streaming for ever.
// Documented in file.proto (ReadFileRequest.length) and RELIABILITY.md.
const ReadToEndSlack = 64 << 20

// checkReadRange refuses numbers the agent cannot seek or count to: both
// are uint64 on the wire, files are at most MaxInt64 bytes.
func checkReadRange(r *ctrlv1.ReadFileRequest) error {
	if r.GetOffset() > math.MaxInt64 {
		return invalid("offset", "%d is past the largest file offset, %d", r.GetOffset(), int64(math.MaxInt64))
	}
	if r.GetLength() > math.MaxInt64 {
		return invalid("length", "%d is more than the most a read can return, %d", r.GetLength(), int64(math.MaxInt64))
	}
	return nil
}

// readLimit is the most bytes a read sends: length, or without one the
// size at open plus ReadToEndSlack.
func readLimit(length uint64, size int64) int64 {
	if length > 0 {
		return int64(length)
	}
	return max(size, 0) + ReadToEndSlack
}

// sendFile streams limit bytes of f from offset, in chunks. capped says
// limit is ReadToEndSlack's: reaching it with more to read is out_of_range.
func sendFile(ctx context.Context, f *os.File, offset uint64, limit int64, capped bool, out *connect.ServerStream[guestv1.ReadFileResponse]) error {
	src := io.LimitReader(io.NewSectionReader(f, int64(offset), math.MaxInt64-int64(offset)), limit)
	buf := make([]byte, readChunk)
	for sent := int64(0); ctx.Err() == nil; {
		n, err := io.ReadFull(src, buf)
		if n > 0 {
			if err := out.Send(&guestv1.ReadFileResponse{Response: &ctrlv1.ReadFileResponse{Offset: offset, Data: buf[:n]}}); err != nil {
				return err
			}
			offset += uint64(n)
			sent += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if capped && sent == limit && moreAt(f, offset) {
				return codeErr(connect.CodeOutOfRange, ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED, "length",
					"the file went on past %d bytes (its size when opened plus %d): read it in ranges with offset and length", limit, ReadToEndSlack)
			}
			return nil
		}
		if err != nil {
			return fsError("path", err)
		}
	}
	return ctx.Err()
}

// moreAt says whether f has a byte at offset.
func moreAt(f *os.File, offset uint64) bool {
	var b [1]byte
	n, _ := f.ReadAt(b[:], int64(offset))
	return n > 0
}

// WriteFile writes a client stream to a file: atomically through a
// temporary file in the same directory, or appending as bytes arrive.
func (a *Agent) WriteFile(ctx context.Context, in *connect.ClientStream[guestv1.WriteFileRequest]) (*connect.Response[guestv1.WriteFileResponse], error) {
	if !in.Receive() {
		if err := in.Err(); err != nil {
			return nil, err
		}
		return nil, invalid("header", "the stream carried no message")
	}
	h := in.Msg().GetRequest().GetHeader()
	if h == nil {
		return nil, invalid("header", "the first message must carry the header")
	}
	w, err := a.newWrite(h)
	if err != nil {
		return nil, err
	}
	var res *ctrlv1.WriteFileResponse
	err = asUser(w.user, func() error {
		if err := w.open(); err != nil {
			return err
		}
		defer w.abort()
		for in.Receive() {
			if in.Msg().GetRequest().GetHeader() != nil {
				return invalid("header", "only the first message carries a header")
			}
			if err := w.write(in.Msg().GetRequest().GetData()); err != nil {
				return err
			}
		}
		if err := in.Err(); err != nil {
			return err
		}
		var err error
		res, err = w.commit(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&guestv1.WriteFileResponse{Response: res}), nil
}

// fileWrite is one WriteFile in progress.
type fileWrite struct {
	a       *Agent
	h       *ctrlv1.WriteFileHeader
	user    *User
	host    string
	f       *os.File
	tmp     string // the temporary file; empty when appending
	written uint64
}

func (a *Agent) newWrite(h *ctrlv1.WriteFileHeader) (*fileWrite, error) {
	host, err := a.guestPath("header.path", h.GetPath())
	if err != nil {
		return nil, err
	}
	if h.GetPath() == "/" {
		return nil, invalid("header.path", "/ is a directory")
	}
	if h.GetAppend() && h.GetExclusive() {
		return nil, invalid("header.exclusive", "cannot be combined with append")
	}
	if h.GetMode() > 0o7777 {
		return nil, invalid("header.mode", "%#o has bits beyond the permission bits", h.GetMode())
	}
	u, err := a.lookupUser("header.user", h.GetUser())
	if err != nil {
		return nil, err
	}
	return &fileWrite{a: a, h: h, user: u, host: host}, nil
}

func (w *fileWrite) mode() os.FileMode {
	if w.h.GetMode() == 0 {
		return 0o644
	}
	return unixMode(w.h.GetMode())
}

// unixMode is permission bits as Go's FileMode.
func unixMode(m uint32) os.FileMode {
	mode := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

// open makes the parents (when asked), checks the path and opens the file
// the bytes go to.
func (w *fileWrite) open() error {
	dir := filepath.Dir(w.host)
	if w.h.GetCreateParents() {
		// "(mode 0o755)": exactly, whatever the umask (mkdirParents).
		if err := mkdirParents(dir, 0o755); err != nil {
			return fsError("header.path", err)
		}
	}
	if !w.h.GetExclusive() {
		// "Symbolic links are followed": the bytes replace the link's
		// target, and the link stays (renaming over it would replace it).
		// An exclusive write fails on a link, as open(2) with O_EXCL does.
		target, err := linkTarget(w.host)
		if err != nil {
			return fsError("header.path", err)
		}
		w.host, dir = target, filepath.Dir(target)
	}
	fi, err := os.Stat(w.host)
	switch {
	case err == nil && fi.IsDir():
		return fsError("header.path", &fs.PathError{Op: "write", Path: w.h.GetPath(), Err: unix.EISDIR})
	case err == nil && w.h.GetExclusive():
		return fsError("header.path", &fs.PathError{Op: "write", Path: w.h.GetPath(), Err: unix.EEXIST})
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fsError("header.path", err)
	}
	if w.h.GetAppend() {
		w.f, err = os.OpenFile(w.host, os.O_WRONLY|os.O_APPEND|os.O_CREATE, w.mode())
		if err == nil && os.IsNotExist(statErr(fi)) {
			err = w.f.Chmod(w.mode()) // not the umask's
		}
		return fsError("header.path", err)
	}
	if fi != nil {
		if err := w.mayReplace(dir, fi); err != nil {
			return err
		}
	}
	w.f, err = os.CreateTemp(dir, ".kibotos-write-*")
	if errors.Is(err, fs.ErrPermission) {
		return codeErr(connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED, "header.path",
			"user %s may not create files in directory %s, where a write without append makes the temporary file it renames over %s (so that no reader sees a partial file)",
			w.user.Name, w.a.guestName(dir), w.h.GetPath())
	}
	if err != nil {
		return fsError("header.path", err)
	}
	w.tmp = w.f.Name()
	mode := w.mode()
	if fi != nil {
		mode = fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		if err := giveOwner(w.f.Chown, fi); err != nil {
			return fsError("header.path", err)
		}
	}
	// After the owner: a chown clears the set-id bits.
	return fsError("header.path", w.f.Chmod(mode))
}

// mayReplace checks, as the writing user, what replacing the existing
// file fi at w.host needs besides creating the temporary file in dir
// (designed here, file.proto's WriteFile): write permission on the file,
// which writing it in place would need too, and in a sticky directory
// owning the file or the directory, as rename(2) does there. Checked
// before any byte arrives, so a refusal writes nothing.
func (w *fileWrite) mayReplace(dir string, fi fs.FileInfo) error {
	// faccessat2 with AT_EACCESS judges as the file-system identity
	// asUser took; a kernel without it (before 5.8) leaves the check to
	// the rename.
	err := unix.Faccessat2(unix.AT_FDCWD, w.host, unix.W_OK, unix.AT_EACCESS)
	switch {
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
		return codeErr(connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED, "header.path",
			"user %s may not write %s", w.user.Name, w.h.GetPath())
	case err != nil && !errors.Is(err, unix.ENOSYS):
		return fsError("header.path", &fs.PathError{Op: "write", Path: w.h.GetPath(), Err: err})
	}
	dirInfo, err := os.Stat(dir)
	if err != nil {
		return fsError("header.path", err)
	}
	file, ok1 := fi.Sys().(*syscall.Stat_t)
	parent, ok2 := dirInfo.Sys().(*syscall.Stat_t)
	if uid := w.user.UID; ok1 && ok2 && dirInfo.Mode()&fs.ModeSticky != 0 && uid != 0 && file.Uid != uid && parent.Uid != uid {
		return codeErr(connect.CodePermissionDenied, ctrlv1.FailureReason_FAILURE_REASON_PERMISSION_DENIED, "header.path",
			"user %s may not replace %s: its directory %s is sticky and the user owns neither, and a write without append renames a new file over it",
			w.user.Name, w.h.GetPath(), w.a.guestName(dir))
	}
	return nil
}

// giveOwner gives a file, through chown, fi's owner and group where the
// writer may (root always; another user keeps a group it belongs to), as
// writing over fi in place, or mv(1), would have left them. (designed
// here) Otherwise it stays the writer's: only root gives a file away.
func giveOwner(chown func(uid, gid int) error, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	err := chown(int(st.Uid), int(st.Gid))
	if errors.Is(err, fs.ErrPermission) {
		err = chown(-1, int(st.Gid))
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil
	}
	return err
}

// linkTarget is where host leads once its last component's symbolic
// links are followed (staysInside checked it is inside the root); host
// itself when it is not a link. A link whose target does not exist leads
// to that target: a write creates it.
func linkTarget(host string) (string, error) {
	for hops := 0; ; hops++ {
		fi, err := os.Lstat(host)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return host, nil
		}
		if hops == 40 {
			return "", &fs.PathError{Op: "write", Path: host, Err: unix.ELOOP}
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(host), target)
		}
		host = target
	}
}

func statErr(fi os.FileInfo) error {
	if fi == nil {
		return fs.ErrNotExist
	}
	return nil
}

// maxWriteChunk is the most a WriteFile data message carries ("data is at
// most 1 MiB per message").
const maxWriteChunk = 1 << 20

func (w *fileWrite) write(b []byte) error {
	if len(b) > maxWriteChunk {
		return invalid("data", "is at most %d bytes per message, not %d", maxWriteChunk, len(b))
	}
	if n := w.h.SizeBytes; n != nil && w.written+uint64(len(b)) > *n {
		return invalid("header.size_bytes", "the stream carries more than %d bytes", *n)
	}
	if _, err := w.f.Write(b); err != nil {
		return fsError("header.path", err)
	}
	w.written += uint64(len(b))
	return nil
}

// commit puts the written file in place, unless the call was cancelled
// meanwhile: a client that cancels and then closes its stream may send
// its end before the cancellation, and the last look at ctx, just before
// the rename, keeps the old file for a cancellation that has arrived by
// then.
func (w *fileWrite) commit(ctx context.Context) (*ctrlv1.WriteFileResponse, error) {
	if n := w.h.SizeBytes; n != nil && w.written != *n {
		return nil, invalid("header.size_bytes", "the stream carried %d bytes, not %d", w.written, *n)
	}
	if err := w.f.Sync(); err != nil {
		return nil, fsError("header.path", err)
	}
	if err := w.f.Close(); err != nil {
		return nil, fsError("header.path", err)
	}
	w.f = nil
	if w.tmp != "" {
		if err := ctx.Err(); err != nil {
			return nil, connect.NewError(connect.CodeCanceled, err)
		}
		var err error
		if w.h.GetExclusive() {
			// link(2) fails if the path appeared meanwhile; rename would
			// replace it.
			if err = os.Link(w.tmp, w.host); err == nil {
				_ = os.Remove(w.tmp)
			}
		} else {
			err = os.Rename(w.tmp, w.host)
		}
		if err != nil {
			return nil, fsError("header.path", err)
		}
		w.tmp = ""
	}
	info, err := w.a.stat(w.h.GetPath(), w.host)
	if err != nil {
		return nil, fsError("header.path", err)
	}
	return &ctrlv1.WriteFileResponse{Info: info, WrittenBytes: w.written}, nil
}

// abort leaves the old file as it was after a failed or cancelled write.
func (w *fileWrite) abort() {
	if w.f != nil {
		_ = w.f.Close()
	}
	if w.tmp != "" {
		_ = os.Remove(w.tmp)
	}
}

// StatFile reads one path's metadata.
func (a *Agent) StatFile(_ context.Context, req *connect.Request[guestv1.StatFileRequest]) (*connect.Response[guestv1.StatFileResponse], error) {
	r := req.Msg.GetRequest()
	host, err := a.guestPath("path", r.GetPath())
	if err != nil {
		return nil, err
	}
	u, err := a.lookupUser("user", r.GetUser())
	if err != nil {
		return nil, err
	}
	var info *ctrlv1.FileInfo
	err = asUser(u, func() error {
		if !r.GetFollowSymlinks() {
			info, err = a.stat(r.GetPath(), host)
			return err
		}
		fi, err := os.Stat(host)
		if err == nil {
			info = a.fileInfo(r.GetPath(), fi, nil, nil)
		}
		return err
	})
	if err != nil {
		return nil, fsError("path", err)
	}
	return connect.NewResponse(&guestv1.StatFileResponse{Response: &ctrlv1.StatFileResponse{Info: info}}), nil
}

// Listing limits (ListDirectoryRequest).
const (
	maxListDepth    = 16
	defaultPageSize = 1000
	maxPageSize     = 10000
)

// pageToken binds a page to the request that made it and says where the
// next page starts.
type pageToken struct {
	Path     string `json:"p"`
	Depth    uint32 `json:"d"`
	PageSize uint32 `json:"s"`
	User     string `json:"u"`
	After    string `json:"a"`
}

// ListDirectory lists a directory's entries, to a depth, sorted by path.
func (a *Agent) ListDirectory(_ context.Context, req *connect.Request[guestv1.ListDirectoryRequest]) (*connect.Response[guestv1.ListDirectoryResponse], error) {
	r := req.Msg.GetRequest()
	host, err := a.guestPath("path", r.GetPath())
	if err != nil {
		return nil, err
	}
	depth := max(r.GetDepth(), 1)
	if depth > maxListDepth {
		return nil, invalid("depth", "is at most %d", maxListDepth)
	}
	size := r.GetPageSize()
	if size == 0 {
		size = defaultPageSize
	}
	if size > maxPageSize {
		return nil, invalid("page_size", "is at most %d", maxPageSize)
	}
	want := pageToken{Path: r.GetPath(), Depth: r.GetDepth(), PageSize: r.GetPageSize(), User: r.GetUser()}
	if t := r.GetPageToken(); t != "" {
		var got pageToken
		b, err := base64.RawURLEncoding.DecodeString(t)
		if err != nil || json.Unmarshal(b, &got) != nil {
			return nil, invalid("page_token", "is not one this call returned")
		}
		if want.After = got.After; got != want {
			return nil, invalid("page_token", "was made for other request fields")
		}
	}
	u, err := a.lookupUser("user", r.GetUser())
	if err != nil {
		return nil, err
	}
	var res ctrlv1.ListDirectoryResponse
	err = asUser(u, func() error {
		fi, err := os.Stat(host)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return &fs.PathError{Op: "list", Path: r.GetPath(), Err: unix.ENOTDIR}
		}
		entries, err := a.walk(r.GetPath(), host, int(depth))
		if err != nil {
			return err
		}
		start, _ := slices.BinarySearchFunc(entries, want.After, func(e *ctrlv1.FileInfo, after string) int {
			if e.GetPath() <= after {
				return -1
			}
			return 1
		})
		if want.After == "" {
			start = 0
		}
		end := min(start+int(size), len(entries))
		res.Entries = entries[start:end]
		if end < len(entries) {
			want.After = entries[end-1].GetPath()
			b, _ := json.Marshal(want)
			res.NextPageToken = base64.RawURLEncoding.EncodeToString(b)
		}
		return nil
	})
	if err != nil {
		return nil, fsError("path", err)
	}
	return connect.NewResponse(&guestv1.ListDirectoryResponse{Response: &res}), nil
}

// walk lists the entries under dir to depth levels, sorted by path, never
// following links.
func (a *Agent) walk(name, host string, depth int) ([]*ctrlv1.FileInfo, error) {
	owners, groups := a.names("etc/passwd"), a.names("etc/group")
	var out []*ctrlv1.FileInfo
	var visit func(name, host string, level int) error
	visit = func(name, host string, level int) error {
		des, err := os.ReadDir(host)
		if err != nil {
			if level > 1 && (errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist)) {
				return nil // a subdirectory the user may not read, or one gone meanwhile
			}
			return err
		}
		for _, de := range des {
			childName, childHost := path.Join(name, de.Name()), filepath.Join(host, de.Name())
			fi, err := de.Info()
			if err != nil {
				continue // gone meanwhile
			}
			info := a.fileInfo(childName, fi, owners, groups)
			if info.Type == ctrlv1.FileType_FILE_TYPE_SYMLINK {
				info.SymlinkTarget, _ = os.Readlink(childHost)
			}
			out = append(out, info)
			if level < depth && de.IsDir() {
				if err := visit(childName, childHost, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := visit(name, host, 1); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(x, y *ctrlv1.FileInfo) int { return strings.Compare(x.GetPath(), y.GetPath()) })
	return out, nil
}

// MakeDirectory creates a directory (with its parents when asked).
func (a *Agent) MakeDirectory(_ context.Context, req *connect.Request[guestv1.MakeDirectoryRequest]) (*connect.Response[guestv1.MakeDirectoryResponse], error) {
	r := req.Msg.GetRequest()
	host, err := a.guestPath("path", r.GetPath())
	if err != nil {
		return nil, err
	}
	if r.GetMode() > 0o7777 {
		return nil, invalid("mode", "%#o has bits beyond the permission bits", r.GetMode())
	}
	mode := os.FileMode(0o755)
	if r.GetMode() != 0 {
		mode = unixMode(r.GetMode())
	}
	u, err := a.lookupUser("user", r.GetUser())
	if err != nil {
		return nil, err
	}
	var info *ctrlv1.FileInfo
	err = asUser(u, func() error {
		if r.GetCreateParents() {
			if fi, err := os.Stat(host); err == nil && fi.IsDir() {
				info, err = a.stat(r.GetPath(), host)
				return err
			}
			if err := mkdirParents(filepath.Dir(host), mode); err != nil {
				return err
			}
		}
		if err := os.Mkdir(host, mode); err != nil {
			return err
		}
		// The mode asked for, not the umask's.
		if err := os.Chmod(host, mode); err != nil {
			return err
		}
		info, err = a.stat(r.GetPath(), host)
		return err
	})
	if err != nil {
		return nil, fsError("path", err)
	}
	return connect.NewResponse(&guestv1.MakeDirectoryResponse{Response: &ctrlv1.MakeDirectoryResponse{Info: info}}), nil
}

// mkdirParents makes dir and its missing parents, each with mode exactly
// ("the permission bits of each directory created": os.MkdirAll leaves
// them narrowed by the umask). Existing ones are left as they are.
func mkdirParents(dir string, mode os.FileMode) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: unix.ENOTDIR}
		}
		return nil
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := mkdirParents(parent, mode); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return os.Chmod(dir, mode)
}

// MoveFile renames a path: one rename(2) within a filesystem, a copy and a
// delete across filesystems.
func (a *Agent) MoveFile(_ context.Context, req *connect.Request[guestv1.MoveFileRequest]) (*connect.Response[guestv1.MoveFileResponse], error) {
	r := req.Msg.GetRequest()
	src, err := a.guestPath("source_path", r.GetSourcePath())
	if err != nil {
		return nil, err
	}
	dst, err := a.guestPath("destination_path", r.GetDestinationPath())
	if err != nil {
		return nil, err
	}
	if r.GetSourcePath() == "/" {
		return nil, invalid("source_path", "/ cannot be moved")
	}
	if r.GetDestinationPath() == "/" || strings.HasPrefix(r.GetDestinationPath(), r.GetSourcePath()+"/") {
		return nil, invalid("destination_path", "%q is inside the source %q", r.GetDestinationPath(), r.GetSourcePath())
	}
	u, err := a.lookupUser("user", r.GetUser())
	if err != nil {
		return nil, err
	}
	var info *ctrlv1.FileInfo
	field := "source_path"
	err = asUser(u, func() error {
		if _, err := os.Lstat(src); err != nil {
			return err
		}
		field = "destination_path"
		if r.GetCreateParents() {
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
		}
		if err := move(src, dst, r.GetOverwrite()); err != nil {
			return err
		}
		info, err = a.stat(r.GetDestinationPath(), dst)
		return err
	})
	if err != nil {
		return nil, fsError(field, err)
	}
	return connect.NewResponse(&guestv1.MoveFileResponse{Response: &ctrlv1.MoveFileResponse{Info: info}}), nil
}

// move renames src to dst; without overwrite an existing dst is EEXIST,
// decided by the kernel (RENAME_NOREPLACE) where the filesystem can.
func move(src, dst string, overwrite bool) error {
	var err error
	if overwrite {
		// rename(2) itself: Go's os.Rename refuses a directory
		// destination, which rename(2) replaces when it is empty.
		err = unix.Rename(src, dst)
		if err != nil {
			err = &os.LinkError{Op: "rename", Old: src, New: dst, Err: err}
		}
	} else {
		err = unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) {
			if _, serr := os.Lstat(dst); serr == nil {
				return &fs.PathError{Op: "move", Path: dst, Err: unix.EEXIST}
			}
			err = os.Rename(src, dst)
		}
	}
	if !errors.Is(err, unix.EXDEV) {
		return err
	}
	// Across filesystems: copy beside the destination, put the copy in
	// place with a rename (which replaces or refuses as above), then
	// delete the source. A copy that fails is removed whole, and nothing
	// at the destination is touched: the source is still whole.
	if _, err := os.Lstat(dst); err == nil && !overwrite {
		return &fs.PathError{Op: "move", Path: dst, Err: unix.EEXIST}
	}
	staging, err := os.MkdirTemp(filepath.Dir(dst), ".kibotos-move-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(staging)
	copied := filepath.Join(staging, "copy")
	if err := copyTree(src, copied); err != nil {
		return err
	}
	if err := move(copied, dst, overwrite); err != nil {
		return err
	}
	return os.RemoveAll(src)
}

// copyTree copies a file, link, directory tree or special file (a FIFO,
// a socket, a device: made again with mknod), keeping each one's mode,
// modification time, and owner and group where the mover may give them
// (giveOwner), as mv(1) does across file systems.
func copyTree(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
	case fi.IsDir():
		if err := os.Mkdir(dst, fi.Mode().Perm()); err != nil {
			return err
		}
		des, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, de := range des {
			if err := copyTree(filepath.Join(src, de.Name()), filepath.Join(dst, de.Name())); err != nil {
				return err
			}
		}
	case fi.Mode().IsRegular():
		if err := copyFile(src, dst, fi); err != nil {
			return err
		}
	default:
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return &fs.PathError{Op: "move", Path: src, Err: unix.EXDEV}
		}
		if err := unix.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			return &fs.PathError{Op: "mknod", Path: dst, Err: err}
		}
	}
	return keepMetadata(dst, fi)
}

func copyFile(src, dst string, fi fs.FileInfo) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// keepMetadata gives dst, a copy of fi, its owner and group where the
// mover may (giveOwner; first, since a chown clears the set-id bits), its mode and its
// modification time. A link has no mode of its own.
func keepMetadata(dst string, fi fs.FileInfo) error {
	if err := giveOwner(func(uid, gid int) error { return os.Lchown(dst, uid, gid) }, fi); err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		if err := os.Chmod(dst, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return err
		}
	}
	mtime := unix.NsecToTimespec(fi.ModTime().UnixNano())
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, []unix.Timespec{{Nsec: unix.UTIME_OMIT}, mtime}, unix.AT_SYMLINK_NOFOLLOW)
}

// DeleteFile removes a file, a link or a directory.
func (a *Agent) DeleteFile(_ context.Context, req *connect.Request[guestv1.DeleteFileRequest]) (*connect.Response[guestv1.DeleteFileResponse], error) {
	r := req.Msg.GetRequest()
	host, err := a.guestPath("path", r.GetPath())
	if err != nil {
		return nil, err
	}
	if r.GetPath() == "/" {
		return nil, invalid("path", "/ cannot be deleted")
	}
	u, err := a.lookupUser("user", r.GetUser())
	if err != nil {
		return nil, err
	}
	deleted := true
	err = asUser(u, func() error {
		fi, err := os.Lstat(host)
		if errors.Is(err, fs.ErrNotExist) && r.GetAllowMissing() {
			deleted = false
			return nil
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() || !r.GetRecursive() {
			return os.Remove(host)
		}
		if err := a.noMountBelow(host, r.GetPath()); err != nil {
			return err
		}
		if mountPoint(host, fi) {
			// A mount point (the Volume, /tmp, /run) is emptied and kept.
			return emptyDir(host)
		}
		return os.RemoveAll(host)
	})
	if err != nil {
		return nil, fsError("path", err)
	}
	return connect.NewResponse(&guestv1.DeleteFileResponse{Response: &ctrlv1.DeleteFileResponse{Deleted: deleted}}), nil
}

// noMountBelow refuses a recursive delete of directory host (guest path
// p) when a file system is mounted below it (the Volume, a tmpfs): the
// delete would empty that mount and then fail on its mount point, halfway
// (as rm -rf does). (designed here) A delete of the mount point itself
// empties it and keeps it.
func (a *Agent) noMountBelow(host, p string) error {
	mounts, err := mountPoints("/proc")
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(host)
	if err != nil {
		return err
	}
	var below []string
	for m := range mounts {
		if strings.HasPrefix(m, strings.TrimSuffix(real, "/")+"/") {
			below = append(below, m)
		}
	}
	if len(below) == 0 {
		return nil
	}
	slices.Sort(below)
	mount := path.Clean("/" + strings.TrimPrefix(below[0], strings.TrimSuffix(a.root(), "/")))
	return codeErr(connect.CodeFailedPrecondition, ctrlv1.FailureReason_FAILURE_REASON_CONFLICT, "path",
		"%s holds the mounted file system %s, which cannot be removed: a recursive delete of %s would empty it and then fail, so it deletes nothing (delete %s to empty it, and %s's other entries each)", p, mount, p, mount, p)
}

// mountPoint reports whether dir is on another device than its parent.
func mountPoint(dir string, fi os.FileInfo) bool {
	parent, err := os.Lstat(filepath.Dir(dir))
	if err != nil {
		return false
	}
	a, ok1 := fi.Sys().(*syscall.Stat_t)
	b, ok2 := parent.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && a.Dev != b.Dev
}

func emptyDir(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if err := os.RemoveAll(filepath.Join(dir, de.Name())); err != nil {
			return err
		}
	}
	return nil
}
