package guest

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
)

// WatchDirectory (FileService's rules) on inotify: one watch per
// directory, added for directories created under a recursive watch (and
// their entries reported as created, since they may predate the watch).

// watchMask is what every directory is watched for.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_DONT_FOLLOW | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// WatchDirectory streams the changes under a directory.
func (a *Agent) WatchDirectory(ctx context.Context, req *connect.Request[guestv1.WatchDirectoryRequest], out *connect.ServerStream[guestv1.WatchDirectoryResponse]) error {
	r := req.Msg.GetRequest()
	host, err := a.guestPath("path", r.GetPath())
	if err != nil {
		return err
	}
	u, err := a.lookupUser("user", r.GetUser())
	if err != nil {
		return err
	}
	w, err := a.newWatcher(u, r.GetPath(), host, r.GetRecursive())
	if err != nil {
		return err
	}
	defer w.close()
	send := func(m *ctrlv1.WatchDirectoryResponse) error {
		return out.Send(&guestv1.WatchDirectoryResponse{Response: m})
	}
	if err := send(&ctrlv1.WatchDirectoryResponse{Item: &ctrlv1.WatchDirectoryResponse_Started{Started: &ctrlv1.FileWatchStarted{}}}); err != nil {
		return err
	}
	events := make(chan []*ctrlv1.FileEvent, 16)
	readErr := make(chan error, 1)
	go func() { readErr <- w.read(events) }()
	idle := time.NewTimer(keepaliveEvery)
	defer idle.Stop()
	for {
		select {
		case batch := <-events:
			for _, ev := range batch {
				if err := send(&ctrlv1.WatchDirectoryResponse{Item: &ctrlv1.WatchDirectoryResponse_Event{Event: ev}}); err != nil {
					return err
				}
			}
			idle.Reset(keepaliveEvery)
		case err := <-readErr:
			// The watched directory went (its event is sent), or reading
			// failed.
			for len(events) > 0 {
				for _, ev := range <-events {
					if serr := send(&ctrlv1.WatchDirectoryResponse{Item: &ctrlv1.WatchDirectoryResponse_Event{Event: ev}}); serr != nil {
						return serr
					}
				}
			}
			if errors.Is(err, errWatchEnded) {
				return nil
			}
			return connect.NewError(connect.CodeInternal, err)
		case <-idle.C:
			if err := send(&ctrlv1.WatchDirectoryResponse{Item: &ctrlv1.WatchDirectoryResponse_Keepalive{Keepalive: &ctrlv1.FileWatchKeepalive{}}}); err != nil {
				return err
			}
			idle.Reset(keepaliveEvery)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// errWatchEnded is the end of a watch whose directory went.
var errWatchEnded = errors.New("the watched directory went")

// watcher is one inotify instance and the directories it watches.
type watcher struct {
	a         *Agent
	user      *User
	f         *os.File
	fd        int
	root      string // the watched guest path
	recursive bool

	mu   sync.Mutex
	dirs map[int32]watchedDir
}

type watchedDir struct{ name, host string }

func (a *Agent) newWatcher(u *User, name, host string, recursive bool) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, watchError(err)
	}
	// Through the runtime's poller, so that close ends a blocked read.
	w := &watcher{a: a, user: u, f: os.NewFile(uintptr(fd), "inotify"), fd: fd, root: name, recursive: recursive, dirs: map[int32]watchedDir{}}
	if err := w.add(name, host); err != nil {
		w.close()
		return nil, err
	}
	if recursive {
		if _, err := w.addBelow(name, host, false); err != nil {
			w.close()
			return nil, err
		}
	}
	return w, nil
}

func (w *watcher) close() { _ = w.f.Close() }

// watchError is an inotify failure as the API names it.
func watchError(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EMFILE) {
		return codeErr(connect.CodeResourceExhausted, ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED, "path", "the guest is out of watches: %v", err)
	}
	return fsError("path", err)
}

// add watches one directory.
func (w *watcher) add(name, host string) error {
	var wd int
	err := asUser(w.user, func() (err error) {
		wd, err = unix.InotifyAddWatch(w.fd, host, watchMask)
		return err
	})
	if err != nil {
		return watchError(&fs.PathError{Op: "watch", Path: name, Err: err})
	}
	w.mu.Lock()
	w.dirs[int32(wd)] = watchedDir{name: name, host: host}
	w.mu.Unlock()
	return nil
}

