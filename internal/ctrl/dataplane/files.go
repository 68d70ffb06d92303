package dataplane

import (
	"context"

	"connectrpc.com/connect"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
	guestv1 "github.com/kibotos/kibotos/gen/kibotos/guest/v1"
	"github.com/kibotos/kibotos/internal/ctrl/apierr"
	"github.com/kibotos/kibotos/internal/guest"
)

// Files serves FileService by relaying each call to the guest agent, which
// owns the rules of paths, users and errors (internal/guest/files.go,
// watch.go); ctrl adds the Workspace's checks and the stage.
type Files struct {
	*relay
}

var _ ctrlv1connect.FileServiceHandler = (*Files)(nil)

// Stages of the file calls (FileService's comments).
const (
	stageRead    = ctrlv1.FailureStage_FAILURE_STAGE_READING_FILE
	stageWrite   = ctrlv1.FailureStage_FAILURE_STAGE_WRITING_FILE
	stageInspect = ctrlv1.FailureStage_FAILURE_STAGE_INSPECTING_FILE
	stageMkdir   = ctrlv1.FailureStage_FAILURE_STAGE_CREATING_DIRECTORY
	stageMove    = ctrlv1.FailureStage_FAILURE_STAGE_MOVING_FILE
	stageDelete  = ctrlv1.FailureStage_FAILURE_STAGE_DELETING_FILE
	stageWatch   = ctrlv1.FailureStage_FAILURE_STAGE_WATCHING_DIRECTORY
)

// ReadFile streams a file from the guest.
func (f *Files) ReadFile(ctx context.Context, req *connect.Request[ctrlv1.ReadFileRequest], out *connect.ServerStream[ctrlv1.ReadFileResponse]) error {
	g, err := f.guest(ctx, req.Msg.GetWorkspaceId(), stageRead)
	if err != nil {
		return err
	}
	in, err := g.ReadFile(ctx, connect.NewRequest(&guestv1.ReadFileRequest{Request: req.Msg}))
	if err != nil {
		return stageOf(err, stageRead)
	}
	defer in.Close()
	budget := readBudget{length: req.Msg.GetLength()}
	return relayStream(in, (*guestv1.ReadFileResponse).GetResponse, func(m *ctrlv1.ReadFileResponse) error {
		if err := budget.take(m); err != nil {
			return err
		}
		return out.Send(m)
	}, stageRead)
}

// readBudget holds a ReadFile to its limits at ctrl too, whatever the
// guest sends: a guest agent of an older platform streams /dev/zero for
// ever, and a guest is the tenant's machine. The limits are the guest's
// (internal/guest, ReadFile): length, or without one the file's size
// when opened plus guest.ReadToEndSlack.
type readBudget struct {
	length, limit, sent uint64
	opened              bool
}

func (b *readBudget) take(m *ctrlv1.ReadFileResponse) error {
	if !b.opened { // the first message carries the file's info
		b.opened = true
		b.limit = b.length
		if b.limit == 0 {
			b.limit = m.GetInfo().GetSizeBytes() + guest.ReadToEndSlack
		}
	}
	b.sent += uint64(len(m.GetData()))
	if b.sent <= b.limit {
		return nil
	}
	if b.length > 0 {
		return failed(stageRead, ctrlv1.FailureReason_FAILURE_REASON_INTERNAL, connect.CodeInternal, "the guest sent more than the %d bytes asked for", b.length)
	}
	return apierr.New(connect.CodeOutOfRange, &ctrlv1.ErrorDetail{Stage: stageRead, Reason: ctrlv1.FailureReason_FAILURE_REASON_RESOURCE_EXHAUSTED, Field: "length"},
		"the file went on past %d bytes (its size when opened plus %d): read it in ranges with offset and length", b.limit, guest.ReadToEndSlack)
}

// WriteFile relays a client stream of a file's bytes to the guest as they
// arrive; the guest makes the write atomic.
func (f *Files) WriteFile(ctx context.Context, in *connect.ClientStream[ctrlv1.WriteFileRequest]) (*connect.Response[ctrlv1.WriteFileResponse], error) {
	if !in.Receive() {
		if err := in.Err(); err != nil {
			return nil, err
		}
		return nil, apierr.Invalid("header", "the stream carried no message")
	}
	first := in.Msg()
	g, err := f.guest(ctx, first.GetWorkspaceId(), stageWrite)
	if err != nil {
		return nil, err
	}
	// The guest's stream ends with this call: a cancelled call cancels it,
	// and the guest then leaves the old file as it was.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := g.WriteFile(ctx)
	for msg := first; ; msg = in.Msg() {
		if w := msg.GetWorkspaceId(); w != "" && w != first.GetWorkspaceId() {
			return nil, apierr.Invalid("workspace_id", "differs from the first message's")
		}
		if err := out.Send(&guestv1.WriteFileRequest{Request: msg}); err != nil {
			break // the guest answered early: its answer says why
		}
		if !in.Receive() {
			if err := in.Err(); err != nil {
				return nil, err // the caller's stream broke: the old file stays
			}
			break
		}
	}
	res, err := out.CloseAndReceive()
	if err != nil {
		return nil, stageOf(err, stageWrite)
	}
	return connect.NewResponse(res.Msg.GetResponse()), nil
}

