package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

// cpChunk is the size of WriteFile's data messages (the API allows 1 MiB).
const cpChunk = 512 << 10

func newCopyCommand() *cobra.Command {
	var user string
	var parents bool
	c := &cobra.Command{
		Use:   "cp SOURCE DESTINATION",
		Short: "Copy a file into or out of a Workspace (WORKSPACE_ID:/path on one side, a local path or - on the other)",
		Long: `cp copies one file between this machine and a Workspace's guest:

  kibotos workspace cp ./local.txt ws-123:/root/remote.txt
  kibotos workspace cp ws-123:/var/log/app.log ./app.log
  tar c dir | kibotos workspace cp - ws-123:/tmp/dir.tar
  kibotos workspace cp ws-123:/etc/os-release -

A destination that is a directory receives the file under the source's
name. A write is atomic in the guest: readers never see a partial file.
Progress goes to stderr when it is a terminal.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := onWorkspace(ctrlv1connect.NewFileServiceClient)
			if err != nil {
				return err
			}
			cp := copier{files: files, user: user, parents: parents, progress: progressOn(cmd.ErrOrStderr())}
			srcID, srcPath, srcRemote := remotePath(args[0])
			dstID, dstPath, dstRemote := remotePath(args[1])
			switch {
			case srcRemote && !dstRemote:
				return cp.download(cmd.Context(), srcID, srcPath, args[1], cmd.OutOrStdout())
			case dstRemote && !srcRemote:
				return cp.upload(cmd.Context(), args[0], cmd.InOrStdin(), dstID, dstPath)
			default:
				return errors.New("exactly one of SOURCE and DESTINATION is WORKSPACE_ID:/path")
			}
		},
	}
	c.Flags().StringVar(&user, "user", "", "guest user the file is read or written as (default: the Template's)")
	c.Flags().BoolVarP(&parents, "parents", "p", false, "create the destination's missing parent directories in the guest")
	return c
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
	files    ctrlv1connect.FileServiceClient
	user     string
	parents  bool
	progress io.Writer // nil: no progress
}

// upload copies a local file (or stdin for "-") to the guest.
func (c copier) upload(ctx context.Context, local string, stdin io.Reader, id, remote string) error {
	src, name, mode, size := stdin, "stdin", uint32(0), int64(-1)
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return fmt.Errorf("%s is a directory: cp copies one file", local)
		}
		src, name, mode = f, filepath.Base(local), uint32(fi.Mode().Perm())
		if fi.Mode().IsRegular() {
			size = fi.Size()
		}
	}
	remote, err := c.intoDirectory(ctx, id, remote, name)
	if err != nil {
		return err
	}
	header := &ctrlv1.WriteFileHeader{Path: remote, Mode: mode, CreateParents: c.parents, User: c.user}
	if size >= 0 {
		n := uint64(size)
		header.SizeBytes = &n
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := c.files.WriteFile(ctx)
	send := func(m *ctrlv1.WriteFileRequest) bool { return stream.Send(m) == nil }
	meter := c.meter("upload "+remote, size)
	ok := send(&ctrlv1.WriteFileRequest{WorkspaceId: id, Frame: &ctrlv1.WriteFileRequest_Header{Header: header}})
	buf := make([]byte, cpChunk)
	for ok {
		n, rerr := io.ReadFull(src, buf)
		if n > 0 {
			ok = send(&ctrlv1.WriteFileRequest{Frame: &ctrlv1.WriteFileRequest_Data{Data: buf[:n]}})
			meter.add(n)
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
	_, err = stream.CloseAndReceive()
	meter.done()
	return err
}

// download copies a guest file to a local path (or stdout for "-").
func (c copier) download(ctx context.Context, id, remote, local string, stdout io.Writer) error {
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
	out, commit, abort, err := c.localTarget(local, path.Base(remote), os.FileMode(info.GetMode()&0o777), stdout)
	if err != nil {
		return err
	}
	defer abort()
	meter := c.meter("download "+remote, int64(info.GetSizeBytes()))
	for msg := stream.Msg(); ; msg = stream.Msg() {
		if _, err := out.Write(msg.GetData()); err != nil {
			return err
		}
		meter.add(len(msg.GetData()))
		if !stream.Receive() {
			break
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	meter.done()
	return commit()
}

// localTarget opens where a download goes: stdout, or a temporary file
// beside the destination that commit renames into place, so a failed copy
// leaves no partial file.
func (c copier) localTarget(local, name string, mode os.FileMode, stdout io.Writer) (io.Writer, func() error, func(), error) {
	if local == "-" {
		return stdout, func() error { return nil }, func() {}, nil
	}
	if fi, err := os.Stat(local); err == nil && fi.IsDir() {
		local = filepath.Join(local, name)
	}
	f, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".kibotos-*")
	if err != nil {
		return nil, nil, nil, err
	}
	commit := func() error {
		if err := f.Chmod(mode); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return os.Rename(f.Name(), local)
	}
	abort := func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}
	return f, commit, abort, nil
}

// intoDirectory is remote/name when remote is an existing directory in the
// guest, else remote.
func (c copier) intoDirectory(ctx context.Context, id, remote, name string) (string, error) {
	res, err := c.files.StatFile(ctx, connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: id, Path: remote, FollowSymlinks: true, User: c.user}))
	switch {
	case connect.CodeOf(err) == connect.CodeNotFound:
		return remote, nil
	case err != nil:
		return "", err
	case res.Msg.GetInfo().GetType() == ctrlv1.FileType_FILE_TYPE_DIRECTORY:
		return path.Join(remote, name), nil
	}
	return remote, nil
}

// progressOn is w when it is a terminal, else nil: progress is for people.
func progressOn(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return nil
	}
	return w
}

// meter shows a copy's progress on one terminal line, a few times a
// second, once the copy has taken longer than quiet: a quick one shows
// nothing.
type meter struct {
	w             io.Writer
	what          string
	total, copied int64
	start, last   time.Time
}

// Progress timing.
const (
	quiet     = time.Second
	showEvery = 200 * time.Millisecond
)

func (c copier) meter(what string, total int64) *meter {
	return &meter{w: c.progress, what: what, total: total, start: time.Now()}
}

func (m *meter) add(n int) {
	m.copied += int64(n)
	if m.w == nil || time.Since(m.start) < quiet || time.Since(m.last) < showEvery {
		return
	}
	m.last = time.Now()
	m.show()
}

func (m *meter) show() {
	if m.total > 0 {
		fmt.Fprintf(m.w, "\r%s: %s of %s (%d%%)", m.what, inMiB(m.copied), inMiB(m.total), m.copied*100/m.total)
	} else {
		fmt.Fprintf(m.w, "\r%s: %s", m.what, inMiB(m.copied))
	}
}

func (m *meter) done() {
	if m.w == nil || m.last.IsZero() {
		return // a quick copy shows nothing
	}
	m.show()
	fmt.Fprintln(m.w)
}

func inMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