// addBelow watches the directories under one, never following links;
// with report it returns CREATED events for what it finds (entries made
// before their directory was watched).
func (w *watcher) addBelow(name, host string, report bool) ([]*ctrlv1.FileEvent, error) {
	var found []*ctrlv1.FileEvent
	err := filepath.WalkDir(host, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == host {
			return nil // gone meanwhile, or not readable: not watched
		}
		rel, _ := filepath.Rel(host, p)
		child := path.Join(name, filepath.ToSlash(rel))
		if report {
			found = append(found, w.event(ctrlv1.FileEventKind_FILE_EVENT_KIND_CREATED, child, p, d.IsDir()))
		}
		if d.IsDir() {
			if err := w.add(child, p); err != nil && connect.CodeOf(err) == connect.CodeResourceExhausted {
				return err
			}
		}
		return nil
	})
	return found, err
}

// event makes one event; the type comes from inotify for directories and
// from the path itself otherwise, while it is there.
func (w *watcher) event(kind ctrlv1.FileEventKind, name, host string, isDir bool) *ctrlv1.FileEvent {
	ev := &ctrlv1.FileEvent{Kind: kind, Path: name, ObservedAt: timestamppb.Now()}
	if isDir {
		ev.Type = ctrlv1.FileType_FILE_TYPE_DIRECTORY
	} else if fi, err := os.Lstat(host); err == nil {
		ev.Type = w.a.fileInfo(name, fi, map[uint32]string{}, map[uint32]string{}).GetType()
	}
	return ev
}

// rawEvent is one inotify record.
type rawEvent struct {
	wd     int32
	mask   uint32
	cookie uint32
	name   string
}

func parseEvents(b []byte) []rawEvent {
	var evs []rawEvent
	for len(b) >= unix.SizeofInotifyEvent {
		h := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(h.Len)
		if end > len(b) {
			break
		}
		name := string(bytes.TrimRight(b[unix.SizeofInotifyEvent:end], "\x00"))
		evs = append(evs, rawEvent{wd: h.Wd, mask: h.Mask, cookie: h.Cookie, name: name})
		b = b[end:]
	}
	return evs
}

// moveWait is how long a read that ended with an IN_MOVED_FROM waits for
// its IN_MOVED_TO: the kernel queues the two one after the other, and a
// read may fall between them.
const moveWait = 20 * time.Millisecond

// read turns inotify's records into events until the watched directory
// goes (errWatchEnded) or the watcher is closed.
func (w *watcher) read(events chan<- []*ctrlv1.FileEvent) error {
	buf := make([]byte, 64<<10)
	var moves movePairs
	for {
		if moves.waiting() {
			_ = w.f.SetReadDeadline(time.Now().Add(moveWait))
		}
		n, err := w.f.Read(buf)
		var raw []rawEvent
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			raw = moves.flush() // its IN_MOVED_TO never came: a move out
		case err != nil:
			return err
		default:
			raw = moves.next(parseEvents(buf[:n]))
		}
		_ = w.f.SetReadDeadline(time.Time{})
		batch, ended := w.translate(raw)
		if len(batch) > 0 {
			events <- batch
		}
		if ended {
			return errWatchEnded
		}
	}
}

// movePairs keeps a read's last record back when it is an IN_MOVED_FROM
// whose IN_MOVED_TO the read did not hold, so that the next read pairs
// them (translate) instead of reporting a move within the watch as
// DELETED and CREATED.
type movePairs struct{ held []rawEvent }

func (m *movePairs) waiting() bool { return len(m.held) > 0 }

// next is what to translate of raw, the records of one read, after the
// record held back: all of it but a last unpaired IN_MOVED_FROM, which it
// holds back in turn.
func (m *movePairs) next(raw []rawEvent) []rawEvent {
	raw = append(m.held, raw...)
	m.held = nil
	if len(raw) == 0 {
		return raw
	}
	if last := raw[len(raw)-1]; last.mask&unix.IN_MOVED_FROM != 0 {
		m.held = []rawEvent{last}
		return raw[:len(raw)-1]
	}
	return raw
}

// flush is the record held back, to translate alone.
func (m *movePairs) flush() []rawEvent {
	raw := m.held
	m.held = nil
	return raw
}

