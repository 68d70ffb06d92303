package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

func fileClient() (ctrlv1connect.FileServiceClient, error) {
	return onWorkspace(ctrlv1connect.NewFileServiceClient)
}

var fileHeader = []string{"PATH", "MODE", "OWNER", "GROUP", "SIZE", "MODIFIED"}

// fileRow is a FileInfo as `ls -l` shows it: the mode as ls writes it, a
// link's target after its path, a uid or gid without a name as its number.
func fileRow(f *ctrlv1.FileInfo) []string {
	path := f.GetPath()
	if f.GetType() == ctrlv1.FileType_FILE_TYPE_SYMLINK {
		path += " -> " + f.GetSymlinkTarget()
	}
	owner, group := f.GetOwner(), f.GetGroup()
	if owner == "" {
		owner = strconv.FormatUint(uint64(f.GetUid()), 10)
	}
	if group == "" {
		group = strconv.FormatUint(uint64(f.GetGid()), 10)
	}
	return []string{path, lsMode(f.GetType(), f.GetMode()), owner, group, strconv.FormatUint(f.GetSizeBytes(), 10), f.GetModifiedAt().AsTime().UTC().Format(time.RFC3339)}
}

// lsMode writes a type and permission bits as ls -l does: drwxr-xr-x, with
// s or S for setuid and setgid and t or T for sticky over the x they share
// a place with (Go's fs.FileMode writes those as prefix letters instead).
func lsMode(t ctrlv1.FileType, mode uint32) string {
	b := []byte("?rwxrwxrwx")
	switch t {
	case ctrlv1.FileType_FILE_TYPE_REGULAR:
		b[0] = '-'
	case ctrlv1.FileType_FILE_TYPE_DIRECTORY:
		b[0] = 'd'
	case ctrlv1.FileType_FILE_TYPE_SYMLINK:
		b[0] = 'l'
	}
	for i := range 9 {
		if mode&(1<<(8-i)) == 0 {
			b[i+1] = '-'
		}
	}
	special := func(bit uint32, at int, set byte) {
		if mode&bit == 0 {
			return
		}
		if b[at] == 'x' {
			b[at] = set
		} else {
			b[at] = set - 'a' + 'A'
		}
	}
	special(0o4000, 3, 's')
	special(0o2000, 6, 's')
	special(0o1000, 9, 't')
	return string(b)
}

