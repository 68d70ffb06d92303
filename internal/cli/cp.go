package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/structpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

// cpChunk is the size of WriteFile's data messages (the API allows 1 MiB).
const cpChunk = 512 << 10

func newCopyCommand(out *outputFlag) *cobra.Command {
	var c copier
	cmd := &cobra.Command{
		Use:   "cp [-r] SOURCE DESTINATION",
		Short: "Copy files into or out of a Workspace (WORKSPACE_ID:/path on one side, a local path or - on the other)",
		Long: `cp copies between this machine and a Workspace's guest as cp, scp and
docker cp do:

  kibotos workspace cp ./local.txt ws-123:/root/remote.txt
  kibotos workspace cp ./local.txt ws-123:/root/          # into /root, as local.txt
  kibotos workspace cp -r ./src ws-123:/work              # /work/src, or /work itself when missing
  kibotos workspace cp ws-123:/var/log/app.log .
  tar c dir | kibotos workspace cp - ws-123:/tmp/dir.tar
  kibotos workspace cp ws-123:/etc/os-release -

A DESTINATION that is an existing directory receives SOURCE under its own
name; one that ends in a slash must be an existing directory (-p creates
it). A directory is copied only with -r; symbolic links in it are skipped
(said on stderr). Each file's write is atomic: readers never see a partial
file, and a failed copy leaves none. Progress goes to stderr when it is a
terminal.

Like cp it prints nothing; -o json or yaml prints the source, the
destination it reached (WORKSPACE_ID:/path or a local path), and the files
and bytes written; -o name the destination alone.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[1] == "-" && (out.structured() || out.is("name")) {
				return fmt.Errorf("-o %s: standard output carries the file", out.format)
			}
			files, err := onWorkspace(ctrlv1connect.NewFileServiceClient)
			if err != nil {
				return err
			}
			c.files, c.errOut = files, cmd.ErrOrStderr()
			if isTerminal(cmd.ErrOrStderr()) {
				c.progress = newProgress(cmd.ErrOrStderr())
				defer c.progress.end()
			}
			dst, err := c.copy(cmd.Context(), args[0], args[1], cmd.InOrStdin(), cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return c.written.print(out, cmd.OutOrStdout(), args[0], dst)
		},
	}
	cmd.Flags().StringVar(&c.user, "user", "", "guest user the files are read or written as (default: the Template's)")
	cmd.Flags().BoolVarP(&c.parents, "parents", "p", false, "create the destination's missing parent directories")
	cmd.Flags().BoolVarP(&c.recursive, "recursive", "r", false, "copy directories and what they hold")
	return cmd
}

// remotePath splits "WORKSPACE_ID:/path". A local path never has a colon
// before its first slash.
func remotePath(arg string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(arg, ":")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, p, true
}

type copier struct {
	files              ctrlv1connect.FileServiceClient
	user               string
	parents, recursive bool
	progress           *progress // nil: no progress
	errOut             io.Writer

	mu      sync.Mutex // the files of a tree are copied at once: what they share
	written copyTally
	// tree, while a tree is copied, is what its progress is shown as (the
	// bytes of all its files), treeBytes those bytes so far.
	tree      string
	treeBytes int64
}

// treeCopies is how many files of a tree are copied at once: each file
// is a few round trips to the guest, which dominate a tree of small files
// (500 of them took 7 s one at a time under emulation).
const treeCopies = 8

// copyTally counts the files a copy wrote and their bytes.
type copyTally struct{ files, bytes uint64 }

func (t *copyTally) add(n int64) {
	t.files++
	t.bytes += uint64(n)
}

// print writes a copy's result for -o: with json or yaml the source, the
// destination reached and the tally; with name the destination; else
// nothing, as cp prints nothing. There is no API message for it: the
// document is a Struct, printed as the API's messages are.
func (t copyTally) print(out *outputFlag, w io.Writer, source, destination string) error {
	switch {
	case out.structured():
		doc, err := structpb.NewStruct(map[string]any{"source": source, "destination": destination, "files": t.files, "bytes": t.bytes})
		if err != nil {
			return err
		}
		return out.message(w, doc)
	case out.is("name"):
		_, err := fmt.Fprintln(w, destination)
		return err
	}
	return nil
}

// copy copies source to destination, exactly one of them
// WORKSPACE_ID:/path, and returns where it went, in the same form.
func (c *copier) copy(ctx context.Context, source, destination string, stdin io.Reader, stdout io.Writer) (string, error) {
	srcID, srcPath, srcRemote := remotePath(source)
	dstID, dstPath, dstRemote := remotePath(destination)
	switch {
	case srcRemote && !dstRemote:
		return c.download(ctx, srcID, srcPath, destination, stdout)
	case dstRemote && !srcRemote:
		target, err := c.upload(ctx, source, stdin, dstID, dstPath)
		return dstID + ":" + target, err
	}
	return "", errors.New("exactly one of SOURCE and DESTINATION is WORKSPACE_ID:/path")
}

// upload copies a local file or tree (or stdin for "-") to the guest and
// returns the guest path it went to.
func (c *copier) upload(ctx context.Context, local string, stdin io.Reader, id, remote string) (string, error) {
	if local == "-" {
		if strings.HasSuffix(remote, "/") {
			return "", fmt.Errorf("%s: standard input has no name: give the destination file's", remote)
		}
		target := path.Clean(remote)
		return target, c.uploadFile(ctx, stdin, -1, 0, id, target)
	}
	fi, err := os.Stat(local)
	if err != nil {
		return "", err
	}
	if fi.IsDir() && !c.recursive {
		return "", fmt.Errorf("%s is a directory: copy it with -r", local)
	}
	target, err := c.remoteTarget(ctx, id, remote, filepath.Base(local))
	if err != nil {
		return "", err
	}
	if fi.IsDir() {
		return target, c.uploadTree(ctx, local, id, target)
	}
	return target, c.uploadPath(ctx, local, id, target)
}

// remoteTarget is where SOURCE (named name) goes in the guest: into remote
// when it is a directory, else remote itself. A remote ending in a slash
// must be a directory.
func (c *copier) remoteTarget(ctx context.Context, id, remote, name string) (string, error) {
	into := strings.HasSuffix(remote, "/") && remote != "/"
	clean := path.Clean(remote)
	res, err := c.files.StatFile(ctx, connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: id, Path: clean, FollowSymlinks: true, User: c.user}))
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound && into && c.parents:
		if err := c.mkdir(ctx, id, clean, 0, true); err != nil {
			return "", err
		}
		return path.Join(clean, name), nil
	case connect.CodeOf(err) == connect.CodeNotFound && into:
		return "", fmt.Errorf("%s:%s: no such directory in the guest (-p creates it)", id, remote)
	case connect.CodeOf(err) == connect.CodeNotFound:
		return clean, nil
	case err != nil:
		return "", err
	case res.Msg.GetInfo().GetType() == ctrlv1.FileType_FILE_TYPE_DIRECTORY:
		return path.Join(clean, name), nil
	case into:
		return "", fmt.Errorf("%s:%s: not a directory", id, remote)
	}
	return clean, nil
}

// uploadTree copies a local directory to target, merging into a directory
// already there as cp -r does. Directories are made as the walk reaches
// them, before anything in them; files go treeCopies at a time.
func (c *copier) uploadTree(ctx context.Context, local, id, target string) error {
	g, ctx := c.treeGroup(ctx, "upload "+target)
	walked := filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err() // a file failed: g.Wait says which
		}
		rel, err := filepath.Rel(local, p)
		if err != nil {
			return err
		}
		dst := path.Join(target, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			info, err := d.Info()
			if err != nil {
				return err
			}
			return c.mkdir(ctx, id, dst, uint32(info.Mode().Perm()), c.parents && p == local)
		case d.Type().IsRegular():
			g.Go(func() error { return c.uploadPath(ctx, p, id, dst) })
			return nil
		}
		fmt.Fprintf(c.errOut, "kibotos: skipped %s: not a regular file or directory\n", p)
		return nil
	})
	if err := c.treeDone(g); err != nil {
		return err
	}
	return walked
}

// treeGroup begins the copy of a tree shown as what: its files' copies
// run in the group, at most treeCopies at once, and end at the first
// failure (ctx is cancelled then).
func (c *copier) treeGroup(ctx context.Context, what string) (*errgroup.Group, context.Context) {
	c.mu.Lock()
	c.tree, c.treeBytes = what, 0
	c.mu.Unlock()
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(treeCopies)
	return g, ctx
}

// treeDone waits for a tree's files and returns the first failure.
func (c *copier) treeDone(g *errgroup.Group) error {
	err := g.Wait()
	c.mu.Lock()
	c.tree = ""
	c.mu.Unlock()
	return err
}

// mkdir makes a guest directory; one already there is fine.
func (c *copier) mkdir(ctx context.Context, id, dir string, mode uint32, parents bool) error {
	_, err := c.files.MakeDirectory(ctx, connect.NewRequest(&ctrlv1.MakeDirectoryRequest{WorkspaceId: id, Path: dir, Mode: mode, CreateParents: parents, User: c.user}))
	switch {
	case connect.CodeOf(err) == connect.CodeAlreadyExists:
		return nil
	case connect.CodeOf(err) == connect.CodeNotFound:
		return fmt.Errorf("%s:%s: no such directory in the guest (-p creates it)", id, path.Dir(dir))
	}
	return err
}

// uploadPath copies one local file to target.
func (c *copier) uploadPath(ctx context.Context, local, id, target string) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := int64(-1)
	if fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return c.uploadFile(ctx, f, size, uint32(fi.Mode().Perm()), id, target)
}

// uploadFile streams src (size bytes, or -1 when unknown) to target.
func (c *copier) uploadFile(ctx context.Context, src io.Reader, size int64, mode uint32, id, target string) error {
	header := &ctrlv1.WriteFileHeader{Path: target, Mode: mode, CreateParents: c.parents, User: c.user}
	if size >= 0 {
		n := uint64(size)
		header.SizeBytes = &n
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := c.files.WriteFile(ctx)
	send := func(m *ctrlv1.WriteFileRequest) bool { return stream.Send(m) == nil }
	ok := send(&ctrlv1.WriteFileRequest{WorkspaceId: id, Frame: &ctrlv1.WriteFileRequest_Header{Header: header}})
	buf := make([]byte, cpChunk)
	var done int64
	for ok {
		n, rerr := io.ReadFull(src, buf)
		if n > 0 {
			ok = send(&ctrlv1.WriteFileRequest{Frame: &ctrlv1.WriteFileRequest_Data{Data: buf[:n]}})
			done += int64(n)
			c.show("upload "+target, int64(n), done, size)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			// Cancelling the call leaves the guest's file as it was.
			cancel()
			_, _ = stream.CloseAndReceive()
			return rerr
		}
	}
	// A failed Send means the server answered: CloseAndReceive says why.
	_, err := stream.CloseAndReceive()
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound && !c.parents:
		return fmt.Errorf("%s:%s: no such directory in the guest (-p creates it)", id, path.Dir(target))
	case err == nil:
		c.wrote(done)
	}
	return err
}

// wrote counts a file written whole.
func (c *copier) wrote(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written.add(n)
}

// show shows a file's progress (n more bytes, done of total), or while a
// tree is copied the tree's.
func (c *copier) show(what string, n, done, total int64) {
	if c.progress == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tree != "" {
		c.treeBytes += n
		c.progress.bytes(c.tree, c.treeBytes, -1)
		return
	}
	c.progress.bytes(what, done, total)
}

// download copies a guest file or tree to a local path (a file to stdout
// for "-") and returns the path it went to.
func (c *copier) download(ctx context.Context, id, remote, local string, stdout io.Writer) (string, error) {
	clean := path.Clean(remote)
	st, err := c.files.StatFile(ctx, connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: id, Path: clean, FollowSymlinks: true, User: c.user}))
	if err != nil {
		return "", err
	}
	isDir := st.Msg.GetInfo().GetType() == ctrlv1.FileType_FILE_TYPE_DIRECTORY
	switch {
	case isDir && !c.recursive:
		return "", fmt.Errorf("%s:%s is a directory: copy it with -r", id, remote)
	case isDir && local == "-":
		return "", fmt.Errorf("%s:%s is a directory: it cannot go to standard output", id, remote)
	case local == "-":
		return local, c.downloadFile(ctx, id, clean, "", stdout)
	}
	target, err := c.localTarget(local, path.Base(clean))
	if err != nil {
		return "", err
	}
	if isDir {
		g, gctx := c.treeGroup(ctx, "download "+clean)
		listed := c.downloadTree(gctx, g, id, clean, target)
		if err := c.treeDone(g); err != nil {
			return target, err
		}
		return target, listed
	}
	return target, c.downloadFile(ctx, id, clean, target, nil)
}

// localTarget is where SOURCE (named name) goes here: into local when it
// is a directory, else local itself, whose directory must exist (-p makes
// it). A local ending in a slash must be a directory. Errors name the path
// as the user gave it.
func (c *copier) localTarget(local, name string) (string, error) {
	into := strings.HasSuffix(local, "/")
	fi, err := os.Stat(local)
	switch {
	case err == nil && fi.IsDir():
		return filepath.Join(local, name), nil
	case err == nil && into:
		return "", fmt.Errorf("%s: not a directory", local)
	case err == nil:
		return local, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	case into && c.parents:
		return filepath.Join(local, name), os.MkdirAll(local, 0o755)
	case into:
		return "", fmt.Errorf("%s: no such directory (-p creates it)", local)
	}
	parent := filepath.Dir(local)
	if _, err := os.Stat(parent); errors.Is(err, fs.ErrNotExist) {
		if !c.parents {
			return "", fmt.Errorf("%s: no such directory %s (-p creates it)", local, parent)
		}
		return local, os.MkdirAll(parent, 0o755)
	}
	return local, nil
}

// downloadTree copies a guest directory to target, one level at a time:
// the directories as it lists them, the files in g.
func (c *copier) downloadTree(ctx context.Context, g *errgroup.Group, id, remote, target string) error {
	if err := os.MkdirAll(target, 0o755); err != nil {
		return err
	}
	req := &ctrlv1.ListDirectoryRequest{WorkspaceId: id, Path: remote, User: c.user}
	for {
		res, err := c.files.ListDirectory(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		for _, e := range res.Msg.GetEntries() {
			dst := filepath.Join(target, e.GetName())
			switch e.GetType() {
			case ctrlv1.FileType_FILE_TYPE_DIRECTORY:
				err = c.downloadTree(ctx, g, id, e.GetPath(), dst)
			case ctrlv1.FileType_FILE_TYPE_REGULAR:
				g.Go(func() error { return c.downloadFile(ctx, id, e.GetPath(), dst, nil) })
			default:
				fmt.Fprintf(c.errOut, "kibotos: skipped %s:%s: not a regular file or directory\n", id, e.GetPath())
			}
			if err != nil {
				return err
			}
		}
		if res.Msg.GetNextPageToken() == "" {
			return nil
		}
		req.PageToken = res.Msg.GetNextPageToken()
	}
}

// downloadFile copies one guest file to target, or to w when target is
// empty. A file goes to a temporary file beside target that is renamed
// into place, so a failed copy leaves no partial file.
func (c *copier) downloadFile(ctx context.Context, id, remote, target string, w io.Writer) error {
	stream, err := c.files.ReadFile(ctx, connect.NewRequest(&ctrlv1.ReadFileRequest{WorkspaceId: id, Path: remote, User: c.user}))
	if err != nil {
		return err
	}
	defer stream.Close()
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return err
		}
		return errors.New("the guest sent nothing")
	}
	info := stream.Msg().GetInfo()
	commit, abort := func() error { return nil }, func() {}
	if target != "" {
		f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".kibotos-*")
		if err != nil {
			return fmt.Errorf("%s: %w", target, errors.Unwrap(err))
		}
		w = f
		commit = func() error {
			if err := f.Chmod(os.FileMode(info.GetMode() & 0o777)); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			return os.Rename(f.Name(), target)
		}
		abort = func() {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}
	defer abort()
	var done int64
	for msg := stream.Msg(); ; msg = stream.Msg() {
		if _, err := w.Write(msg.GetData()); err != nil {
			return err
		}
		done += int64(len(msg.GetData()))
		c.show("download "+remote, int64(len(msg.GetData())), done, int64(info.GetSizeBytes()))
		if !stream.Receive() {
			break
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	if err := commit(); err != nil {
		return err
	}
	c.wrote(done)
	return nil
}