// translate makes one read's records into events: a move within the watch
// (IN_MOVED_FROM and IN_MOVED_TO of one cookie) is RENAMED, a move out of
// it DELETED, a move into it CREATED.
func (w *watcher) translate(raw []rawEvent) (batch []*ctrlv1.FileEvent, ended bool) {
	consumed := map[int]bool{}
	for i, r := range raw {
		if consumed[i] {
			continue
		}
		if r.mask&unix.IN_Q_OVERFLOW != 0 {
			batch = append(batch, &ctrlv1.FileEvent{Kind: ctrlv1.FileEventKind_FILE_EVENT_KIND_OVERFLOW, Path: w.root,
				Type: ctrlv1.FileType_FILE_TYPE_DIRECTORY, ObservedAt: timestamppb.Now()})
			continue
		}
		w.mu.Lock()
		dir, ok := w.dirs[r.wd]
		if r.mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, r.wd)
		}
		w.mu.Unlock()
		if !ok || r.mask&unix.IN_IGNORED != 0 {
			continue
		}
		isDir := r.mask&unix.IN_ISDIR != 0
		if r.mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			if dir.name == w.root {
				batch = append(batch, w.event(ctrlv1.FileEventKind_FILE_EVENT_KIND_DELETED, w.root, dir.host, true))
				return batch, true
			}
			continue // its parent reports it
		}
		if r.name == "" {
			if r.mask&unix.IN_ATTRIB != 0 && dir.name == w.root {
				batch = append(batch, w.event(ctrlv1.FileEventKind_FILE_EVENT_KIND_ATTRIBUTES_CHANGED, w.root, dir.host, true))
			}
			continue
		}
		name, host := path.Join(dir.name, r.name), filepath.Join(dir.host, r.name)
		switch {
		case r.mask&unix.IN_CREATE != 0:
			batch = append(batch, w.event(ctrlv1.FileEventKind_FILE_EVENT_KIND_CREATED, name, host, isDir))
			batch = append(batch, w.watchNew(name, host, isDir)...)
		case r.mask&unix.IN_MODIFY != 0:
			batch = append(batch, w.event(ctrlv1.FileEventKind_FILE_EVENT_KIND_MODIFIED, name, host, isDir))
		case r.mask&unix.IN_ATTRIB != 0:
			batch = append(batch, w.event(ctrlv1.FileEventKind_FILE_EVENT_KIND_ATTRIBUTES_CHANGED, name, host, isDir))
		case r.mask&unix.IN_DELETE != 0:
			batch = append(batch, w.event(ctrlv1.FileEventKind_FILE_EVENT_KIND_DELETED, name, host, isDir))
		case r.mask&unix.IN_MOVED_FROM != 0:
			to := -1
			for j := i + 1; j < len(raw); j++ {
				if raw[j].mask&unix.IN_MOVED_TO != 0 && raw[j].cookie == r.cookie {
					to = j
					break
				}
			}
			if to < 0 {
				batch = append(batch, w.event(ctrlv1.FileEventKind_FILE_EVENT_KIND_DELETED, name, host, isDir))
				w.forget(name)
				continue
			}
			consumed[to] = true
			w.mu.Lock()
			toDir := w.dirs[raw[to].wd]
			w.mu.Unlock()
			newName, newHost := path.Join(toDir.name, raw[to].name), filepath.Join(toDir.host, raw[to].name)
			ev := w.event(ctrlv1.FileEventKind_FILE_EVENT_KIND_RENAMED, name, newHost, isDir)
			ev.NewPath = newName
			batch = append(batch, ev)
			w.rename(name, newName, newHost)
		case r.mask&unix.IN_MOVED_TO != 0:
			batch = append(batch, w.event(ctrlv1.FileEventKind_FILE_EVENT_KIND_CREATED, name, host, isDir))
			batch = append(batch, w.watchNew(name, host, isDir)...)
		}
	}
	return batch, false
}

// watchNew watches a directory that appeared under a recursive watch, and
// reports what it already holds.
func (w *watcher) watchNew(name, host string, isDir bool) []*ctrlv1.FileEvent {
	if !isDir || !w.recursive {
		return nil
	}
	if err := w.add(name, host); err != nil {
		return nil // gone meanwhile
	}
	found, _ := w.addBelow(name, host, true)
	return found
}

// rename moves the names of the watched directories under old to new.
func (w *watcher) rename(old, name, host string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for wd, d := range w.dirs {
		if d.name == old || strings.HasPrefix(d.name, old+"/") {
			rest := strings.TrimPrefix(d.name, old)
			w.dirs[wd] = watchedDir{name: name + rest, host: host + filepath.FromSlash(rest)}
		}
	}
}

// forget stops watching the directories under a path that left the watch.
func (w *watcher) forget(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for wd, d := range w.dirs {
		if d.name == name || strings.HasPrefix(d.name, name+"/") {
			_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.dirs, wd)
		}
	}
}