// newFilesCommand is `kibotos workspace files`: FileService's calls but
// for reads and writes of content, which are cp's.
func newFilesCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{
		Use: "files", Aliases: []string{"fs"},
		Short: "List, inspect, make, move, delete and watch paths in a Workspace's guest (content: see cp)",
		Long: `files reaches FileService directly: no process runs in the guest. Paths
are absolute guest paths; each command acts as --user (default: the
Template's user). SIZE is in bytes and MODIFIED in UTC, as ls -l would
have them.`,
	}
	var user string
	c.PersistentFlags().StringVarP(&user, "user", "u", "", "guest user to act as (name or uid; default: the Template's)")

	var depth uint32
	ls := &cobra.Command{
		Use: "ls WORKSPACE_ID PATH", Short: "List a directory (--depth N: N levels below it), sorted by path", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := fileClient()
			if err != nil {
				return err
			}
			all := &ctrlv1.ListDirectoryResponse{}
			req := &ctrlv1.ListDirectoryRequest{WorkspaceId: args[0], Path: args[1], Depth: depth, User: user}
			for {
				res, err := client.ListDirectory(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				all.Entries = append(all.Entries, res.Msg.GetEntries()...)
				if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
					break
				}
			}
			var rows [][]string
			for _, f := range all.GetEntries() {
				rows = append(rows, fileRow(f))
			}
			return out.print(cmd.OutOrStdout(), all, fileHeader, rows)
		},
	}
	ls.Flags().Uint32Var(&depth, "depth", 1, "levels to descend (1: the directory's own entries; at most 16)")

	var follow bool
	stat := &cobra.Command{
		Use: "stat WORKSPACE_ID PATH", Short: "Show one path's metadata (a link itself unless --follow)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := fileClient()
			if err != nil {
				return err
			}
			res, err := client.StatFile(cmd.Context(), connect.NewRequest(&ctrlv1.StatFileRequest{WorkspaceId: args[0], Path: args[1], FollowSymlinks: follow, User: user}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, fileHeader, [][]string{fileRow(res.Msg.GetInfo())})
		},
	}
	stat.Flags().BoolVarP(&follow, "follow", "L", false, "describe a symbolic link's target instead of the link")

	var parents bool
	var mode string
	mkdir := &cobra.Command{
		Use: "mkdir WORKSPACE_ID PATH", Short: "Make a directory (-p: and its missing parents)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			perm, err := parseMode(mode)
			if err != nil {
				return err
			}
			client, err := fileClient()
			if err != nil {
				return err
			}
			res, err := client.MakeDirectory(cmd.Context(), connect.NewRequest(&ctrlv1.MakeDirectoryRequest{WorkspaceId: args[0], Path: args[1], Mode: perm, CreateParents: parents, User: user}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, fileHeader, [][]string{fileRow(res.Msg.GetInfo())})
		},
	}
	mkdir.Flags().BoolVarP(&parents, "parents", "p", false, "make missing parent directories too")
	mkdir.Flags().StringVarP(&mode, "mode", "m", "", "permission bits in octal (default 0755)")

	var overwrite, moveParents bool
	mv := &cobra.Command{
		Use: "mv WORKSPACE_ID SOURCE DESTINATION", Short: "Move or rename a path (--overwrite: replace what DESTINATION holds)", Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := fileClient()
			if err != nil {
				return err
			}
			res, err := client.MoveFile(cmd.Context(), connect.NewRequest(&ctrlv1.MoveFileRequest{WorkspaceId: args[0], SourcePath: args[1], DestinationPath: args[2],
				Overwrite: overwrite, CreateParents: moveParents, User: user}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, fileHeader, [][]string{fileRow(res.Msg.GetInfo())})
		},
	}
	mv.Flags().BoolVar(&overwrite, "overwrite", false, "replace an existing DESTINATION")
	mv.Flags().BoolVarP(&moveParents, "parents", "p", false, "make DESTINATION's missing parent directories")

	var recursive, force bool
	rm := &cobra.Command{
		Use: "rm WORKSPACE_ID PATH", Short: "Delete a path (-r: a directory and what it holds; -f: a missing path is no error)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := fileClient()
			if err != nil {
				return err
			}
			res, err := client.DeleteFile(cmd.Context(), connect.NewRequest(&ctrlv1.DeleteFileRequest{WorkspaceId: args[0], Path: args[1], Recursive: recursive, AllowMissing: force, User: user}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, []string{"PATH", "DELETED"}, [][]string{{args[1], strconv.FormatBool(res.Msg.GetDeleted())}})
		},
	}
	rm.Flags().BoolVarP(&recursive, "recursive", "r", false, "delete a directory and everything under it")
	rm.Flags().BoolVarP(&force, "force", "f", false, "succeed when the path does not exist (DELETED false)")

	var watchRecursive bool
	watch := &cobra.Command{
		Use:   "watch WORKSPACE_ID PATH",
		Short: "Print a directory's changes as they happen, one a line, until Ctrl-C",
		Long: `watch prints each change under a directory as it happens, one line each:
the guest's time, what happened (created, modified, deleted, renamed,
attributes_changed, overflow: events were lost) and the path (for a rename,
"OLD -> NEW"). It says on stderr once the watch is in place, so a change
made after that line is seen. -o json prints the stream's messages instead.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := fileClient()
			if err != nil {
				return err
			}
			stream, err := client.WatchDirectory(cmd.Context(), connect.NewRequest(&ctrlv1.WatchDirectoryRequest{WorkspaceId: args[0], Path: args[1], Recursive: watchRecursive, User: user}))
			if err != nil {
				return err
			}
			defer stream.Close()
			for stream.Receive() {
				if err := showWatch(cmd, out, stream.Msg(), args[1]); err != nil {
					return err
				}
			}
			if err := stream.Err(); err != nil && cmd.Context().Err() == nil {
				return err
			}
			return nil
		},
	}
	watch.Flags().BoolVarP(&watchRecursive, "recursive", "r", false, "watch every directory below PATH too")

	c.AddCommand(ls, stat, mkdir, mv, rm, watch)
	return c
}

// showWatch prints one WatchDirectory message.
func showWatch(cmd *cobra.Command, out *outputFlag, m *ctrlv1.WatchDirectoryResponse, dir string) error {
	if out.structured() {
		return out.line(cmd.OutOrStdout(), m)
	}
	switch item := m.GetItem().(type) {
	case *ctrlv1.WatchDirectoryResponse_Started:
		fmt.Fprintf(cmd.ErrOrStderr(), "kibotos: watching %s\n", dir)
	case *ctrlv1.WatchDirectoryResponse_Event:
		ev := item.Event
		path := ev.GetPath()
		if ev.GetNewPath() != "" {
			path += " -> " + ev.GetNewPath()
		}
		kind := trimEnum(ev.GetKind().String(), "FILE_EVENT_KIND_")
		fmt.Fprintf(cmd.OutOrStdout(), "%s  %s  %s\n", ev.GetObservedAt().AsTime().UTC().Format(time.RFC3339Nano), strings.ToLower(kind), path)
	}
	return nil
}

// parseMode reads octal permission bits; "" is zero (the call's default).
func parseMode(s string) (uint32, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o7777 {
		return 0, fmt.Errorf("mode %q: want permission bits in octal, such as 0755", s)
	}
	return uint32(n), nil
}