// StatFile reads one path's metadata.
func (f *Files) StatFile(ctx context.Context, req *connect.Request[ctrlv1.StatFileRequest]) (*connect.Response[ctrlv1.StatFileResponse], error) {
	g, err := f.guest(ctx, req.Msg.GetWorkspaceId(), stageInspect)
	if err != nil {
		return nil, err
	}
	return unary(ctx, stageInspect, g.StatFile, &guestv1.StatFileRequest{Request: req.Msg}, (*guestv1.StatFileResponse).GetResponse)
}

// ListDirectory lists a directory in pages.
func (f *Files) ListDirectory(ctx context.Context, req *connect.Request[ctrlv1.ListDirectoryRequest]) (*connect.Response[ctrlv1.ListDirectoryResponse], error) {
	g, err := f.guest(ctx, req.Msg.GetWorkspaceId(), stageInspect)
	if err != nil {
		return nil, err
	}
	return unary(ctx, stageInspect, g.ListDirectory, &guestv1.ListDirectoryRequest{Request: req.Msg}, (*guestv1.ListDirectoryResponse).GetResponse)
}

// MakeDirectory creates a directory.
func (f *Files) MakeDirectory(ctx context.Context, req *connect.Request[ctrlv1.MakeDirectoryRequest]) (*connect.Response[ctrlv1.MakeDirectoryResponse], error) {
	g, err := f.guest(ctx, req.Msg.GetWorkspaceId(), stageMkdir)
	if err != nil {
		return nil, err
	}
	return unary(ctx, stageMkdir, g.MakeDirectory, &guestv1.MakeDirectoryRequest{Request: req.Msg}, (*guestv1.MakeDirectoryResponse).GetResponse)
}

// MoveFile renames a file or directory.
func (f *Files) MoveFile(ctx context.Context, req *connect.Request[ctrlv1.MoveFileRequest]) (*connect.Response[ctrlv1.MoveFileResponse], error) {
	g, err := f.guest(ctx, req.Msg.GetWorkspaceId(), stageMove)
	if err != nil {
		return nil, err
	}
	return unary(ctx, stageMove, g.MoveFile, &guestv1.MoveFileRequest{Request: req.Msg}, (*guestv1.MoveFileResponse).GetResponse)
}

// DeleteFile removes a path.
func (f *Files) DeleteFile(ctx context.Context, req *connect.Request[ctrlv1.DeleteFileRequest]) (*connect.Response[ctrlv1.DeleteFileResponse], error) {
	g, err := f.guest(ctx, req.Msg.GetWorkspaceId(), stageDelete)
	if err != nil {
		return nil, err
	}
	return unary(ctx, stageDelete, g.DeleteFile, &guestv1.DeleteFileRequest{Request: req.Msg}, (*guestv1.DeleteFileResponse).GetResponse)
}

// WatchDirectory streams the changes under a directory.
func (f *Files) WatchDirectory(ctx context.Context, req *connect.Request[ctrlv1.WatchDirectoryRequest], out *connect.ServerStream[ctrlv1.WatchDirectoryResponse]) error {
	g, err := f.guest(ctx, req.Msg.GetWorkspaceId(), stageWatch)
	if err != nil {
		return err
	}
	in, err := g.WatchDirectory(ctx, connect.NewRequest(&guestv1.WatchDirectoryRequest{Request: req.Msg}))
	if err != nil {
		return stageOf(err, stageWatch)
	}
	defer in.Close()
	return relayStream(in, (*guestv1.WatchDirectoryResponse).GetResponse, out.Send, stageWatch)
}

// relayStream sends each message of a guest stream on, unwrapped, and
// names stage on a failure.
func relayStream[G, M any](in *connect.ServerStreamForClient[G], unwrap func(*G) *M, send func(*M) error, stage ctrlv1.FailureStage) error {
	for in.Receive() {
		if err := send(unwrap(in.Msg())); err != nil {
			return err
		}
	}
	if err := in.Err(); err != nil {
		return relayErr(err, stage)
	}
	return nil
}
